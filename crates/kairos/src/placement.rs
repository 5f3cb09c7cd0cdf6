//! Key placement (kairos.md §4): `shard(key) = hash(key) mod S`, `validator(key) = hash(key)
//! mod V` (server-side validation: the validator of a key is its shard's primary, §9.12), with
//! 64-bit FNV-1a as the one hash every process uses (**\[DECISION\]** of §4).

/// 64-bit FNV-1a of `key`.
pub fn fnv1a64(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The owner of `key` among `n` shards or validators (`n >= 1`).
pub fn owner(key: &[u8], n: usize) -> usize {
    assert!(n >= 1, "at least one owner");
    (fnv1a64(key) % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert!((0..100).all(|i| owner(format!("k{i}").as_bytes(), 5) < 5));
    }
}
