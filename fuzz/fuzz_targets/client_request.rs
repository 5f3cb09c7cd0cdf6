//! Arbitrary client requests (as the transport decodes them) to a host core: the request
//! validators — the RIFL envelope and lease checks, key, value and table checks, admin
//! requests — must answer or drop anything, never panic, and keep the host's invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_wire::client::ClientRequest;
use strata_wire::{decode_message, Instant};

fuzz_target!(|data: &[u8]| {
    let (mut host, mut fx) = strata_fuzz::host();
    let mut now = Instant::from_millis(10);
    // Several requests per input: a length byte, then that many bytes of message.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (msg, tail) = tail.split_at((len as usize).min(tail.len()));
        rest = tail;
        if let Ok(req) = decode_message::<ClientRequest>(bytes::Bytes::copy_from_slice(msg)) {
            host.on_client_request(now, 1, req);
            strata_fuzz::settle(&mut host, &mut fx, now);
        }
        now = now + std::time::Duration::from_millis(u64::from(len));
        host.on_tick(now);
        strata_fuzz::settle(&mut host, &mut fx, now);
    }
});
