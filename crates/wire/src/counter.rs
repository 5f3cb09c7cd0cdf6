//! Counters: what fetch-and-add reads and writes (issue #18; a departure from Kite's K-D9,
//! `docs/design.md`). A counter is the decimal text of a `u64`, as in Redis: `strata faa c 5`
//! then `strata get c` prints `5`, and a value written by `put k 10` can be incremented. An
//! absent value counts as 0. Anything else — an empty value, a sign, spaces, a number beyond
//! `u64` — is not a counter, and an FAA on it (or one that would pass `u64::MAX`) changes
//! nothing. Every party computes the same function: the replica that decides the FAA, the
//! client that reports its result, and the simulator's checkers.

use bytes::Bytes;
use thiserror::Error;

/// The longest counter: `u64::MAX` has 20 digits.
const MAX_DIGITS: usize = 20;

/// Why a value cannot be incremented.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CounterError {
    #[error("the value is not a counter (decimal digits of an unsigned 64-bit integer)")]
    NotACounter,
    #[error("the counter would pass {}", u64::MAX)]
    Overflow,
    /// A negative change (log tables' `add`, a transfer) larger than the counter.
    #[error("the counter would go below 0")]
    Underflow,
}

/// The counter a value holds (absent: 0).
pub fn parse(value: Option<&[u8]>) -> Result<u64, CounterError> {
    let Some(v) = value else { return Ok(0) };
    if v.is_empty() || v.len() > MAX_DIGITS || !v.iter().all(u8::is_ascii_digit) {
        return Err(CounterError::NotACounter);
    }
    v.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(CounterError::NotACounter)
    })
}

/// The value that stores counter `n`.
pub fn encode(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

/// What an FAA of `delta` makes of `old`: the new counter, or why nothing changes.
pub fn add(old: Option<&[u8]>, delta: u64) -> Result<u64, CounterError> {
    parse(old)?.checked_add(delta).ok_or(CounterError::Overflow)
}

/// What a signed change of `delta` makes of `old` (log tables: `strata faa --table`, a
/// transaction's `add`): `(old, new)`, or why nothing changes. Counters stay unsigned.
pub fn change(old: Option<&[u8]>, delta: i64) -> Result<(u64, u64), CounterError> {
    let old = parse(old)?;
    let new = if delta >= 0 {
        old.checked_add(delta.unsigned_abs()).ok_or(CounterError::Overflow)?
    } else {
        old.checked_sub(delta.unsigned_abs()).ok_or(CounterError::Underflow)?
    };
    Ok((old, new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counters_are_decimal_text_and_everything_else_is_refused() {
        assert_eq!(parse(None), Ok(0));
        assert_eq!(parse(Some(b"10")), Ok(10));
        assert_eq!(parse(Some(b"007")), Ok(7));
        assert_eq!(parse(Some(b"18446744073709551615")), Ok(u64::MAX));
        for bad in [&b""[..], b"-1", b"+1", b" 1", b"1 ", b"1.5", b"abc", b"18446744073709551616"] {
            assert_eq!(parse(Some(bad)), Err(CounterError::NotACounter), "{bad:?}");
        }
        assert_eq!(&encode(5)[..], b"5");
        assert_eq!(add(Some(b"10"), 5), Ok(15));
        assert_eq!(add(Some(b"18446744073709551615"), 1), Err(CounterError::Overflow));
        assert_eq!(add(Some(&8u64.to_le_bytes()), 1), Err(CounterError::NotACounter));
        assert_eq!(change(Some(b"10"), -10), Ok((10, 0)));
        assert_eq!(change(None, 3), Ok((0, 3)));
        assert_eq!(change(Some(b"10"), -11), Err(CounterError::Underflow));
        assert_eq!(change(Some(b"18446744073709551615"), 1), Err(CounterError::Overflow));
        assert_eq!(change(Some(b"x"), 1), Err(CounterError::NotACounter));
        assert_eq!(change(Some(b"0"), i64::MIN), Err(CounterError::Underflow));
    }

    proptest! {
        #[test]
        fn encoding_round_trips(n in any::<u64>()) {
            prop_assert_eq!(parse(Some(&encode(n))), Ok(n));
        }
    }
}
