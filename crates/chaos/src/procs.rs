//! A cluster of real `strata node` processes on loopback that a harness can SIGKILL, restart
//! and slow down (the transport's fault layer: the kernel here has no netem).
//!
//! Node `i` listens for clients on `base + i` and for peers on `base + 100 + i`, keeps its data
//! in `<dir>/n<i>` and writes its log to `<dir>/n<i>.log`. A SIGKILL loses what the node had
//! not fsynced: unsynced log entries live in the process, not in the OS page cache
//! (orca.md §9.6), so this is the crash of the spec's failure model.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use strata_client::{Client, ClientOptions, LinkFault, NodeId};

/// How long a (re)started node may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

pub struct ProcessCluster {
    strata: PathBuf,
    dir: PathBuf,
    base: u16,
    children: Vec<Option<Child>>,
}

impl ProcessCluster {
    /// Starts `n` nodes of the `strata` binary at `strata`, data under `dir`.
    pub async fn start(
        strata: &Path,
        dir: &Path,
        n: usize,
        base: u16,
    ) -> io::Result<ProcessCluster> {
        std::fs::create_dir_all(dir)?;
        let mut cluster = ProcessCluster {
            strata: strata.to_path_buf(),
            dir: dir.to_path_buf(),
            base,
            children: (0..n).map(|_| None).collect(),
        };
        for i in 0..n {
            cluster.spawn(i).await?;
        }
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Node `i`'s client address (endpoint `i` of [`ProcessCluster::endpoints`]).
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.base + i as u16))
    }

    fn peer_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.base + 100 + i as u16))
    }

    pub fn endpoints(&self) -> Vec<SocketAddr> {
        (0..self.len()).map(|i| self.client_addr(i)).collect()
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.children[i].is_some()
    }

    /// The nodes that are running.
    pub fn up(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_up(i)).collect()
    }

    /// The nodes that are not.
    pub fn down(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| !self.is_up(i)).collect()
    }

    /// Starts node `i` (from its data directory, so a restart recovers what it had synced) and
    /// waits until it accepts connections.
    pub async fn spawn(&mut self, i: usize) -> io::Result<()> {
        assert!(!self.is_up(i), "node {i} is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("n{i}.log")))?;
        let mut cmd = Command::new(&self.strata);
        cmd.arg("node")
            .args(["--node-id", &i.to_string()])
            .args(["--client-addr", &self.client_addr(i).to_string()])
            .args(["--peer-addr", &self.peer_addr(i).to_string()])
            .arg("--data-dir")
            .arg(self.dir.join(format!("n{i}")))
            // The harness measures the protocols, not TLS; its nodes run on loopback only.
            .arg("--insecure-plaintext");
        for j in (0..self.len()).filter(|&j| j != i) {
            cmd.args(["--peer", &format!("{j}={}", self.peer_addr(j))]);
        }
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log)).spawn()?;
        let addr = self.client_addr(i);
        let deadline = Instant::now() + START_TIMEOUT;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "node {i} exited at start ({status}); see {}",
                    self.dir.join(format!("n{i}.log")).display()
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "node {i} did not listen on {addr} within {START_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.children[i] = Some(child);
        Ok(())
    }

    /// SIGKILLs node `i`: it loses everything it had not fsynced.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            // SAFETY: kill(2) on a child process this cluster started and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    pub fn kill_all(&mut self) {
        (0..self.len()).for_each(|i| self.kill(i));
    }

    /// Sets the fault of node `from`'s outbound link to `to` (every link when `to` is `None`).
    pub async fn set_fault(
        &self,
        from: usize,
        to: Option<usize>,
        fault: LinkFault,
    ) -> Result<(), strata_client::ClientError> {
        let opts = ClientOptions {
            request_timeout: Some(Duration::from_secs(2)),
            connect_timeout: Duration::from_secs(1),
            ..ClientOptions::default()
        };
        let client = Client::connect_node(self.client_addr(from), opts).await?;
        client.set_fault(to.map(|j| NodeId(j as u32)), fault).await
    }

    /// Makes node `lagging` slow: `delay` more on every link into it and out of it, so it
    /// receives the leader's entries late and its acknowledgements arrive late.
    pub async fn lag(
        &self,
        lagging: usize,
        delay: Duration,
    ) -> Result<(), strata_client::ClientError> {
        let fault = LinkFault { delay_us: delay.as_micros() as u64, ..LinkFault::default() };
        for i in self.up().into_iter().filter(|&i| i != lagging) {
            self.set_fault(i, Some(lagging), fault).await?;
        }
        self.set_fault(lagging, None, fault).await
    }

    /// Clears every link fault of every running node.
    pub async fn heal(&self) -> Result<(), strata_client::ClientError> {
        for i in self.up() {
            self.set_fault(i, None, LinkFault::default()).await?;
        }
        Ok(())
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A base port whose client (`base + i`) and peer (`base + 100 + i`) ports look free now.
/// Drawn below Linux's ephemeral range (32768-60999): nodes' and clients' outgoing
/// connections bind ephemeral ports, which could otherwise take a node's port between this
/// probe and the node's bind (two harnesses starting clusters side by side did).
pub fn free_base_port(nodes: u16) -> Option<u16> {
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16)
        | 1;
    for _ in 0..500 {
        // xorshift: a different range per attempt, per process and per call.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        // 10000-31899: wide, so that two harnesses (or a cluster restarting on its ports
        // while another probes) rarely meet.
        let base = 10_000 + (seed % 21_900) as u16;
        let free = (0..nodes).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + 100 + i)).is_ok()
        });
        if free {
            return Some(base);
        }
    }
    None
}
