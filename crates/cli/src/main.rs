//! `strata`: run a local cluster, read and write keys, inspect nodes, inject faults.
//! `strata --help` lists the commands; each has its own `--help`.

mod certs;
mod chaos;
mod cluster_file;
mod credentials;
mod exit;
mod lease_model;
mod ops;
mod table_write;
mod txn;
mod up;

use clap::{Parser, Subcommand};

use exit::Failure;

#[derive(Parser, Debug)]
#[command(name = "strata", version, about = "Strata: a replicated key-value store where every operation chooses its consistency", after_help = exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant (`bench`'s flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Start a local cluster of node processes and supervise it until Ctrl-C.
    Up(up::UpArgs),
    /// Run one node in this process (what `strata up` starts; see `strata-node --help`).
    Node(strata_node::NodeArgs),
    /// Make a development CA and the certificates of nodes and clients (PEM; keys 0600).
    /// `strata up` makes what a local cluster needs in <data-dir>/tls by itself.
    Certs(certs::CertsArgs),
    /// Read a key; prints the value. Exit code 3 if it has none. Relaxed (one node's replica)
    /// unless --acquire. With --table, reads a log table (durable, monotonic: ORCA §2).
    Get {
        key: String,
        /// Acquire-read: linearizable, and everything written before the release it reads
        /// from is visible to this session afterwards (Kite §5.5).
        #[arg(long, conflicts_with = "table")]
        acquire: bool,
        /// Read from this log table instead of the default (Kite) keyspace.
        #[arg(long)]
        table: Option<String>,
        /// Also print the version (carstamp) on stderr.
        #[arg(long)]
        show_version: bool,
        /// Write the value's bytes as they are, also to a terminal. Without it, a value that
        /// is not printable text is escaped on a terminal (`\xNN`, `\n`, ...); to a pipe or
        /// file it is always written as it is.
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Write a key. Relaxed (applied at one node, replicated to all) unless --release. With
    /// --table, writes through the shard leader of a log table (--show-version prints the
    /// write's log index). The value is VALUE, or the bytes of --value-file (`-`: standard
    /// input), for large or binary values (at most the cluster's max_value_bytes, 1 MiB by
    /// default).
    Put {
        key: String,
        #[arg(required_unless_present = "value_file")]
        value: Option<String>,
        /// Read the value from this file (`-`: standard input), byte for byte.
        #[arg(long, value_name = "PATH", conflicts_with = "value")]
        value_file: Option<std::path::PathBuf>,
        /// Release-write: completes once a quorum holds it, after every earlier write of the
        /// session is visible (Kite §5.4).
        #[arg(long, conflicts_with = "table")]
        release: bool,
        /// Write to this log table instead of the default (Kite) keyspace.
        #[arg(long)]
        table: Option<String>,
        /// Log tables: acknowledge only once durable on a majority (never lost, ORCA G6).
        #[arg(long, requires = "table")]
        immediate: bool,
        #[command(flatten)]
        condition: table_write::Condition,
        #[arg(long)]
        show_version: bool,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Delete a key (in a log table with --table).
    Del {
        key: String,
        /// Delete from this log table instead of the default (Kite) keyspace.
        #[arg(long)]
        table: Option<String>,
        /// Log tables: acknowledge only once durable on a majority (never lost, ORCA G6).
        #[arg(long, requires = "table")]
        immediate: bool,
        #[command(flatten)]
        condition: table_write::Condition,
        #[arg(long)]
        show_version: bool,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Fetch-and-add: adds DELTA to the key's counter (decimal text, as in Redis: `put k 10`
    /// makes one; absent = 0) and prints the previous value. A value that is not a counter,
    /// or a sum beyond 18446744073709551615, is refused and left unchanged. With --table, on a
    /// log table, where DELTA may be negative (a counter never goes below 0).
    Faa {
        key: String,
        #[arg(allow_negative_numbers = true)]
        delta: i64,
        /// Add in this log table instead of the default (Kite) keyspace.
        #[arg(long)]
        table: Option<String>,
        #[arg(long)]
        show_version: bool,
        /// Run N increments one after another in one session (exactly once each), printing
        /// each previous value on its own line; an increment whose outcome is unknown (the
        /// client's lease expired meanwhile) prints `?` and the run goes on (exit 5 at the end).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        repeat: u64,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Compare-and-swap: sets KEY to NEW iff its value is EXPECTED (or absent, with
    /// --expect-absent, and then no EXPECTED). Prints whether it swapped and the value seen
    /// (with --table, a log table: the key's version). Exit code 6 when it did not swap.
    Cas {
        /// Swap in this log table instead of the default (Kite) keyspace.
        #[arg(long, conflicts_with = "weak")]
        table: Option<String>,
        /// KEY EXPECTED NEW, or KEY NEW with --expect-absent.
        #[arg(required = true, num_args = 2..=3, value_names = ["KEY", "EXPECTED", "NEW"])]
        args: Vec<String>,
        /// Expect the key to have no value.
        #[arg(long)]
        expect_absent: bool,
        /// Weak CAS: may fail at once, without contacting other nodes, when the local replica
        /// differs (Kite §2.2).
        #[arg(long)]
        weak: bool,
        #[arg(long)]
        show_version: bool,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Run one transaction over log tables created with --txn rifl, read from standard input,
    /// one operation per line: `get K`, `put K V`, `del K`, `add K DELTA` (a counter change),
    /// `check K V` (abort unless K holds V); a key is TABLE:KEY or KEY of --table. Prints each
    /// get's value, then `committed`, or `aborted: REASON` (exit code 8). `strata txn
    /// lease-model --r-ms R --w-ms W` prints Kairos's ideal cache lease for a key instead.
    Txn(txn::TxnArgs),
    /// Closed-loop load generator against the local cluster (default), any Strata endpoints, or
    /// a Redis server (`--target redis`); see docs/benchmarks.md.
    Bench {
        /// Data directory of the `strata up` cluster (for its endpoints when none are given).
        // Before the flattened groups, whose help headings would otherwise take it in.
        #[arg(long, env = "STRATA_DATA_DIR", default_value = "strata-data")]
        data_dir: std::path::PathBuf,
        #[command(flatten)]
        args: strata_bench::BenchArgs,
    },
    /// Show every node's state: keys, sessions, pending writes, peers, faults.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Create or list log tables.
    Table {
        #[command(subcommand)]
        command: ops::TableCommand,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Move log-table shards between nodes.
    Shard {
        #[command(subcommand)]
        command: ops::ShardCommand,
        #[command(flatten)]
        target: ops::Target,
    },
    /// Fault harnesses: start node processes, crash and slow them, check what clients saw.
    Chaos {
        #[command(subcommand)]
        command: chaos::ChaosCommand,
    },
    /// Inject (or clear) delay, loss or a partition on a node's outbound links.
    Fault {
        #[command(flatten)]
        fault: ops::FaultArgs,
        #[command(flatten)]
        target: ops::Target,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => up::run(args),
        Command::Node(args) => run_node(args),
        Command::Certs(args) => certs::run(args),
        Command::Get { key, table: Some(table), show_version, raw, target, .. } => {
            block_on(ops::table_get(&target, table, key, show_version, raw))
        }
        Command::Get { key, acquire, show_version, raw, target, table: None } => {
            block_on(ops::get(&target, key, acquire, show_version, raw))
        }
        Command::Put {
            key,
            value,
            value_file,
            table: Some(table),
            immediate,
            condition,
            show_version,
            target,
            ..
        } => ops::read_value(value, value_file).and_then(|v| {
            let put = table_write::put(&target, table, key, Some(v), &condition, immediate, show_version);
            block_on(put)
        }),
        Command::Put { key, value, value_file, release, show_version, target, .. } => {
            ops::read_value(value, value_file)
                .and_then(|v| block_on(ops::put(&target, key, v, release, show_version)))
        }
        Command::Faa { key, delta, table: Some(table), show_version, repeat, target } => {
            block_on(table_write::faa(&target, table, key, delta, repeat, show_version))
        }
        Command::Faa { key, delta, show_version, repeat, target, table: None } => {
            match u64::try_from(delta) {
                Ok(delta) => block_on(ops::faa(&target, key, delta, show_version, repeat)),
                Err(_) => Err(Failure::new(
                    exit::USAGE,
                    "the Kite keyspace's counters only go up (Kite FAA); log tables (--table) take negative deltas",
                )),
            }
        }
        Command::Cas { args, expect_absent, table: Some(table), show_version, target, .. } => {
            ops::cas_args(args, expect_absent).and_then(|(key, expected, new)| {
                block_on(table_write::cas(&target, table, key, expected, new, show_version))
            })
        }
        Command::Cas { args, expect_absent, weak, show_version, target, table: None } => {
            ops::cas_args(args, expect_absent).and_then(|(key, expected, new)| {
                block_on(ops::cas(&target, key, expected, new, weak, show_version))
            })
        }
        Command::Del { key, table: Some(table), immediate, condition, show_version, target } => {
            let del = table_write::put(&target, table, key, None, &condition, immediate, show_version);
            block_on(del)
        }
        Command::Del { key, show_version, target, .. } => {
            block_on(ops::del(&target, key, show_version))
        }
        Command::Table { command, target } => block_on(ops::table(&target, command)),
        Command::Shard { command, target } => block_on(ops::shard(&target, command)),
        Command::Status { json, target } => block_on(ops::status(&target, json)),
        Command::Bench { args, data_dir } => bench(args, &data_dir),
        Command::Fault { fault, target } => block_on(ops::fault(&target, &fault)),
        Command::Chaos { command } => chaos::run(command),
        Command::Txn(args) => txn::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("strata: {}", f.message);
            std::process::exit(f.code);
        }
    }
}

fn block_on<F: std::future::Future<Output = Result<i32, Failure>>>(f: F) -> Result<i32, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(exit::FAILED, format!("cannot start the runtime: {e}")))?;
    rt.block_on(f)
}

/// `strata bench`: endpoints from the flags, or (for Strata) from the running local cluster.
fn bench(mut args: strata_bench::BenchArgs, data_dir: &std::path::Path) -> Result<i32, Failure> {
    let endpoints = match (&args.conn.endpoints, args.conn.target) {
        (Some(e), _) => e.clone(),
        (None, strata_bench::Target::Strata) => {
            let file = cluster_file::ClusterFile::read(data_dir)?;
            args.conn.cluster_id = args.conn.cluster_id.or(Some(file.cluster_id));
            file.endpoints()
        }
        (None, _) => Vec::new(), // the target's default (Redis: 127.0.0.1:6379)
    };
    if args.conn.target == strata_bench::Target::Strata {
        // TLS credentials as every other command finds them (`credentials`).
        let tls = credentials::TlsArgs {
            tls_ca: args.conn.tls_ca.take(),
            tls_cert: args.conn.tls_cert.take(),
            tls_key: args.conn.tls_key.take(),
            insecure_plaintext: args.conn.insecure_plaintext,
        };
        if let Some(paths) = tls.resolve(data_dir)? {
            args.conn.tls_ca = Some(paths.ca);
            (args.conn.tls_cert, args.conn.tls_key) = paths.cert_key.unzip();
        }
    }
    // The load generator's sessions run as tasks on `--threads` workers (one: tokio's
    // current-thread runtime, no wake-ups between workers).
    let rt = match args.run.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
    }
    .map_err(|e| Failure::new(exit::FAILED, format!("cannot start the runtime: {e}")))?;
    let report = rt.block_on(strata_bench::run(&args, endpoints)).map_err(|e| {
        let code = match e {
            strata_bench::BenchError::Connect { .. } | strata_bench::BenchError::NoEndpoints => {
                exit::UNREACHABLE
            }
            strata_bench::BenchError::InvalidArgs(_) => exit::USAGE,
            _ => exit::FAILED,
        };
        Failure::new(code, e.to_string())
    })?;
    println!("{report}");
    Ok(exit::OK)
}

fn run_node(args: strata_node::NodeArgs) -> Result<i32, Failure> {
    let cfg = args.resolve().map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    strata_node::run_blocking(cfg).map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
    Ok(exit::OK)
}
