//! `strata txn`: one transaction read from standard input, one operation per line (issue #18):
//!
//! ```text
//! get K          print K's value (as of the transaction)
//! put K V        write V
//! del K          delete K
//! add K DELTA    change the counter K by DELTA (decimal text; absent = 0; never below 0)
//! check K V      abort unless K holds V
//! ```
//!
//! A key is `TABLE:KEY`, or `KEY` in `--table`. Blank lines and `#` comments are skipped. The
//! values of the `get`s are printed once the transaction is decided, then `committed` or
//! `aborted: REASON` (exit code 8). `--retry N` runs an aborted transaction again, up to N
//! more times (not one whose `check` failed: it would fail again on the same data).
//!
//! `strata txn lease-model` is a subcommand that needs no cluster and reads nothing: Kairos's
//! lease model for one key (`crate::lease_model`). A subcommand and the flags of a
//! transaction exclude each other (`args_conflicts_with_subcommands`), so `strata txn
//! [--table T] [--retry N] < ops` reads as it always did.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::time::Duration;

use bytes::Bytes;
use strata_client::{Client, ClientError, Transaction, TxnOutcome};
use strata_wire::counter;

use crate::exit::{Failure, ABORTED, FAILED, OK, USAGE};
use crate::ops::Target;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TxnArgs {
    #[command(subcommand)]
    pub command: Option<TxnCommand>,
    /// The table of keys given without `TABLE:`.
    #[arg(long)]
    pub table: Option<String>,
    /// Run an aborted transaction again up to N more times (back-off between attempts).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retry: u32,
    #[command(flatten)]
    pub target: Target,
}

#[derive(clap::Subcommand, Debug)]
pub enum TxnCommand {
    /// Kairos's lease model for one key (kairos.md §5.11 – §5.13), no cluster needed: the ideal
    /// lease for mean read gap R and mean write gap W (Algorithm 1), its hits per lease and
    /// fresh-hit rate, and the fresh / stale / miss rates of leases around it; --monte-carlo N
    /// adds the simulator's, --sweep prints Fig. 5's data as CSV.
    LeaseModel(crate::lease_model::LeaseModelArgs),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Line {
    Get(Key),
    Put(Key, Bytes),
    Del(Key),
    Add(Key, i64),
    Check(Key, Bytes),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    table: String,
    key: Bytes,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.table, String::from_utf8_lossy(&self.key))
    }
}

/// What one attempt ended with.
enum Attempt {
    Decided(TxnOutcome, Vec<Option<Bytes>>),
    /// A `check` failed: aborted by the client, nothing sent.
    CheckFailed(String),
}

pub fn run(args: TxnArgs) -> Result<i32, Failure> {
    if let Some(TxnCommand::LeaseModel(model)) = args.command {
        return crate::lease_model::run(model);
    }
    let mut text = String::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::new(FAILED, format!("standard input: {e}")))?;
        text.push_str(&line);
        text.push('\n');
    }
    let lines = parse(&text, args.table.as_deref())?;
    crate::block_on(execute(&args, &lines))
}

fn parse(text: &str, table: Option<&str>) -> Result<Vec<Line>, Failure> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| Failure::new(USAGE, format!("line {}: {why}: {raw:?}", n + 1));
        let mut words = line.splitn(3, char::is_whitespace);
        let op = words.next().unwrap_or_default();
        let key_word = words.next().ok_or_else(|| bad("missing key"))?;
        let key = match key_word.split_once(':') {
            Some((t, k)) if !t.is_empty() && !k.is_empty() => {
                Key { table: t.to_string(), key: Bytes::from(k.to_string()) }
            }
            _ => match table {
                Some(t) => Key { table: t.to_string(), key: Bytes::from(key_word.to_string()) },
                None => return Err(bad("a key without TABLE: needs --table")),
            },
        };
        let rest = words.next().map(str::trim_start);
        let value = || rest.map(|v| Bytes::from(v.to_string())).ok_or_else(|| bad("missing value"));
        out.push(match (op, rest) {
            ("get", None) => Line::Get(key),
            ("del", None) => Line::Del(key),
            ("put", _) => Line::Put(key, value()?),
            ("check", _) => Line::Check(key, value()?),
            ("add", Some(d)) => {
                Line::Add(key, d.parse().map_err(|_| bad("DELTA must be a whole number"))?)
            }
            ("get" | "del", Some(_)) => return Err(bad("takes a key only")),
            ("add", None) => return Err(bad("missing DELTA")),
            _ => return Err(bad("unknown operation (get, put, del, add, check)")),
        });
    }
    if out.is_empty() {
        return Err(Failure::new(USAGE, "no operation on standard input"));
    }
    Ok(out)
}

async fn execute(args: &TxnArgs, lines: &[Line]) -> Result<i32, Failure> {
    let client = args.target.client().await?;
    let mut pause = Duration::from_millis(1);
    for attempt in 0..=args.retry {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
        match once(&client, lines).await? {
            Attempt::Decided(TxnOutcome::Committed, gets) => {
                print_gets(&gets)?;
                println!("committed");
                return Ok(OK);
            }
            Attempt::Decided(TxnOutcome::Aborted { reason }, _) if attempt == args.retry => {
                println!("aborted: {reason}");
                return Ok(ABORTED);
            }
            Attempt::Decided(TxnOutcome::Aborted { .. }, _) => {}
            Attempt::CheckFailed(why) => {
                println!("aborted: {why}");
                return Ok(ABORTED);
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// One attempt: the lines in order, then the decision (waiting for it to be applied
/// everywhere: the process exits right after, and its locks must not wait for recovery).
async fn once(client: &Client, lines: &[Line]) -> Result<Attempt, Failure> {
    let mut tx = client.transaction();
    read_ahead(&mut tx, lines).await?;
    let mut gets = Vec::new();
    for line in lines {
        match line {
            Line::Get(k) => gets.push(read(&mut tx, k, false).await?),
            Line::Put(k, v) => tx.write(&k.table, k.key.clone(), v.clone()),
            Line::Del(k) => tx.delete(&k.table, k.key.clone()),
            Line::Add(k, delta) => {
                // A counter change writes what it reads: read for update, so that concurrent
                // `add`s of one key queue at its leader instead of aborting each other.
                let old = read(&mut tx, k, true).await?;
                let (_, new) = counter::change(old.as_deref(), *delta)
                    .map_err(|e| Failure::new(USAGE, format!("add {k}: {e}")))?;
                tx.write(&k.table, k.key.clone(), counter::encode(new));
            }
            Line::Check(k, v) => {
                let now = read(&mut tx, k, false).await?;
                if now.as_ref() != Some(v) {
                    let held = now.map_or("no value".to_string(), |n| {
                        format!("{:?}", String::from_utf8_lossy(&n))
                    });
                    // The process exits next: release the `add`s' reads for update now.
                    tx.rollback().await;
                    return Ok(Attempt::CheckFailed(format!(
                        "check {k} failed: it holds {held}, not {:?}",
                        String::from_utf8_lossy(v)
                    )));
                }
            }
        }
    }
    let outcome = tx.commit_and_sync().await.map_err(Failure::from)?;
    Ok(Attempt::Decided(outcome, gets))
}

/// Reads up front, with one request per shard (`Transaction::read_many`), every key whose
/// first line reads it (`get`, `add`, `check`; a key first written is not read); for update
/// where an `add` changes it. The lines then find the values in the transaction.
async fn read_ahead(tx: &mut Transaction, lines: &[Line]) -> Result<(), Failure> {
    let changed: BTreeSet<&Key> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Add(k, _) => Some(k),
            _ => None,
        })
        .collect();
    let mut mentioned = BTreeSet::new();
    // (plain, table) -> keys: reads for update (`false`) first, each table in name order.
    let mut reads: BTreeMap<(bool, &str), Vec<Bytes>> = BTreeMap::new();
    for line in lines {
        let (k, reads_first) = match line {
            Line::Get(k) | Line::Add(k, _) | Line::Check(k, _) => (k, true),
            Line::Put(k, _) | Line::Del(k) => (k, false),
        };
        if mentioned.insert(k) && reads_first {
            let plain = !changed.contains(k);
            reads.entry((plain, &k.table)).or_default().push(k.key.clone());
        }
    }
    for ((plain, table), keys) in reads {
        tx.read_many_with(table, keys, !plain).await.map_err(Failure::from)?;
    }
    Ok(())
}

async fn read(tx: &mut Transaction, k: &Key, for_update: bool) -> Result<Option<Bytes>, Failure> {
    let read = tx.read_with(&k.table, k.key.clone(), for_update).await;
    read.map_err(|e: ClientError| Failure::from(e))
}

fn print_gets(gets: &[Option<Bytes>]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    for g in gets {
        let r = match g {
            Some(v) => {
                out.write_all(&crate::ops::displayable(v)).and_then(|()| out.write_all(b"\n"))
            }
            None => out.write_all(b"(absent)\n"),
        };
        r.map_err(|e| Failure::new(FAILED, e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_a_default_table_or_table_prefixes() {
        let lines = parse(
            "# transfer\nget a\nput t2:b hello world\n\nadd a -5\ncheck a 10\ndel c\n",
            Some("t"),
        )
        .unwrap();
        let k = |t: &str, key: &'static str| Key {
            table: t.into(),
            key: Bytes::from_static(key.as_bytes()),
        };
        assert_eq!(
            lines,
            vec![
                Line::Get(k("t", "a")),
                Line::Put(k("t2", "b"), Bytes::from_static(b"hello world")),
                Line::Add(k("t", "a"), -5),
                Line::Check(k("t", "a"), Bytes::from_static(b"10")),
                Line::Del(k("t", "c")),
            ]
        );
        for bad in ["get", "put a", "add a x", "frob a", "get a b", "get"] {
            assert_eq!(parse(bad, Some("t")).unwrap_err().code, USAGE, "{bad}");
        }
        assert!(parse("get a", None).unwrap_err().message.contains("--table"));
        assert!(parse("\n# nothing\n", Some("t")).is_err());
    }
}
