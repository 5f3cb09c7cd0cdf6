//! The file `strata up` writes into its data directory so that the other commands find the
//! running cluster without flags: `<data-dir>/cluster.json`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::exit::{Failure, FAILED, UNREACHABLE};

pub const FILE_NAME: &str = "cluster.json";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    pub cluster_id: u64,
    /// Process id of the `strata up` that owns the nodes.
    pub supervisor_pid: u32,
    pub nodes: Vec<NodeEntry>,
    /// Whether the nodes use TLS, with the credentials in `<data-dir>/tls`. Absent in files
    /// of builds before TLS, whose clusters were plain.
    #[serde(default)]
    pub tls: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    pub id: u32,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    pub pid: u32,
    pub log: PathBuf,
}

impl ClusterFile {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(FILE_NAME)
    }

    /// Writes the file atomically (temp file, then rename), so a reader never sees half of it.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        let tmp = data_dir.join(format!(".{FILE_NAME}.tmp"));
        let text = serde_json::to_string_pretty(self).expect("serializable");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, Self::path(data_dir))
    }

    /// Reads the file of the cluster running from `data_dir`.
    pub fn read(data_dir: &Path) -> Result<ClusterFile, Failure> {
        let path = Self::path(data_dir);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            let msg = if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "no running cluster found: {} does not exist\nhint: start one with `strata up` (in another terminal), or pass --endpoints",
                    path.display()
                )
            } else {
                format!("cannot read {}: {e}", path.display())
            };
            Failure::new(UNREACHABLE, msg)
        })?;
        serde_json::from_str(&text).map_err(|e| {
            Failure::new(FAILED, format!("{} is corrupt: {e}; delete it", path.display()))
        })
    }

    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.client_addr).collect()
    }
}

/// Whether a process with this id exists (signal 0 probes without signalling).
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 performs only the permission and existence check.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}
