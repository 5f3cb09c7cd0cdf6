//! An optional service-rate limit per shard leader: a token bucket of `rate` requests per
//! second (a burst of a tenth of a second), in front of the shard replicas this node leads.
//!
//! Why: on a 2-core machine every shard leader is as fast as the whole machine, so a hot spot
//! (one shard, one validator, one site's counter) costs nothing visible. Benchmarks that must
//! show hot-spot effects (kairos.md §8.3, por.md §8) give each leader a fixed capacity instead.
//! A request over the rate waits in the shard's queue (FIFO, so it models a busy server, not a
//! refusal) and is served when a token is there; past `MAX_QUEUED` it is refused
//! `Unavailable` (retryable). Off by default; set `shard_rate_limit` in the node config.
//!
//! What costs a token ([`takes_a_token`], [`RateLimit::charge`]): every client request the
//! shard serves (reads, writes, prepares, decisions, validator objects), and every EI
//! invalidation its leader pushes (kairos.md §5.14.2: the server's work that leases avoid,
//! Fig. 11). Kairos watermark reports do not: they fold a client's two timestamps into the
//! leader's soft state, touch no key and no log, and come every `REPORT_PERIOD` from every
//! client to every shard it uses, uniformly, so charging them would spend a fixed share of
//! every bucket on bookkeeping the paper's servers do not queue behind (kairos.md §5.9).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use strata_core::Route;
use strata_log::LogRequest;
use strata_wire::Instant;

use crate::effects::ShardKey;

/// Requests a shard may have waiting for a token before new ones are refused.
pub const MAX_QUEUED: usize = 100_000;
/// A token counts as there within this much of a whole one (float rounding), so a request is
/// always served at the deadline `deadline` computed for it.
const WHOLE: f64 = 1.0 - 1e-9;

/// A request waiting for a token.
pub(crate) struct Queued {
    pub route: Route,
    pub corr: u64,
    pub req: LogRequest,
}

struct Bucket {
    tokens: f64,
    last: Instant,
    queue: VecDeque<Queued>,
}

impl Bucket {
    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let dt = now.saturating_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.last = self.last.max(now);
    }
}

/// Whether `req` waits for a token of its shard's bucket (module docs).
pub(crate) fn takes_a_token(req: &LogRequest) -> bool {
    !matches!(req, LogRequest::KairosReport { .. })
}

/// Every rate-limited shard's bucket (module docs).
pub(crate) struct RateLimit {
    rate: f64,
    burst: f64,
    buckets: BTreeMap<ShardKey, Bucket>,
}

/// What [`RateLimit::admit`] decided.
pub(crate) enum Admission {
    /// Serve it now.
    Now(Queued),
    /// It waits for a token.
    Queued,
    /// The queue is full: refuse it.
    Full(Queued),
}

impl RateLimit {
    /// A limit of `per_s` requests per second per shard leader.
    pub fn new(per_s: u32) -> RateLimit {
        assert!(per_s > 0, "a rate limit of 0 serves nothing");
        let rate = f64::from(per_s);
        RateLimit { rate, burst: (rate / 10.0).max(1.0), buckets: BTreeMap::new() }
    }

    /// A request for the shard `sk`, which this node leads.
    pub fn admit(&mut self, now: Instant, sk: ShardKey, q: Queued) -> Admission {
        let (rate, burst) = (self.rate, self.burst);
        let b = self.buckets.entry(sk).or_insert_with(|| Bucket {
            tokens: burst,
            last: now,
            queue: VecDeque::new(),
        });
        b.refill(now, rate, burst);
        if b.queue.is_empty() && b.tokens >= WHOLE {
            b.tokens -= 1.0;
            Admission::Now(q)
        } else if b.queue.len() >= MAX_QUEUED {
            Admission::Full(q)
        } else {
            b.queue.push_back(q);
            Admission::Queued
        }
    }

    /// Work the leader of `sk` did on its own (`n` EI invalidations pushed): `n` tokens
    /// taken from its bucket, which may go into debt, so the requests that follow wait as
    /// long as that work would have kept a server of this rate busy.
    pub fn charge(&mut self, sk: ShardKey, n: usize) {
        if let Some(b) = self.buckets.get_mut(&sk) {
            b.tokens -= n as f64;
        }
    }

    /// The requests whose token has come by `now`, in arrival order, by shard.
    pub fn release(&mut self, now: Instant) -> Vec<(ShardKey, Queued)> {
        let (rate, burst) = (self.rate, self.burst);
        let mut out = Vec::new();
        for (k, b) in self.buckets.iter_mut().filter(|(_, b)| !b.queue.is_empty()) {
            b.refill(now, rate, burst);
            while b.tokens >= WHOLE {
                let Some(q) = b.queue.pop_front() else { break };
                b.tokens -= 1.0;
                out.push((*k, q));
            }
        }
        out
    }

    /// When the next waiting request gets its token.
    pub fn deadline(&self) -> Option<Instant> {
        self.buckets
            .values()
            .filter(|b| !b.queue.is_empty())
            .map(|b| {
                let missing = (1.0 - b.tokens).max(0.0);
                b.last + Duration::from_nanos((missing / self.rate * 1e9).ceil() as u64)
            })
            .min()
    }

    /// Requests waiting, over every shard.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.buckets.values().map(|b| b.queue.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(token: u64) -> Queued {
        Queued {
            route: 1,
            corr: token,
            req: LogRequest::Read {
                token,
                key: bytes::Bytes::from_static(b"k"),
                min_index: None,
                intent: strata_wire::txn::ReadIntent::Plain,
            },
        }
    }

    fn ms(t: u64) -> Instant {
        Instant(1_000_000_000 + t * 1_000_000)
    }

    #[test]
    fn a_burst_is_served_then_the_rest_at_the_rate_in_arrival_order() {
        // 100/s: a burst of 10, then one every 10 ms.
        let mut r = RateLimit::new(100);
        let sk = (7, 0);
        let served_now =
            (1..=50).filter(|&t| matches!(r.admit(ms(0), sk, read(t)), Admission::Now(_))).count();
        assert_eq!(served_now, 10, "the burst");
        assert_eq!(r.queued(), 40);
        let next = r.deadline().expect("a queued request waits for a token");
        assert_eq!(next, ms(10), "the next token comes 1/rate later");
        assert!(r.release(ms(9)).is_empty(), "no token before its time");
        let mut order = Vec::new();
        for t in (10..=400).step_by(10) {
            for (k, q) in r.release(ms(t)) {
                assert_eq!(k, sk);
                order.push(q.corr);
            }
        }
        assert_eq!(order, (11..=50).collect::<Vec<_>>(), "every waiting request, in order");
        assert_eq!(r.queued(), 0);
        assert_eq!(r.deadline(), None);
    }

    #[test]
    fn pushed_invalidations_are_charged_and_reports_are_free() {
        // 100/s, a burst of 10: a read and 9 pushes spend the burst, and 5 more put the
        // bucket 5 in debt, so the next request waits 60 ms (5 + 1 tokens at 10 ms each).
        let mut r = RateLimit::new(100);
        let sk = (7, 0);
        assert!(matches!(r.admit(ms(0), sk, read(1)), Admission::Now(_)));
        r.charge(sk, 14);
        assert!(matches!(r.admit(ms(0), sk, read(2)), Admission::Queued));
        assert_eq!(r.deadline(), Some(ms(60)));
        assert!(r.release(ms(59)).is_empty());
        assert_eq!(r.release(ms(60)).len(), 1);
        assert!(takes_a_token(&read(3).req));
        let report = LogRequest::KairosReport {
            token: 4,
            client: 1,
            seq: 1,
            local_wm: Default::default(),
            c_freshness: Default::default(),
        };
        assert!(!takes_a_token(&report));
    }

    #[test]
    fn shards_have_their_own_buckets_and_a_full_queue_refuses() {
        let mut r = RateLimit::new(10); // burst 1
        assert!(matches!(r.admit(ms(0), (1, 0), read(1)), Admission::Now(_)));
        assert!(matches!(r.admit(ms(0), (1, 1), read(2)), Admission::Now(_)), "another shard");
        assert!(matches!(r.admit(ms(0), (1, 0), read(3)), Admission::Queued));
        for t in 0..MAX_QUEUED as u64 - 1 {
            assert!(matches!(r.admit(ms(0), (1, 0), read(t)), Admission::Queued));
        }
        assert!(matches!(r.admit(ms(0), (1, 0), read(9)), Admission::Full(_)));
    }
}
