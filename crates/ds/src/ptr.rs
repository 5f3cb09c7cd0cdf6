//! Pointer values: what a "pointer" key (a stack top, a queue head or tail, a list head, an
//! object's `next` field) holds.
//!
//! A pointer is a fixed 33-byte value:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..8 | `obj` | the target object's id; `0` is null |
//! | 8..16 | `tag` | the target's *incarnation* tag (a fresh number each time the object is allocated, see [`crate::Ctx`]) |
//! | 16..24 | `count` | ABA counter of *this location*: every CAS that changes the location writes `count + 1` |
//! | 24..32 | `owner` | incarnation tag of the object whose field this is (`0` for a structure's root keys) |
//! | 32 | `mark` | Harris-Michael logical-deletion mark (list only; always `0` elsewhere) |
//!
//! A CAS compares whole values, so `count` (per location) and `owner` (per incarnation) make
//! every value a location ever holds distinct: a CAS that succeeds proves the location did not
//! change since the value was read (no ABA), even though objects are recycled. `tag` lets a
//! reader that followed a pointer check that what it then reads from the target (its `next`
//! field, its data fields) belongs to the incarnation the pointer meant, not to a recycled
//! successor (a mismatch means "the structure moved on: read again").
//!
//! An absent key reads as [`Ptr::NULL`]; its CAS expectation stays `None` (see [`Seen`]).

use bytes::{BufMut, Bytes, BytesMut};

/// Encoded length of a pointer value.
pub const PTR_LEN: usize = 33;

/// A decoded pointer value (see the module doc for the layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ptr {
    pub obj: u64,
    pub tag: u64,
    pub count: u64,
    pub owner: u64,
    pub mark: bool,
}

impl Ptr {
    /// Null, count 0, no owner: what an absent key means.
    pub const NULL: Ptr = Ptr { obj: 0, tag: 0, count: 0, owner: 0, mark: false };

    pub fn is_null(&self) -> bool {
        self.obj == 0
    }

    /// Same target object *and* incarnation.
    pub fn same_target(&self, other: &Ptr) -> bool {
        self.obj == other.obj && self.tag == other.tag
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(PTR_LEN);
        b.put_u64_le(self.obj);
        b.put_u64_le(self.tag);
        b.put_u64_le(self.count);
        b.put_u64_le(self.owner);
        b.put_u8(self.mark as u8);
        b.freeze()
    }

    /// `None` when the value is not a pointer (wrong length or mark byte).
    pub fn decode(v: Option<&[u8]>) -> Option<Ptr> {
        let Some(v) = v else { return Some(Ptr::NULL) };
        if v.len() != PTR_LEN || v[32] > 1 {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().expect("8 bytes"));
        Some(Ptr { obj: u(0), tag: u(8), count: u(16), owner: u(24), mark: v[32] == 1 })
    }
}

/// A pointer location's value as read: the raw bytes (the exact CAS expectation, `None` if the
/// key is absent) and their decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub raw: Option<Bytes>,
    pub ptr: Ptr,
}

impl Seen {
    /// What a successful CAS that wrote `ptr` leaves in the location.
    pub fn written(ptr: Ptr) -> Seen {
        Seen { raw: Some(ptr.encode()), ptr }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_null() {
        let p = Ptr { obj: 7, tag: 9, count: u64::MAX, owner: 3, mark: true };
        assert_eq!(Ptr::decode(Some(&p.encode())), Some(p));
        assert_eq!(Ptr::decode(None), Some(Ptr::NULL));
        assert!(Ptr::NULL.is_null());
        assert_eq!(Ptr::decode(Some(b"short")), None);
        let mut bad = p.encode().to_vec();
        bad[32] = 2;
        assert_eq!(Ptr::decode(Some(&bad)), None);
    }
}
