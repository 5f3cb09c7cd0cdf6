//! Shared helpers: an in-process 3-node cluster on loopback, one client per node, and many
//! sessions per client.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use strata_client::{Client, ClientOptions, Session};
use strata_ds::Ctx;
use strata_node::RunningNode;

pub struct Cluster {
    pub nodes: Vec<RunningNode>,
    /// One client per node, so sessions of different clients run at different replicas.
    pub clients: Vec<Arc<Client>>,
}

pub fn opts() -> ClientOptions {
    ClientOptions { request_timeout: Some(Duration::from_secs(20)), ..ClientOptions::default() }
}

pub async fn cluster() -> Cluster {
    let nodes = strata_node::testing::local_cluster(3).await;
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(Arc::new(Client::connect_node(n.client_addr(), opts()).await.unwrap()));
    }
    Cluster { nodes, clients }
}

impl Cluster {
    /// `per_client` sessions on every client (node), each with its own context under `root`,
    /// in round-robin node order: worker `w` runs at node `w % 3`.
    pub async fn workers(&self, per_client: usize, root: &str) -> Vec<(Session, Ctx)> {
        let mut out = Vec::new();
        for _ in 0..per_client {
            for c in &self.clients {
                let mut s = c.open_session().await.unwrap();
                let cx = Ctx::new(&mut s, root).await.unwrap();
                out.push((s, cx));
            }
        }
        out
    }

    pub async fn shutdown(self) {
        drop(self.clients);
        for n in self.nodes {
            n.shutdown().await;
        }
    }
}

/// A multiset of byte strings.
pub fn multiset<I: IntoIterator<Item = Vec<u8>>>(items: I) -> HashMap<Vec<u8>, usize> {
    let mut m = HashMap::new();
    for i in items {
        *m.entry(i).or_insert(0) += 1;
    }
    m
}

/// The element value for worker `w`, sequence number `i`: unique, and decodable back.
pub fn elem(w: usize, i: usize) -> Vec<u8> {
    format!("w{w:03}-{i:06}").into_bytes()
}

pub fn parse_elem(v: &[u8]) -> (usize, usize) {
    let s = std::str::from_utf8(v).expect("utf8 element");
    let (w, i) = s.strip_prefix('w').and_then(|s| s.split_once('-')).expect("element format");
    (w.parse().unwrap(), i.parse().unwrap())
}
