//! Writes to log tables (ORCA §2, rifl.md §2.1): put and delete, conditional ones
//! (`--if-absent`, `--if-value`, `--if-version`), compare-and-swap and fetch-and-add. Each is
//! one exactly-once RPC: evaluated where the shard applies it, its answer recorded and given
//! again to a retry.

use bytes::Bytes;
use strata_client::{Expect, LogIndex, LogWriteOp, WriteOpts, WriteOutcome, Written};

use crate::exit::{Failure, FAILED, NOT_SWAPPED, OK, OUTCOME_UNKNOWN, USAGE};
use crate::ops::Target;
use strata_client::ClientError;

/// The condition of `put --table` / `del --table` (at most one; none: unconditional).
#[derive(clap::Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct Condition {
    /// Log tables: write only if the key has no value (create).
    #[arg(long, requires = "table")]
    pub if_absent: bool,
    /// Log tables: write only if the key holds exactly this value.
    #[arg(long, value_name = "VALUE", requires = "table")]
    pub if_value: Option<String>,
    /// Log tables: write only if the key is still at this version: the update index a read
    /// printed (`get --table --show-version`), as `EPOCH,COUNTER` or `(EPOCH,COUNTER)`;
    /// `0,0` for a key never written.
    #[arg(long, value_name = "EPOCH,COUNTER", value_parser = parse_index, requires = "table")]
    pub if_version: Option<LogIndex>,
}

impl Condition {
    fn expect(&self) -> Option<Expect> {
        if self.if_absent {
            return Some(Expect::Absent);
        }
        if let Some(v) = &self.if_value {
            return Some(Expect::Value(Bytes::from(v.clone())));
        }
        self.if_version.map(Expect::Version)
    }
}

/// `EPOCH,COUNTER`, with or without the parentheses `LogIndex` prints.
pub fn parse_index(s: &str) -> Result<LogIndex, String> {
    let inner = s.trim().trim_start_matches('(').trim_end_matches(')');
    let (e, c) = inner.split_once(',').ok_or_else(|| format!("{s:?}: expected EPOCH,COUNTER"))?;
    let num = |x: &str| x.trim().parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
    Ok(LogIndex::new(num(e)?, num(c)?))
}

/// `put --table` (`value` Some) and `del --table` (None), conditional with `cond`. A
/// condition that does not hold prints `rejected` and the key's version, exit code 6.
pub async fn put(
    target: &Target,
    table: String,
    key: String,
    value: Option<Bytes>,
    cond: &Condition,
    immediate: bool,
    show_version: bool,
) -> Result<i32, Failure> {
    let op = match (cond.expect(), value) {
        (None, Some(v)) => LogWriteOp::Put(v),
        (None, None) => LogWriteOp::Delete,
        (Some(expect), put) => LogWriteOp::Cond { expect, put },
    };
    let w = write(target, &table, key, op, immediate).await?;
    if show_version {
        eprintln!("index {}", w.index);
    }
    Ok(rejected(&w))
}

/// `cas --table`: sets KEY to NEW iff it holds EXPECTED (`None`: is absent). Prints
/// `swapped`, or `not swapped` and the key's version (exit code 6).
pub async fn cas(
    target: &Target,
    table: String,
    key: String,
    expected: Option<Bytes>,
    new: String,
    show_version: bool,
) -> Result<i32, Failure> {
    let expect = expected.map_or(Expect::Absent, Expect::Value);
    let op = LogWriteOp::Cond { expect, put: Some(Bytes::from(new)) };
    let w = write(target, &table, key, op, false).await?;
    if show_version {
        eprintln!("index {}", w.index);
    }
    match w.outcome {
        WriteOutcome::Rejected { current } => {
            println!("not swapped");
            println!("version: {current}");
            Ok(NOT_SWAPPED)
        }
        _ => {
            println!("swapped");
            Ok(OK)
        }
    }
}

/// `faa --table`: adds DELTA (negative too) to the counter, `repeat` times, printing each
/// previous value; exactly once each.
pub async fn faa(
    target: &Target,
    table: String,
    key: String,
    delta: i64,
    repeat: u64,
    show_version: bool,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut t = client.table(&table).await?;
    let mut unknown = 0;
    for _ in 0..repeat {
        let w = match t.write_op(key.clone(), LogWriteOp::Add(delta), WriteOpts::default()).await {
            Ok(w) => w,
            Err(e @ ClientError::ExpiredLease(_)) if repeat > 1 => {
                eprintln!("outcome unknown: {e}");
                println!("?");
                unknown += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if show_version {
            eprintln!("index {}", w.index);
        }
        match w.outcome {
            WriteOutcome::Added { old } => println!("{old}"),
            WriteOutcome::NotCounter => {
                let why = "the value is not a counter (decimal digits of an unsigned 64-bit integer); it is unchanged";
                return Err(Failure::new(USAGE, why));
            }
            WriteOutcome::OutOfRange => {
                let why = format!(
                    "adding {delta} would take the counter out of 0..={}; it is unchanged",
                    u64::MAX
                );
                return Err(Failure::new(USAGE, why));
            }
            other => return Err(Failure::new(FAILED, format!("unexpected outcome {other:?}"))),
        }
    }
    Ok(if unknown > 0 { OUTCOME_UNKNOWN } else { OK })
}

async fn write(
    target: &Target,
    table: &str,
    key: String,
    op: LogWriteOp,
    immediate: bool,
) -> Result<Written, Failure> {
    let client = target.client().await?;
    let mut t = client.table(table).await?;
    Ok(t.write_op(key, op, WriteOpts { immediate }).await?)
}

fn rejected(w: &Written) -> i32 {
    match w.outcome {
        WriteOutcome::Rejected { current } => {
            println!("rejected: the key is at version {current}");
            NOT_SWAPPED
        }
        _ => OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_printed() {
        assert_eq!(parse_index("(3,7)"), Ok(LogIndex::new(3, 7)));
        assert_eq!(parse_index("3, 7"), Ok(LogIndex::new(3, 7)));
        assert_eq!(parse_index("0,0"), Ok(LogIndex::ZERO));
        assert!(parse_index("3").is_err() && parse_index("a,1").is_err());
    }
}
