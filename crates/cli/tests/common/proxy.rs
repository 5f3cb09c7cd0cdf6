//! A TCP proxy between test clients and a node: it loses every `drop_every`-th reply (by
//! cutting the connection after the node answered: the request took effect, only its answer
//! is lost) and can partition its clients (new connections are dropped, open ones cut on
//! their next byte). With `lose_replies` set it forwards requests and cuts every reply (the
//! node executes; the client never hears back).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to one node that loses replies and can partition its clients.
pub struct Proxy {
    pub addr: SocketAddr,
    /// Every `drop_every`-th reply read from the node is not forwarded: the connection is cut.
    drop_every: u64,
    pub replies: AtomicU64,
    pub dropped: AtomicU64,
    pub partitioned: AtomicBool,
    /// While set, every reply is lost (requests still reach the node).
    pub lose_replies: AtomicBool,
}

impl Proxy {
    pub async fn start(target: SocketAddr, drop_every: u64) -> Arc<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Arc::new(Proxy {
            addr: listener.local_addr().unwrap(),
            drop_every,
            replies: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            partitioned: AtomicBool::new(false),
            lose_replies: AtomicBool::new(false),
        });
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if p.partitioned.load(Ordering::Relaxed) {
                    continue; // dropped at once: the client sees a reset or EOF
                }
                let Ok(node) = TcpStream::connect(target).await else { continue };
                tokio::spawn(p.clone().pump(client, node));
            }
        });
        proxy
    }

    async fn pump(self: Arc<Proxy>, client: TcpStream, node: TcpStream) {
        let _ = (client.set_nodelay(true), node.set_nodelay(true));
        let (mut cr, mut cw) = client.into_split();
        let (mut nr, mut nw) = node.into_split();
        let upstream = async {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = cr.read(&mut buf).await {
                if self.partitioned.load(Ordering::Relaxed)
                    || nw.write_all(&buf[..n]).await.is_err()
                {
                    break;
                }
            }
        };
        let downstream = async {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = nr.read(&mut buf).await {
                let count = self.replies.fetch_add(1, Ordering::Relaxed) + 1;
                let lose = self.partitioned.load(Ordering::Relaxed)
                    || self.lose_replies.load(Ordering::Relaxed);
                if lose || count.is_multiple_of(self.drop_every) {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    break; // the node answered; the client never hears it
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        // Whichever direction ends first closes both: the client sees its connection break.
        tokio::select! {
            _ = upstream => {},
            _ = downstream => {},
        }
    }
}
