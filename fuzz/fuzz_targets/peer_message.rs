//! Arbitrary peer messages (as the transport decodes them, from an authenticated peer) to a
//! host core: the rc replica's, the log replicas' and the lease service's message checks must
//! drop what no honest peer sends, never panic, and keep every invariant.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_wire::peer::PeerMessage;
use strata_wire::NodeId;

fuzz_target!(|data: &[u8]| {
    // The sender is node 1 or 2 by the length byte's parity.
    strata_fuzz::run_messages::<PeerMessage>(data, 10, |host, now, len, msg| {
        host.on_peer_message(now, NodeId(1 + u32::from(len & 1)), msg)
    });
});
