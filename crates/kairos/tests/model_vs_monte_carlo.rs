//! kairos.md §7 inv. 9: the model of §5.11 agrees with the Monte Carlo simulator of §5.13
//! within 2 % absolute at N = 2,000,000 reads — and a wrong model does not (the canary: a
//! comparison that cannot fail proves nothing).
//!
//! Two sets of points: twelve chosen ones (Fig. 5's pair, every reference row at its ideal
//! lease, edges), against which the canary runs too, and the whole of inv. 9 — every reference
//! `(R, W)` of §5.12 at every `d` in `{R, 2R, ..., 20R}`.

use strata_kairos::{monte_carlo, HitRates, LeaseModel};

/// The spec's N.
const READS: u64 = 2_000_000;
/// The spec's tolerance (the paper measured 1.4 % on average).
const TOLERANCE: f64 = 0.02;
/// What sampling error allows at N = 2M (§5.13: "< 0.5 % absolute"): a tighter check, so that
/// a model wrong by a little fails too.
const SAMPLING_TOLERANCE: f64 = 0.005;

const MS: f64 = 1e-3;

/// `(R ms, W ms, d ms)`: Fig. 5's pair from R to 20R, each reference row of §5.12 at its ideal
/// lease, writes as frequent as reads, a key never written, and a lease much longer than W.
const POINTS: [(f64, Option<f64>, f64); 12] = [
    (1.0, Some(19.0), 1.0),
    (1.0, Some(19.0), 6.0),
    (1.0, Some(19.0), 20.0),
    (3.2, Some(160.0), 32.0),
    (0.160, Some(160.0), 7.04),
    (0.500, Some(2800.0), 52.5),
    (0.500, Some(10.0), 3.0),
    (1.0, Some(1.0), 1.0),
    (1.0, Some(1.0), 20.0),
    (1.0, None, 10.0),
    (2.0, Some(5.0), 40.0),
    (0.5, Some(19.0), 0.25),
];

/// Every point's three rates, model against simulation: `(description, |difference|)`.
fn compare(
    model: impl Fn(f64, Option<f64>, f64) -> HitRates,
    points: &[(f64, Option<f64>, f64)],
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (i, &(r, w, d)) in points.iter().enumerate() {
        let (r, w, d) = (r * MS, w.map(|w| w * MS), d * MS);
        let predicted = model(r, w, d);
        let simulated = monte_carlo::simulate(r, w, d, READS, 1000 + i as u64).unwrap().rates();
        for (name, p, s) in [
            ("fresh", predicted.fresh, simulated.fresh),
            ("stale", predicted.stale, simulated.stale),
            ("miss", predicted.miss, simulated.miss),
        ] {
            let line =
                format!("R {r} s, W {w:?} s, d {d} s: {name} model {p:.4} vs simulated {s:.4}");
            out.push((line, (p - s).abs()));
        }
    }
    out
}

/// The lines of `compared` that differ by more than `tolerance`.
fn beyond(compared: &[(String, f64)], tolerance: f64) -> Vec<&str> {
    compared.iter().filter(|(_, diff)| *diff > tolerance).map(|(line, _)| line.as_str()).collect()
}

fn largest(compared: &[(String, f64)]) -> f64 {
    compared.iter().map(|(_, diff)| *diff).fold(0.0, f64::max)
}

fn the_model(r: f64, w: Option<f64>, d: f64) -> HitRates {
    LeaseModel::new(r, w).unwrap().rates(d)
}

/// The canary's planted bug: a lease in which a write arrives is fresh all the way
/// (`d_fresh = d`), i.e. no hit is ever stale.
fn wrong_model(r: f64, w: Option<f64>, d: f64) -> HitRates {
    let m = LeaseModel::new(r, w).unwrap();
    let d_fresh = d;
    let fresh = m.p_no_write(d) * m.hit_rate(d, d) + m.p_write(d) * m.hit_rate(d_fresh, d);
    HitRates { fresh, stale: m.total_hit_rate(d) - fresh, miss: m.miss_rate(d) }
}

#[test]
fn the_model_agrees_with_monte_carlo_within_2_percent() {
    let compared = compare(the_model, &POINTS);
    let bad = beyond(&compared, TOLERANCE);
    assert!(bad.is_empty(), "the model and the simulator disagree:\n{}", bad.join("\n"));
    let bad = beyond(&compared, SAMPLING_TOLERANCE);
    assert!(bad.is_empty(), "beyond sampling error:\n{}", bad.join("\n"));
    eprintln!(
        "largest |model - simulated| over {} points: {:.5}",
        POINTS.len(),
        largest(&compared)
    );
}

#[test]
fn canary_a_wrong_model_disagrees_with_monte_carlo() {
    let compared = compare(wrong_model, &POINTS);
    let bad = beyond(&compared, TOLERANCE);
    // Every point whose true stale rate is above 2 % (with a margin for sampling) is flagged.
    let should_fail: Vec<_> = POINTS
        .iter()
        .filter(|(r, w, d)| the_model(r * MS, w.map(|w| w * MS), d * MS).stale > 0.025)
        .collect();
    assert!(should_fail.len() >= 6, "the points exercise stale hits: {should_fail:?}");
    assert!(
        bad.len() >= 2 * should_fail.len(),
        "the comparison must catch d_fresh = d (fresh and stale off at each such point); \
         it flagged only:\n{}",
        bad.join("\n")
    );
    assert!(largest(&compared) > 0.1, "Fig. 5's ideal point alone is 0.12 off");
}

/// The whole of inv. 9: 120 points of 2M reads (3.4 s in the debug profile).
#[test]
fn every_reference_row_agrees_with_monte_carlo_from_r_to_20r() {
    let rows =
        [(1.0, 19.0), (3.2, 160.0), (0.160, 160.0), (0.500, 2800.0), (0.500, 10.0), (1.0, 1.0)];
    let points: Vec<_> =
        rows.iter().flat_map(|&(r, w)| (1..=20).map(move |k| (r, Some(w), k as f64 * r))).collect();
    let compared = compare(the_model, &points);
    let bad = beyond(&compared, SAMPLING_TOLERANCE);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    eprintln!(
        "largest |model - simulated| over {} points: {:.5}",
        points.len(),
        largest(&compared)
    );
}
