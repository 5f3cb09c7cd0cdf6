//! Field encoding and framing.
//!
//! Frame layout (all integers little-endian), see `docs/design.md` "Wire format":
//!
//! ```text
//! offset  size  field
//! 0       4     body_len   bytes that follow this field (crc + cluster id + payload)
//! 4       4     crc32c     CRC32C of every byte after this field (cluster id + payload)
//! 8       8     cluster_id
//! 16      ..    payload    one message: its explicit tag byte first, then its fields
//! ```
//!
//! A decoder never trusts a length it has not bounded: `body_len` is checked against the
//! configured frame limit before any buffer is reserved, and every field length is checked
//! against the bytes actually present.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::ids::{AcquireId, Ballot, Carstamp, ClusterId, Llc, NodeId, RmwId, SessionId};

/// Bytes of frame header before the payload.
pub const FRAME_HEADER_BYTES: usize = 16;
/// Bytes covered by `body_len` that are not payload (crc + cluster id).
const BODY_OVERHEAD_BYTES: usize = 12;

/// Default frame limit: 16 MiB, header included (node config `max_frame_bytes`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 << 20;
/// Default value limit: 1 MiB (node config `max_value_bytes`).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
/// The key limit: 64 KiB (fixed: `FRAME_SLACK_BYTES` is sized for it).
pub const DEFAULT_MAX_KEY_BYTES: usize = 64 << 10;
/// Room a frame needs beside its value: the largest key plus every header of the messages
/// that carry a write (client request, log entry, `AppendEntries`, shard envelope, frame). A
/// configuration must keep `max_value_bytes + FRAME_SLACK_BYTES <= max_frame_bytes`, so that
/// the largest accepted write always fits in one frame, on the client link and between peers.
pub const FRAME_SLACK_BYTES: usize = DEFAULT_MAX_KEY_BYTES + 1024;

/// Size limits, configurable per deployment (`docs/design.md`, "Limits and bounds"). The one
/// definition of the key and value limits: every engine and table checks a client's keys and
/// values with [`Limits::check_key`] and [`Limits::check_value`] at the client edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_frame_bytes: usize,
    pub max_value_bytes: usize,
    pub max_key_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
        }
    }
}

/// A key or value a client may not write. [`LimitError::code`] is the client's error code.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LimitError {
    /// Keys name something: the empty key is refused (`InvalidArgument`).
    #[error("keys must not be empty")]
    EmptyKey,
    /// Use a shorter key (`KeyTooLarge`).
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    /// Split or shrink the value (`ValueTooLarge`).
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
}

impl LimitError {
    /// The error code a client receives for it.
    pub fn code(&self) -> crate::client::ErrorCode {
        use crate::client::ErrorCode;
        match self {
            LimitError::EmptyKey => ErrorCode::InvalidArgument,
            LimitError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
            LimitError::ValueTooLarge { .. } => ErrorCode::ValueTooLarge,
        }
    }
}

impl Limits {
    /// A client's key: not empty, at most `max_key_bytes`.
    pub fn check_key(&self, key: &[u8]) -> Result<(), LimitError> {
        if key.is_empty() {
            return Err(LimitError::EmptyKey);
        }
        if key.len() > self.max_key_bytes {
            return Err(LimitError::KeyTooLarge { len: key.len(), max: self.max_key_bytes });
        }
        Ok(())
    }

    /// A client's value: at most `max_value_bytes`.
    pub fn check_value(&self, value: &[u8]) -> Result<(), LimitError> {
        if value.len() > self.max_value_bytes {
            return Err(LimitError::ValueTooLarge { len: value.len(), max: self.max_value_bytes });
        }
        Ok(())
    }
}

/// Why a message payload could not be decoded. The frame boundary is intact: the caller
/// can drop the frame and go on reading.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("message truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unknown message tag {tag:#04x}")]
    UnknownTag { tag: u8 },
    #[error("invalid {what}: {value}")]
    Invalid { what: &'static str, value: u64 },
    #[error("{trailing} trailing bytes after message")]
    Trailing { trailing: usize },
}

/// Why a frame could not be taken off a byte stream.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix exceeds the limit (or is too small to hold a header). The stream
    /// cannot be trusted any more: close the connection.
    #[error("frame of {len} bytes is outside the limits (max {max})")]
    BadLength { len: usize, max: usize },
    /// The frame was consumed; its bytes do not match their checksum. Drop it.
    #[error("frame checksum mismatch")]
    Checksum,
    /// The frame was consumed; it belongs to another cluster. Drop it (and refuse the peer).
    #[error("frame from cluster {got}, this is cluster {expected}")]
    WrongCluster { expected: ClusterId, got: ClusterId },
}

impl FrameError {
    /// Whether the connection must be closed (frame boundaries are lost).
    pub fn is_fatal(&self) -> bool {
        matches!(self, FrameError::BadLength { .. })
    }
}

/// Appends one frame holding `msg` to `out`.
pub fn encode_frame<M: Encode + ?Sized>(out: &mut BytesMut, cluster: ClusterId, msg: &M) {
    let start = out.len();
    out.put_u32_le(0); // body_len, patched below
    out.put_u32_le(0); // crc, patched below
    out.put_u64_le(cluster.0);
    msg.encode(out);
    let body_len = out.len() - start - 4;
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Takes one whole frame off the front of `buf` and returns its payload (tag first).
/// `Ok(None)`: more bytes are needed. On a non-fatal error the frame has been consumed.
pub fn decode_frame(
    buf: &mut BytesMut,
    cluster: ClusterId,
    max_frame_bytes: usize,
) -> Result<Option<Bytes>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let body_len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if body_len <= BODY_OVERHEAD_BYTES || body_len + 4 > max_frame_bytes {
        return Err(FrameError::BadLength { len: body_len + 4, max: max_frame_bytes });
    }
    if buf.len() < 4 + body_len {
        buf.reserve(4 + body_len - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(4 + body_len).freeze();
    frame.advance(4);
    let crc = frame.get_u32_le();
    if crc32c::crc32c(&frame) != crc {
        return Err(FrameError::Checksum);
    }
    let got = ClusterId(frame.get_u64_le());
    if got != cluster {
        return Err(FrameError::WrongCluster { expected: cluster, got });
    }
    Ok(Some(frame))
}

/// Decodes a whole message from a frame payload, rejecting trailing bytes.
pub fn decode_message<M: Decode>(payload: Bytes) -> Result<M, DecodeError> {
    let mut r = Reader::new(payload);
    let msg = M::decode(&mut r)?;
    r.finish()?;
    Ok(msg)
}

/// A type with a stable binary encoding.
pub trait Encode {
    fn encode(&self, out: &mut BytesMut);
}

/// A type that can be read back from its encoding. Never panics on hostile input.
pub trait Decode: Sized {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError>;
}

/// A cursor over a frame payload. Byte strings are returned as zero-copy slices of it.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    fn need(&self, n: usize) -> Result<(), DecodeError> {
        if self.buf.len() < n {
            Err(DecodeError::Truncated { needed: n - self.buf.len() })
        } else {
            Ok(())
        }
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        self.need(2)?;
        Ok(self.buf.get_u16_le())
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.need(4)?;
        Ok(self.buf.get_u32_le())
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        self.need(8)?;
        Ok(self.buf.get_u64_le())
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.need(8)?;
        Ok(self.buf.get_i64_le())
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::Invalid { what: "bool", value: v as u64 }),
        }
    }

    /// A `u32`-length-prefixed byte string, sliced without copying.
    pub fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        self.need(len)?;
        Ok(self.buf.split_to(len))
    }

    pub fn string(&mut self) -> Result<String, DecodeError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|e| DecodeError::Invalid {
            what: "utf-8 string",
            value: e.utf8_error().valid_up_to() as u64,
        })
    }

    pub fn option<T>(
        &mut self,
        f: impl FnOnce(&mut Reader) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        if self.bool()? {
            Ok(Some(f(self)?))
        } else {
            Ok(None)
        }
    }

    /// A `u32`-count-prefixed sequence. The count is bounded by the bytes left (every element
    /// takes at least one byte), so a hostile count cannot make us allocate.
    pub fn seq<T>(
        &mut self,
        mut f: impl FnMut(&mut Reader) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self.u32()? as usize;
        self.need(n)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    /// Reads a trailing extension of a sequence already decoded: one entry per element of
    /// `items`, in order, written by [`put_extension_each`]. A message from an older encoder
    /// ends before it (nothing is left): the elements keep their defaults. See
    /// `docs/design.md`, "Wire format" (additions).
    pub fn extension_each<T>(
        &mut self,
        items: &mut [T],
        mut f: impl FnMut(&mut Reader, &mut T) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let n = self.u32()? as usize;
        if n != items.len() {
            return Err(DecodeError::Invalid { what: "extension count", value: n as u64 });
        }
        items.iter_mut().try_for_each(|it| f(self, it))
    }

    /// Whether bytes are left (a trailing extension follows).
    pub fn has_more(&self) -> bool {
        !self.buf.is_empty()
    }

    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing { trailing: self.buf.len() })
        }
    }
}

/// Writers for the field encodings `Reader` reads.
pub fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

pub fn put_bool(out: &mut BytesMut, b: bool) {
    out.put_u8(b as u8);
}

pub fn put_option<T>(out: &mut BytesMut, v: &Option<T>, f: impl FnOnce(&mut BytesMut, &T)) {
    match v {
        Some(x) => {
            out.put_u8(1);
            f(out, x);
        }
        None => out.put_u8(0),
    }
}

pub fn put_seq<T>(out: &mut BytesMut, v: &[T], mut f: impl FnMut(&mut BytesMut, &T)) {
    out.put_u32_le(v.len() as u32);
    for x in v {
        f(out, x);
    }
}

/// Appends a trailing extension of a sequence (fields added to its elements after the message's
/// first version): one entry per element, read back by [`Reader::extension_each`].
pub fn put_extension_each<T>(out: &mut BytesMut, v: &[T], f: impl FnMut(&mut BytesMut, &T)) {
    put_seq(out, v, f);
}

// ---- encodings of the shared id types ----

impl Encode for NodeId {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32_le(self.0);
    }
}
impl Decode for NodeId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(NodeId(r.u32()?))
    }
}

impl Encode for SessionId {
    fn encode(&self, out: &mut BytesMut) {
        self.node.encode(out);
        out.put_u32_le(self.index);
    }
}
impl Decode for SessionId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(SessionId { node: NodeId::decode(r)?, index: r.u32()? })
    }
}

impl Encode for Carstamp {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.llc.ver);
        self.llc.node.encode(out);
        out.put_u32_le(self.pno);
    }
}
impl Decode for Carstamp {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let ver = r.u64()?;
        let node = NodeId::decode(r)?;
        Ok(Carstamp { llc: Llc { ver, node }, pno: r.u32()? })
    }
}

impl Encode for Llc {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.ver);
        self.node.encode(out);
    }
}
impl Decode for Llc {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Llc { ver: r.u64()?, node: NodeId::decode(r)? })
    }
}

impl Encode for Ballot {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32_le(self.round);
        self.node.encode(out);
    }
}
impl Decode for Ballot {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Ballot { round: r.u32()?, node: NodeId::decode(r)? })
    }
}

impl Encode for RmwId {
    fn encode(&self, out: &mut BytesMut) {
        self.session.encode(out);
        out.put_u64_le(self.seq);
    }
}
impl Decode for RmwId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(RmwId { session: SessionId::decode(r)?, seq: r.u64()? })
    }
}

impl Encode for AcquireId {
    fn encode(&self, out: &mut BytesMut) {
        self.session.encode(out);
        out.put_u64_le(self.seq);
    }
}
impl Decode for AcquireId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AcquireId { session: SessionId::decode(r)?, seq: r.u64()? })
    }
}

/// A value slot: `None` is "absent" (never written, or deleted).
pub fn put_value(out: &mut BytesMut, v: &Option<Bytes>) {
    put_option(out, v, |o, b| put_bytes(o, b));
}

pub fn get_value(r: &mut Reader) -> Result<Option<Bytes>, DecodeError> {
    r.option(|r| r.bytes())
}
