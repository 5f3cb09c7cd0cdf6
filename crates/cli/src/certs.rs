//! `strata certs`: a development CA and the certificates of nodes and clients
//! (`strata_tls::gen`). Private keys are written with mode 0600.

use std::path::PathBuf;

use strata_tls::files;
use strata_tls::gen::{self, Ca, DEFAULT_CA_DAYS, DEFAULT_CERT_DAYS};
use strata_wire::{NodeId, Role};

use crate::exit::{Failure, FAILED, OK, USAGE};

#[derive(clap::Args, Debug, Clone)]
pub struct CertsArgs {
    /// Directory of the CA and the certificates. Default: `<data-dir>/tls`, where `strata up`
    /// keeps (and makes, at its first start) its cluster's.
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Data directory of the `strata up` cluster (for the default --dir).
    #[arg(long, global = true, env = "STRATA_DATA_DIR", default_value = "strata-data")]
    pub data_dir: PathBuf,
    /// Validity of the certificates made, in days (default: 3650 for a CA, 825 otherwise).
    #[arg(long, global = true, value_name = "DAYS")]
    pub days: Option<u32>,
    #[command(subcommand)]
    pub command: CertsCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum CertsCommand {
    /// Everything a local cluster of N nodes needs, keeping what exists: the CA (ca.pem,
    /// ca.key), node-<i>.pem / .key for i in 0..N, and an admin client certificate as
    /// client.pem / client.key (what the CLI presents by default). `strata up` does this.
    Init {
        /// Number of nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u32,
    },
    /// A new CA: ca.pem (every process trusts it) and ca.key (it issues). Refuses to replace
    /// an existing one unless --force: certificates of the old CA stop working.
    Ca {
        #[arg(long)]
        force: bool,
    },
    /// A node's certificate, issued by the CA of --dir: node-<ID>.pem and node-<ID>.key. It
    /// names `node-<ID>`: peers accept its connections as node ID and no other.
    Node {
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=63))]
        id: u32,
    },
    /// A client certificate, issued by the CA of --dir: NAME.pem and NAME.key (`--name client`
    /// replaces the one the CLI presents by default). Its role decides what the client may do:
    /// read (sessions, reads, status), write (and every write), admin (and faults, tables,
    /// shard moves).
    Client {
        #[arg(long, value_parser = ["read", "write", "admin"])]
        role: String,
        /// The client's name (the certificate's common name, and the files' names).
        #[arg(long, default_value = "client")]
        name: String,
    },
}

pub fn run(args: CertsArgs) -> Result<i32, Failure> {
    let dir = args.dir.clone().unwrap_or_else(|| args.data_dir.join("tls"));
    let failed = |e: strata_tls::TlsError| Failure::new(FAILED, e.to_string());
    let days = |default| args.days.unwrap_or(default);
    match &args.command {
        CertsCommand::Init { nodes } => {
            let ids: Vec<NodeId> = (0..*nodes).map(NodeId).collect();
            let report = gen::init_dir(&dir, &ids).map_err(failed)?;
            for f in &report.created {
                println!("made {}", f.display());
            }
            if report.created.is_empty() {
                println!("{}: everything was there already", dir.display());
            }
        }
        CertsCommand::Ca { force } => {
            let ca_cert = dir.join(files::CA_CERT);
            if ca_cert.exists() && !force {
                return Err(Failure::new(
                    USAGE,
                    format!(
                        "{} exists; --force replaces it (certificates of the old CA stop working)",
                        ca_cert.display()
                    ),
                ));
            }
            Ca::new(days(DEFAULT_CA_DAYS)).and_then(|ca| ca.write(&dir)).map_err(failed)?;
            println!("made {} and {}", ca_cert.display(), dir.join(files::CA_KEY).display());
        }
        CertsCommand::Node { id } => {
            let ca = Ca::load(&dir).map_err(failed)?;
            let issued = ca.issue_node(NodeId(*id), days(DEFAULT_CERT_DAYS)).map_err(failed)?;
            let (cert, key) = issued.write(&dir, &format!("node-{id}")).map_err(failed)?;
            println!("made {} and {} (node {id})", cert.display(), key.display());
        }
        CertsCommand::Client { role, name } => {
            let role: Role = role.parse().map_err(|e: String| Failure::new(USAGE, e))?;
            let stem_ok = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !stem_ok || name == "ca" || name.starts_with("node-") {
                return Err(Failure::new(
                    USAGE,
                    "--name: letters, digits, - and _ only, and not `ca` or `node-*`",
                ));
            }
            let ca = Ca::load(&dir).map_err(failed)?;
            let issued = ca.issue_client(role, name, days(DEFAULT_CERT_DAYS)).map_err(failed)?;
            let (cert, key) = issued.write(&dir, name).map_err(failed)?;
            println!("made {} and {} (role {role})", cert.display(), key.display());
            if name != "client" {
                println!("use it with: --tls-cert {} --tls-key {}", cert.display(), key.display());
            }
        }
    }
    Ok(OK)
}
