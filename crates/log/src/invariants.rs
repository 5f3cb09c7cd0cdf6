//! Local state invariants (ORCA §7), asserted after every input in tests and simulation.

use strata_wire::log::LogIndex;

use crate::config::{majority, ReadPolicy};
use crate::replica::{LogReplica, Membership, Role};

impl LogReplica {
    pub(crate) fn check_local_invariants(&self) {
        let last = self.log.last_index();
        let applied = self.kv.applied();
        assert!(
            applied <= last || applied == self.log.base(),
            "{}: applied {} beyond last {}",
            self.id,
            applied,
            last
        );
        assert!(
            self.persisted <= last,
            "{}: persisted {} beyond last {}",
            self.id,
            self.persisted,
            last
        );
        assert!(
            last.epoch <= self.epoch,
            "{}: entry {} from a future epoch {}",
            self.id,
            last,
            self.epoch
        );
        // rifl.md §7 inv. 7, 8: records above their watermark, at most the window per client.
        if let Err(e) = self.kv.rifl().check_invariants() {
            panic!("{}: completion records: {e}", self.id);
        }
        if let Err(e) = self.kv.check_txn() {
            panic!("{}: transactions: {e}", self.id);
        }
        assert_eq!(
            self.role == Role::Leader,
            self.leader.is_some(),
            "{}: role and leader state disagree",
            self.id
        );
        if self.role == Role::Candidate {
            assert_eq!(self.voted_for, Some(self.id), "{}: a candidate votes for itself", self.id);
        }
        // §7.7: a serving follower has applied everything its DI_F covers (R1 consequence).
        if self.is_serving(self.now) && self.cfg.reads == ReadPolicy::ActiveSet {
            assert!(
                self.lease.di_f <= applied,
                "{}: serving with DI_F {} above applied {}",
                self.id,
                self.lease.di_f,
                applied
            );
        }
        let Some(l) = &self.leader else { return };
        assert_eq!(self.leader_id, Some(self.id));
        assert!(
            l.noop.epoch == self.epoch && self.log.contains(l.noop),
            "{}: the NoOp of epoch {} is in the log",
            self.id,
            self.epoch
        );
        assert!(
            l.next_counter > 1 && LogIndex::new(self.epoch, l.next_counter - 1) == last,
            "{}: next counter follows the last entry",
            self.id
        );
        for (f, p) in &l.progress {
            assert!(
                p.match_index <= last && p.persisted <= p.match_index.max(p.persisted),
                "{}: progress of {} beyond the log",
                self.id,
                f
            );
        }
        if !l.synced {
            assert_eq!(l.di, LogIndex::ZERO);
            return;
        }
        // §7.7 DI sanity.
        assert!(l.di >= l.noop && l.di <= last, "{}: DI {} outside [noop, last]", self.id, l.di);
        let mut persisted: Vec<LogIndex> =
            l.progress.values().map(|p| p.persisted).chain([self.persisted]).collect();
        persisted.sort_unstable_by(|a, b| b.cmp(a));
        assert!(
            l.di <= persisted[majority(self.n) - 1],
            "{}: DI {} above the majority-persisted index",
            self.id,
            l.di
        );
        assert!(l.di <= applied, "{}: DI {} above the leader's applied index", self.id, l.di);
        if self.cfg.reads == ReadPolicy::ActiveSet {
            assert!(
                l.di <= self.persisted,
                "{}: DI {} above the leader's persisted index",
                self.id,
                l.di
            );
            // §7.8 AS size and R1: every member (and Removing node) holds DI.
            assert!(
                l.active_set_len() >= majority(self.n),
                "{}: active set below a majority",
                self.id
            );
            for (f, p) in &l.progress {
                if p.membership != Membership::NotMember {
                    assert!(
                        p.durable() >= l.di,
                        "{}: member {} has durable {} below DI {}",
                        self.id,
                        f,
                        p.durable(),
                        l.di
                    );
                }
            }
        }
    }
}
