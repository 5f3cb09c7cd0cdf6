//! Feeds arbitrary bytes to the frame decoder and every message decoder. The decoders must
//! never panic, never allocate beyond what the input justifies, and anything they accept must
//! re-encode to a frame that decodes to the same message.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::peer::PeerMessage;
use strata_wire::{decode_frame, decode_message, encode_frame, ClusterId, Decode, Encode};

const CLUSTER: ClusterId = ClusterId(1);

fn check<M: Encode + Decode + PartialEq + std::fmt::Debug>(payload: bytes::Bytes) {
    if let Ok(msg) = decode_message::<M>(payload) {
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, CLUSTER, &msg);
        let again = decode_frame(&mut buf, CLUSTER, usize::MAX).unwrap().unwrap();
        assert_eq!(decode_message::<M>(again).unwrap(), msg);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(payload)) = decode_frame(&mut buf, CLUSTER, 1 << 20) {
        check::<ClientRequest>(payload.clone());
        check::<ClientResponse>(payload.clone());
        check::<PeerMessage>(payload);
    }
    let raw = bytes::Bytes::copy_from_slice(data);
    check::<ClientRequest>(raw.clone());
    check::<ClientResponse>(raw.clone());
    check::<PeerMessage>(raw);
});
