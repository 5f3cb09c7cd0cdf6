//! The checksummed frame every durable byte of this crate is wrapped in.
//!
//! ```text
//! +----------------+----------------+-----------------+
//! | length: u32 LE | crc: u32 LE    | payload         |
//! |                | CRC32C(length  | `length` bytes  |
//! |                |   ‖ payload)   |                 |
//! +----------------+----------------+-----------------+
//! ```
//!
//! The checksum covers the length field too, so a torn or flipped length is caught instead of
//! steering the reader to a wrong place. Log records, snapshot files and the hard-state file
//! all use this one frame.

use std::ops::Range;

/// Bytes before the payload: length and checksum.
pub(crate) const HEADER_BYTES: usize = 8;

/// The largest payload a frame can carry.
pub(crate) const MAX_PAYLOAD_BYTES: usize = u32::MAX as usize;

/// Appends the frame of `payload` to `out`.
///
/// # Panics
/// If `payload` is longer than [`MAX_PAYLOAD_BYTES`]; callers check their own, smaller limits.
pub(crate) fn encode_into(out: &mut Vec<u8>, payload: &[u8]) {
    encode_parts_into(out, &[payload]);
}

/// Appends the frame of the payload `parts` concatenated, without concatenating them first.
///
/// # Panics
/// If the payload is longer than [`MAX_PAYLOAD_BYTES`].
pub(crate) fn encode_parts_into(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let payload_bytes: usize = parts.iter().map(|part| part.len()).sum();
    let length = u32::try_from(payload_bytes).expect("callers bound the payload length");
    let length_bytes = length.to_le_bytes();
    let crc = parts
        .iter()
        .fold(crc32c::crc32c(&length_bytes), |crc, part| crc32c::crc32c_append(crc, part));
    out.reserve(HEADER_BYTES + payload_bytes);
    out.extend_from_slice(&length_bytes);
    out.extend_from_slice(&crc.to_le_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// The frame of `payload`, alone.
pub(crate) fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, payload);
    out
}

/// What the bytes at the start of a buffer are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A valid frame; `payload` is its payload's range within the buffer, which ends where
    /// the frame ends.
    Frame { payload: Range<usize> },
    /// The buffer ends before the frame its header announces (or before a whole header).
    Incomplete,
    /// The checksum does not match.
    Corrupt,
}

/// Decodes the frame at the start of `bytes`.
pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let Some(header) = bytes.get(..HEADER_BYTES) else {
        return Decoded::Incomplete;
    };
    let length_bytes: [u8; 4] = header[..4].try_into().expect("4 bytes");
    let stored_crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    let payload =
        HEADER_BYTES..HEADER_BYTES.saturating_add(u32::from_le_bytes(length_bytes) as usize);
    let Some(payload_bytes) = bytes.get(payload.clone()) else {
        return Decoded::Incomplete;
    };
    if crc32c::crc32c_append(crc32c::crc32c(&length_bytes), payload_bytes) == stored_crc {
        Decoded::Frame { payload }
    } else {
        Decoded::Corrupt
    }
}

/// Decodes a buffer that must hold exactly one frame; `None` if it does not.
pub(crate) fn decode_exact(bytes: &[u8]) -> Option<&[u8]> {
    match decode(bytes) {
        Decoded::Frame { payload } if payload.end == bytes.len() => Some(&bytes[payload]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for payload in [&b""[..], b"x", &[7u8; 1000]] {
            let frame = encode(payload);
            assert_eq!(frame.len(), HEADER_BYTES + payload.len());
            assert_eq!(decode_exact(&frame), Some(payload));
        }
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let frame = encode(b"a payload");
        for bit in 0..frame.len() * 8 {
            let mut flipped = frame.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(decode(&flipped), decode(&frame), "bit {bit}");
            assert_eq!(decode_exact(&flipped), None, "bit {bit}");
        }
    }

    #[test]
    fn every_cut_is_incomplete() {
        let frame = encode(b"a payload");
        for len in 0..frame.len() {
            assert_eq!(decode(&frame[..len]), Decoded::Incomplete, "cut at {len}");
        }
    }

    #[test]
    fn zeros_are_not_a_frame() {
        assert_eq!(decode(&[0; 64]), Decoded::Corrupt);
    }
}
