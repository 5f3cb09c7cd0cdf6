//! Arbitrary client requests (as the transport decodes them) to a host core: the request
//! validators — the RIFL envelope and lease checks, key, value and table checks, admin
//! requests — must answer or drop anything, never panic, and keep the host's invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_wire::client::ClientRequest;

fuzz_target!(|data: &[u8]| {
    strata_fuzz::run_messages::<ClientRequest>(data, 1, |host, now, _, req| {
        host.on_client_request(now, 1, req)
    });
});
