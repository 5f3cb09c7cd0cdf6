//! `--table`: the share of reads that triggered durability in the measured window (ORCA §8.2,
//! Table 2's last column; §8.3 E2 asks for it next to the throughput).
//!
//! A read triggers durability when the leader finds the data it would return not yet durable
//! and makes it durable first (§5.5.1, `LogStats::reads_made_durable`). Every shard replica
//! counts those and the reads it served, and reports both in its node's status; the share is the
//! growth of the two sums, over every node and every shard of the table, from the start of the
//! measured window to its end. A read a follower forwarded to the leader counts once, where it
//! was served. The counters start at zero when a node starts: a node restarted during the window
//! makes the sums shrink, and the delta saturates at zero.

use std::net::SocketAddr;

use strata_client::{Client, ClientOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::report::ReadDurability;
use crate::target::CONNECT_TIMEOUT;

/// The table's read counters, summed over the nodes' shard replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ReadCounters {
    served: u64,
    made_durable: u64,
}

/// Asks every node for its status and sums the counters of `table`'s shards.
async fn read_counters(
    endpoints: &[SocketAddr],
    strata: &ClientOptions,
    table: &str,
) -> Result<ReadCounters, String> {
    let opts = ClientOptions {
        connect_timeout: CONNECT_TIMEOUT,
        request_timeout: Some(CONNECT_TIMEOUT),
        ..strata.clone()
    };
    let mut sum = ReadCounters::default();
    for &addr in endpoints {
        let status = async { Client::connect_node(addr, opts.clone()).await?.status().await }
            .await
            .map_err(|e| format!("status of {addr}: {e}"))?;
        for s in status.shards.iter().filter(|s| s.table == table) {
            sum.served += s.reads_served;
            sum.made_durable += s.reads_made_durable;
        }
    }
    Ok(sum)
}

/// Samples the counters at the start of the window (from a task, while the sessions warm up)
/// and, in [`Probe::finish`], at its end.
pub(crate) struct Probe {
    endpoints: Vec<SocketAddr>,
    strata: ClientOptions,
    table: String,
    before: JoinHandle<Result<ReadCounters, String>>,
}

impl Probe {
    /// Takes the first sample at `window_start`. The nodes are asked directly, not through
    /// `--client-delay-ms` relays: the sample must be close to the instant it describes.
    pub fn start(
        endpoints: Vec<SocketAddr>,
        strata: &ClientOptions,
        table: String,
        window_start: Instant,
    ) -> Probe {
        let (e, t, o) = (endpoints.clone(), table.clone(), strata.clone());
        let before = tokio::spawn(async move {
            tokio::time::sleep_until(window_start).await;
            read_counters(&e, &o, &t).await
        });
        Probe { endpoints, strata: strata.clone(), table, before }
    }

    /// The second sample, now (at the end of the window), and the share between the two.
    pub async fn finish(self) -> Result<ReadDurability, String> {
        let before = self.before.await.map_err(|e| format!("the status task failed: {e}"))??;
        let after = read_counters(&self.endpoints, &self.strata, &self.table).await?;
        Ok(ReadDurability::new(
            after.served.saturating_sub(before.served),
            after.made_durable.saturating_sub(before.made_durable),
        ))
    }
}
