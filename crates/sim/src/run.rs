//! One swarm run: draw the knobs from the seed, run the cluster, apply every checker, and
//! report (`DESIGN.md`, testing layer 3: a failure prints `cargo run -p strata-sim -- --seed N`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::check::{run_checkers, Violation, CHECKERS, NOTES, RIFL_GAPS};
use crate::cluster::{Cluster, RunStats};
use crate::history::{digest_of, fmt_ms, History, OpClass, Outcome};
use crate::knobs::{Canary, Knobs};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Plant this bug in every replica.
    pub canary: Option<Canary>,
    /// Count orphaned divergence (see `check::convergence`) as a violation.
    pub strict_convergence: bool,
    /// Count plain writes executed twice by a retry (see `check::rifl`) as violations.
    pub strict_rifl: bool,
}

#[derive(Debug)]
pub struct RunReport {
    pub opts: RunOptions,
    pub knobs: Knobs,
    pub history: History,
    pub stats: RunStats,
    /// Earliest first.
    pub violations: Vec<Violation>,
    pub notes: Vec<Violation>,
    /// Digest of the history and the counters: equal for two runs of one seed.
    pub digest: u64,
}

/// Runs seed `seed` to the end and checks it.
pub fn run_seed(seed: u64, opts: &RunOptions) -> RunReport {
    run_knobs(Knobs::draw(seed, opts.canary), opts)
}

/// Runs hand-made knobs (a scenario) to the end and checks it. `opts.canary` is only reported:
/// the knobs' own canary is the one planted.
pub fn run_knobs(knobs: Knobs, opts: &RunOptions) -> RunReport {
    let (history, stats) = Cluster::new(knobs.clone()).run();
    let mut violations = run_checkers(&history, CHECKERS);
    let mut notes = run_checkers(&history, NOTES);
    if opts.strict_convergence {
        violations.extend(notes.iter().cloned());
    }
    let gaps = run_checkers(&history, RIFL_GAPS);
    if opts.strict_rifl {
        violations.extend(gaps);
        violations.sort_by_key(|v| v.at.unwrap_or(strata_wire::Instant::MAX));
    } else {
        notes.extend(gaps);
    }
    let digest = digest_of(&(&history, &stats));
    RunReport { opts: *opts, knobs, history, stats, violations, notes, digest }
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many violations each checker reported.
    pub fn violations_by_checker(&self) -> BTreeMap<&'static str, usize> {
        let mut by = BTreeMap::new();
        for v in &self.violations {
            *by.entry(v.checker).or_insert(0) += 1;
        }
        by
    }

    /// The command that reproduces this run.
    pub fn repro(&self) -> String {
        let mut cmd = format!("cargo run -p strata-sim -- --seed {}", self.knobs.seed);
        if let Some(c) = self.opts.canary {
            cmd += &format!(" --canary {}", c.name());
        }
        if self.opts.strict_convergence {
            cmd += " --strict-convergence";
        }
        if self.opts.strict_rifl {
            cmd += " --strict-rifl";
        }
        cmd
    }

    /// One line for a sweep.
    pub fn one_line(&self) -> String {
        let h = &self.history;
        let done = h.ops.iter().filter(|o| o.witness().is_some()).count();
        let verdict = if self.passed() {
            "ok".to_string()
        } else {
            format!("FAIL ({} violations)", self.violations.len())
        };
        format!(
            "seed {:>6}: {verdict:<20} {} nodes, {done} ops, {} msgs, {} notes, digest {:016x}",
            self.knobs.seed,
            self.knobs.nodes,
            self.stats.net.sent,
            self.notes.len(),
            self.digest
        )
    }

    /// Knobs, summary, and the first `max_violations` violations with the reproduce command.
    pub fn render(&self, max_violations: usize) -> String {
        let mut s = format!("{}\n", self.knobs);
        let h = &self.history;
        let done = h.ops.iter().filter(|o| matches!(o.outcome, Outcome::Done { .. })).count();
        let failed = h.ops.iter().filter(|o| matches!(o.outcome, Outcome::Failed { .. })).count();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for o in &h.ops {
            *kinds.entry(o.kind.name()).or_insert(0) += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let local_fails =
            h.ops.iter().filter(|o| o.kind.is_rmw() && o.class() == OpClass::Relaxed).count();
        let swapped = h.ops.iter().filter(|o| o.witness().is_some_and(|w| w.swapped)).count();
        let net = &self.stats.net;
        let st = &self.stats;
        let _ = writeln!(s, "summary");
        let _ = writeln!(
            s,
            "  ops         {} invoked ({}): {done} completed, {failed} failed, {} pending",
            h.ops.len(),
            kinds.join(", "),
            h.ops.len() - done - failed
        );
        let _ = writeln!(
            s,
            "  sync        {} CAS swapped, {local_fails} weak CAS failed locally; {} commits, {} acceptances; barriers {} fast / {} slow ({} SLOW_RELEASEs); {} slow-path accesses; {} epoch bumps; {} Paxos nacks",
            swapped,
            h.commits.len(),
            h.acceptances.len(),
            st.barriers_fast,
            st.barriers_slow,
            h.slow_releases.len(),
            st.slow_path_accesses,
            st.epoch_bumps,
            st.paxos_nacks
        );
        let _ = writeln!(
            s,
            "  sessions    {} opened; versions created {}",
            h.sessions.len(),
            h.creations.len()
        );
        let _ = writeln!(
            s,
            "  messages    {} sent, {} delivered, dropped {} (loss) + {} (cut) + {} (dead node) + {} (script), {} duplicated, {} reordered; {} write re-sends, {} round re-sends",
            net.sent, net.delivered, net.dropped_loss, net.dropped_cut, net.dropped_dead, net.dropped_rule, net.duplicated, net.reordered, st.retransmissions, st.rounds_retransmitted
        );
        let fin = h.final_state.as_ref();
        let _ = writeln!(
            s,
            "  end         {} virtual, {} events; healed at {}; live {:?}, crashed {:?}",
            fmt_ms(self.stats.end_ns),
            self.stats.events,
            h.heal_at.map_or("never".into(), |t| fmt_ms(t.0)),
            fin.map(|f| f.live.iter().map(|n| n.0).collect::<Vec<_>>()).unwrap_or_default(),
            fin.map(|f| f.crashed.iter().map(|n| n.0).collect::<Vec<_>>()).unwrap_or_default(),
        );
        let _ = writeln!(s, "  digest      {:016x}", self.digest);
        for n in &self.notes {
            let _ = writeln!(s, "  note        {n}");
        }
        if self.passed() {
            let _ = write!(s, "result: ok, no violations");
        } else {
            let by: Vec<String> =
                self.violations_by_checker().iter().map(|(c, n)| format!("{c} {n}")).collect();
            let _ = writeln!(s, "result: {} VIOLATIONS ({})", self.violations.len(), by.join(", "));
            let _ = writeln!(s, "the first {}:", max_violations.min(self.violations.len()));
            for v in self.violations.iter().take(max_violations) {
                let _ = writeln!(s, "  {v}");
            }
            let _ = write!(s, "reproduce: {}", self.repro());
        }
        s
    }
}
