//! Strata's wire protocol.
//!
//! * [`ids`]: node, cluster, session ids and Kite's version stamps;
//! * [`auth`]: the roles a client connection carries (read, write, admin);
//! * [`time`]: the virtual [`Instant`] every protocol core takes as an argument;
//! * [`codec`]: field encodings and the checksummed, cluster-tagged frame;
//! * [`client`] and [`peer`]: the messages, each with an explicit, stable tag;
//! * [`log`]: the log engine's (ORCA) node-to-node messages and log entries;
//! * [`rifl`]: RIFL's RPC ids, cluster time and the envelope of exactly-once requests.

pub mod auth;
pub mod client;
pub mod codec;
pub mod counter;
pub mod ids;
pub mod log;
pub mod peer;
pub mod rifl;
pub mod time;
pub mod txn;

pub use auth::Role;
pub use codec::{
    decode_frame, decode_message, encode_frame, Decode, DecodeError, Encode, FrameError,
    LimitError, Limits, Reader, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_KEY_BYTES,
    DEFAULT_MAX_VALUE_BYTES, FRAME_HEADER_BYTES, FRAME_SLACK_BYTES,
};
pub use ids::{AcquireId, Ballot, Carstamp, ClusterId, Llc, NodeId, RmwId, SessionId};
pub use rifl::{ClusterTime, LeaseInfo, LeaseStatus, Rifl, RpcId, WINDOW};
pub use time::Instant;
