//! Arbitrary peer messages (as the transport decodes them, from an authenticated peer) to a
//! host core: the rc replica's, the log replicas' and the lease service's message checks must
//! drop what no honest peer sends, never panic, and keep every invariant.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_wire::peer::PeerMessage;
use strata_wire::{decode_message, Instant, NodeId};

fuzz_target!(|data: &[u8]| {
    let (mut host, mut fx) = strata_fuzz::host();
    let mut now = Instant::from_millis(10);
    // Several messages per input: a length byte, then that many bytes of message; the sender
    // is node 1 or 2 by the length's parity.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (msg, tail) = tail.split_at((len as usize).min(tail.len()));
        rest = tail;
        let from = NodeId(1 + u32::from(len & 1));
        if let Ok(msg) = decode_message::<PeerMessage>(bytes::Bytes::copy_from_slice(msg)) {
            host.on_peer_message(now, from, msg);
            strata_fuzz::settle(&mut host, &mut fx, now);
        }
        now = now + std::time::Duration::from_millis(u64::from(len) * 10);
        host.on_tick(now);
        strata_fuzz::settle(&mut host, &mut fx, now);
    }
});
