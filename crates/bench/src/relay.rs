//! `--client-delay-ms`: emulated distance between the load generator and the nodes.
//!
//! The kernel here has no netem, and a node's fault layer delays only its links to other nodes
//! (`strata fault`), so the client side of a wide-area deployment (ORCA §8.3 E4: clients 1 ms
//! from their nearest replica, 17.5 ms one way across the WAN) comes from here: one TCP relay
//! per endpoint, which holds every chunk of bytes for a fixed delay in each direction before
//! passing it on. The sessions connect to the relays instead of the nodes, so every request and
//! reply — retries and redirects included — pays the delay of the node it goes to.
//!
//! The relays run on OS threads, not on the benchmark's tokio runtime: tokio's timer wheel
//! rounds every sleep up to the next millisecond, which turned a 1 ms hop into about 2 ms and
//! halved the local-versus-WAN ratio E4 is about; `std::thread::sleep` overshoots by tens of
//! microseconds. Each direction of a relayed connection is a reader thread (which stamps each
//! chunk with its due time) and a writer thread (which sleeps until then and sends), so a
//! direction stays FIFO and a slow write never delays the next chunk's stamp.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::target::CONNECT_TIMEOUT;

/// How often an idle relay checks whether it was dropped.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Relays listening on loopback, one per delayed endpoint. Dropping them stops accepting; a
/// relayed connection ends when either of its ends closes.
pub struct Relays {
    /// Where to connect instead of each endpoint (the endpoint itself when its delay is 0).
    pub addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts a relay for every endpoint whose one-way delay (`delays_ms`, one per endpoint) is
/// above zero.
pub fn start(endpoints: &[SocketAddr], delays_ms: &[f64]) -> std::io::Result<Relays> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut addrs = Vec::with_capacity(endpoints.len());
    for (&upstream, &ms) in endpoints.iter().zip(delays_ms) {
        if ms <= 0.0 {
            addrs.push(upstream);
            continue;
        }
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        addrs.push(listener.local_addr()?);
        let (stop, delay) = (stop.clone(), Duration::from_secs_f64(ms / 1000.0));
        thread::Builder::new()
            .name(format!("relay-{upstream}"))
            .spawn(move || accept_loop(listener, upstream, delay, &stop))?;
    }
    Ok(Relays { addrs, stop })
}

/// Relays every accepted connection to `upstream` until the relays are dropped. A connection
/// the node refuses is closed, as if the node were down.
fn accept_loop(listener: TcpListener, upstream: SocketAddr, delay: Duration, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Ok(server) = TcpStream::connect_timeout(&upstream, CONNECT_TIMEOUT) {
                    let _ = relay(client, server, delay);
                }
            }
            Err(_) => thread::sleep(ACCEPT_POLL), // nothing to accept yet (WouldBlock)
        }
    }
}

/// Starts both directions of one relayed connection.
fn relay(client: TcpStream, server: TcpStream, delay: Duration) -> std::io::Result<()> {
    client.set_nonblocking(false)?; // accepted from a non-blocking listener
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    delayed_copy(client.try_clone()?, server.try_clone()?, delay);
    delayed_copy(server, client, delay);
    Ok(())
}

/// Copies one direction on two threads, each chunk sent `delay` after it was read; at EOF or an
/// error the write side is shut, so the far end sees the close.
fn delayed_copy(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let _ = thread::Builder::new().name("relay-rd".into()).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let _ = thread::Builder::new().name("relay-wr".into()).spawn(move || {
        while let Ok((due, chunk)) = rx.recv() {
            thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind a 20 ms relay answers after at least 40 ms (both directions), in
    /// order; an endpoint with no delay is used directly.
    #[test]
    fn a_relay_delays_both_directions_in_order() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = s.read(&mut buf) {
                s.write_all(&buf[..n]).unwrap();
            }
        });
        let relays = start(&[echo_addr, echo_addr], &[20.0, 0.0]).unwrap();
        assert_ne!(relays.addrs[0], echo_addr);
        assert_eq!(relays.addrs[1], echo_addr, "no delay: no relay");
        let mut c = TcpStream::connect(relays.addrs[0]).unwrap();
        let started = Instant::now();
        c.write_all(b"one").unwrap();
        c.write_all(b"two").unwrap();
        let mut got = Vec::new();
        while got.len() < 6 {
            let mut buf = [0u8; 16];
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "the relay closed early");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"onetwo");
        let rtt = started.elapsed();
        assert!(rtt >= Duration::from_millis(40), "{rtt:?}");
    }
}
