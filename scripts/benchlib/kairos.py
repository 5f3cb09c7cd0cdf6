"""scripts/bench-kairos.sh: the Kairos evaluation's tables and charts (kairos.md §8.2, §8.3).

Run names (bench-kairos.sh): `f8-CFG-roPCT`, `f9-CFG-zALPHA`, `f11-CFG-cN`, `f13-staticX`,
`f13-mean`, each with `-rN` per run. Fig. 9a's default skew (0.99) and Fig. 13's ideal leases
are Fig. 8's point at 90 % read-only (the same workload), so they are read from there when
the script did not run them separately.

Every median comes from benchlib.summary.
"""
import re
from pathlib import Path

from .summary import fmt, load, median, ratio, runs, throughput

LABELS = {
    "baseline": "Baseline",
    "cv": "CV only",
    "naive": "Naive caching",
    "ei": "EI caching",
    "ideal": "Ideal leases",
    "kairos": "Kairos (ideal + CV)",
}
# kairos.md §8.2's goals, as issue #19 item 7 states them.
GOAL_IDEAL = 2.5  # lease caching >= 2.5x Baseline (paper: 2.35x)
GOAL_KAIROS = 3.1  # Kairos >= 3.1x Baseline (paper: 3.1x)
GOAL_EI_TPUT = 1.5  # leases >= 1.5x EI's throughput at EI's knee (paper: 1.46x)
GOAL_EI_CLIENTS = 1.3  # ... with >= 30 % more clients (paper: 30 %)


def fig8_name(cfg, ro):
    return f"f8-{cfg}-ro{ro}"


def point(results, name, fallback=None):
    """The runs of `name`, or of `fallback` when `name` has none."""
    r = runs(results, name)
    return r if r or fallback is None else runs(results, fallback)


def fig9_runs(results, cfg, z):
    return point(results, f"f9-{cfg}-z{z}", fig8_name(cfg, "90") if z == "0.99" else None)


def fig13_name(policy):
    return fig8_name("ideal", "90") if policy == "ideal" else f"f13-{policy.replace(':', '')}"


def fig13_runs(results, policy):
    return runs(results, fig13_name(policy))


def kairos_of(reports, field):
    """Median of a `kairos` report field (None when absent)."""
    return median((r.get("kairos") or {}).get(field) for r in reports)


def cache_stat(reports, field):
    """Median of a cache counter per run (hits, misses, stale_hits)."""
    return median(((r.get("kairos") or {}).get("cache_stats") or {}).get(field) for r in reports)


def aborts_per_commit(reports):
    return median(r["txn"]["aborted_attempts"] / max(r["txn"]["committed"], 1) for r in reports)


def abort_mix(reports):
    """Aborted attempts by reason over every run, as `reason n, ...`."""
    total = {}
    for r in reports:
        for reason, n in r["txn"].get("aborts", {}).items():
            total[reason] = total.get(reason, 0) + n
    return ", ".join(f"{k} {v}" for k, v in sorted(total.items(), key=lambda kv: -kv[1])) or "-"


def commit_p50(reports):
    return median(r["txn"]["commit_us"]["p50_us"] for r in reports if r["txn"]["commit_us"]["count"])


def txn_latency(reports, q):
    return median(r["latency_us"]["all"][f"{q}_us"] for r in reports if r["latency_us"]["all"]["count"])


def cores(results, name, field):
    """Median cores busy over a point's invocations (`NAME-rN.cpu.json`: `server_cpu_s`, the
    nodes; `machine_cpu_s`, every process on the machine), or None."""
    pat = re.compile(re.escape(name) + r"-r\d+\.cpu\.json")
    found = [load(f) for f in Path(results).iterdir() if pat.fullmatch(f.name)]
    return median(c[field] / c["wall_s"] for c in found if c.get("wall_s"))


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def knee(xs, tputs):
    """The client count where throughput peaks (the first of equal maxima), and that peak:
    past it, more clients bring less (kairos.md §8.2 Fig. 11's "supports N clients")."""
    best = None
    for x, t in zip(xs, tputs):
        if t is not None and (best is None or t > best[1]):
            best = (x, t)
    return best


def detail_rows(results, names):
    """One row per (label, run name, runs): throughput, ratio to the first row, aborts, cache,
    latency, and the cores the nodes and the whole machine kept busy."""
    print("| configuration | committed/s | vs first row | aborted attempts per commit | aborts by reason (all runs) |"
          " cache hit rate | stale hits per run | txn p50 / p99 µs | commit p50 µs | node cores | machine cores |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    base = None
    for label, name, reps in names:
        t = throughput(reps)
        base = t if base is None else base
        print(f"| {label} | {fmt(t)} | {fmt(ratio(t, base), '.2f')} | {fmt(aborts_per_commit(reps) if reps else None, '.3f')} | "
              f"{abort_mix(reps) if reps else '-'} | {pct(kairos_of(reps, 'hit_rate'))} | {fmt(cache_stat(reps, 'stale_hits'))} | "
              f"{fmt(txn_latency(reps, 'p50'))} / {fmt(txn_latency(reps, 'p99'))} | {fmt(commit_p50(reps) if reps else None)} | "
              f"{fmt(cores(results, name, 'server_cpu_s'), '.2f')} | {fmt(cores(results, name, 'machine_cpu_s'), '.2f')} |")


def sweep_table(title, xs, configs, get, x_label):
    """Throughput per x and configuration, with each configuration's ratio to Baseline."""
    print(title + "\n")
    head = " | ".join(LABELS.get(c, c) for c in configs)
    ratios = [c for c in configs if c != "baseline"]
    rhead = "".join(f" | {LABELS.get(c, c)} / Baseline" for c in ratios) if "baseline" in configs else ""
    print(f"| {x_label} | {head}{rhead} |")
    print("|---:" + "|---:" * len(configs) + ("|---:" * len(ratios) if rhead else "") + "|")
    for x in xs:
        t = {c: throughput(get(c, x)) for c in configs}
        cells = " | ".join(fmt(t[c]) for c in configs)
        rcells = "".join(f" | {fmt(ratio(t[c], t['baseline']), '.2f')}" for c in ratios) if rhead else ""
        print(f"| {x} | {cells}{rcells} |")
    print()


def goal_line(what, got, goal):
    if got is None:
        return f"- {what}: not measured (goal ≥ {goal}×)"
    return f"- {what}: **{got:.2f}×** (goal ≥ {goal}×): {'met' if got >= goal else 'NOT met'}"


def table(results, n_runs, configs, ro_pcts, zipfs, statics, fig11_clients, figs):
    configs, ro_pcts, zipfs = configs.split(), ro_pcts.split(), zipfs.split()
    statics, fig11_clients, figs = statics.split(), fig11_clients.split(), figs.split()
    print(f"Kairos evaluation (scripts/bench-kairos.sh): committed transactions/s, median of {n_runs} runs.\n")
    if "8" in figs:
        sweep_table("**Fig. 8**: throughput by read-only share (read zipf 0.99, write zipf 0.5, 4 keys).",
                    ro_pcts, configs, lambda c, x: runs(results, fig8_name(c, x)), "read-only %")
        if "90" in ro_pcts:
            print("At 90 % read-only (the §8.1 default), every configuration:\n")
            detail_rows(results, [(LABELS.get(c, c), fig8_name(c, "90"), runs(results, fig8_name(c, "90")))
                                  for c in configs])
            print()
    if "9a" in figs:
        sweep_table("**Fig. 9a**: throughput by read skew (90 % read-only, write zipf 0.5).",
                    zipfs, configs, lambda c, z: fig9_runs(results, c, z), "read zipf")
    if "13" in figs:
        policies = [f"static:{s}" for s in statics] + ["mean", "ideal"]
        print("**Fig. 13**: static leases against ideal ones (server-side validation, §8.1 defaults); "
              "ratios to StaticP(first).\n")
        detail_rows(results, [(p, fig13_name(p), fig13_runs(results, p)) for p in policies])
        print()
    if "11" in figs:
        print("**Fig. 11**: EI against ideal leases as clients grow at a fixed offered load (each session paced).\n")
        print("| clients | EI committed/s | Ideal committed/s | Ideal / EI | EI hit rate | Ideal hit rate | EI txn p99 µs | Ideal txn p99 µs |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in fig11_clients:
            e, i = runs(results, f"f11-ei-c{n}"), runs(results, f"f11-ideal-c{n}")
            print(f"| {n} | {fmt(throughput(e))} | {fmt(throughput(i))} | {fmt(ratio(throughput(i), throughput(e)), '.2f')} | "
                  f"{pct(kairos_of(e, 'hit_rate'))} | {pct(kairos_of(i, 'hit_rate'))} | {fmt(txn_latency(e, 'p99'))} | "
                  f"{fmt(txn_latency(i, 'p99'))} |")
        print()
    print("**Goals** (issue #19 item 7):\n")
    base = throughput(runs(results, fig8_name("baseline", "90")))
    for cfg, goal, what in (("ideal", GOAL_IDEAL, "lease caching (Ideal) / Baseline"),
                            ("kairos", GOAL_KAIROS, "Kairos / Baseline")):
        print(goal_line(what + " at 90 % read-only", ratio(throughput(runs(results, fig8_name(cfg, "90"))), base), goal))
        if "9a" in figs:
            # The paper's 3.1× is Fig. 9a's, at its highest read skew: the best skew here too.
            best = max(((ratio(throughput(fig9_runs(results, cfg, z)),
                               throughput(fig9_runs(results, "baseline", z))), z) for z in zipfs),
                       key=lambda rz: rz[0] or 0, default=(None, None))
            print(goal_line(f"{what} at its best read skew (zipf {best[1]}, Fig. 9a)", best[0], goal))
    if "11" in figs:
        for line in fig11_goals(results, fig11_clients):
            print(line)


def fig11_goals(results, clients):
    xs = [int(n) for n in clients]
    ei = [throughput(runs(results, f"f11-ei-c{n}")) for n in clients]
    ideal = [throughput(runs(results, f"f11-ideal-c{n}")) for n in clients]
    k_ei, k_ideal = knee(xs, ei), knee(xs, ideal)
    if k_ei is None or k_ideal is None:
        return ["- Fig. 11: not measured"]
    at_knee = ideal[xs.index(k_ei[0])]
    return [goal_line(f"leases' throughput at EI's knee ({k_ei[0]} clients)", ratio(at_knee, k_ei[1]), GOAL_EI_TPUT),
            goal_line(f"clients at the knee, leases ({k_ideal[0]}) / EI ({k_ei[0]})", ratio(k_ideal[0], k_ei[0]),
                      GOAL_EI_CLIENTS)]


# ---- charts (specs for strata-plot, crates/bench/src/plot.rs) ----------------------------------

def lines(title, x_label, xs, series, x_log=False):
    return {"width": 1000, "height": 520, "panels": [dict(
        kind="lines", title=title, x_label=x_label, y_label="committed txn/s (median)",
        x=[float(x) for x in xs], categories=list(xs), x_log=x_log, y_min=0, series=series)]}


def sweep_series(configs, xs, get):
    return [{"label": LABELS.get(c, c), "values": [throughput(get(c, x)) for x in xs]} for c in configs]


def chart_fig8(results, n_runs, configs, ro_pcts, *_):
    xs = ro_pcts.split()
    return lines(f"Kairos Fig. 8: throughput by read-only share (5 shards, {n_runs} runs)", "read-only transactions (%)",
                 xs, sweep_series(configs.split(), xs, lambda c, x: runs(results, fig8_name(c, x))))


def chart_fig9a(results, n_runs, configs, ro_pcts, zipfs, *_):
    xs = zipfs.split()
    return lines(f"Kairos Fig. 9a: throughput by read skew (90 % read-only, {n_runs} runs)", "read zipf alpha",
                 xs, sweep_series(configs.split(), xs, lambda c, z: fig9_runs(results, c, z)))


def chart_fig11(results, n_runs, configs, ro_pcts, zipfs, statics, fig11_clients, *_):
    xs = fig11_clients.split()
    series = [{"label": LABELS[c], "values": [throughput(runs(results, f"f11-{c}-c{n}")) for n in xs]}
              for c in ("ei", "ideal")]
    return lines(f"Kairos Fig. 11: EI vs ideal leases at a fixed offered load ({n_runs} runs)", "clients", xs, series)


def chart_fig13(results, n_runs, configs, ro_pcts, zipfs, statics, *_):
    policies = [f"static:{s}" for s in statics.split()] + ["mean", "ideal"]
    labels = [p.replace("static:", "P(") + (")" if p.startswith("static:") else "") for p in policies]
    reps = [fig13_runs(results, p) for p in policies]
    return {"width": 900, "height": 500, "panels": [dict(
        kind="bars", title=f"Kairos Fig. 13: static leases vs ideal ({n_runs} runs)", x_label="lease policy",
        y_label="committed txn/s (median)", categories=labels,
        series=[{"label": "committed txn/s", "values": [throughput(r) for r in reps]}])]}


# ---- what the service-rate limits allow (docs/benchmarks.md, Kairos: "The ceiling") ----------------

def hottest_share(keys, alpha, servers):
    """The share of key draws (zipfian `alpha` over `keys` ranks; 0: uniform) that land on the
    busiest of `servers`, modelled as the server holding rank 0 and a 1/servers share of the
    rest (keys are placed by hash)."""
    p0 = 1.0 / sum(i ** -alpha for i in range(1, keys + 1))
    return p0 + (1.0 - p0) / servers


def hot_spot_bounds(keys=200_000, servers=5, read_zipf=0.99, write_zipf=0.5, ro=0.9, txn_keys=4, rate=300.0):
    """Upper bounds on committed transactions/s of each configuration, from the request rate
    `rate` of the busiest server (bench-kairos.sh's `--shard-rate-limit`): the requests a
    transaction sends there, on average, divided into `rate`. A read-only transaction reads
    `txn_keys` keys (zipf `read_zipf`) and validates once at each server it read from; a
    read-write one reads `txn_keys` keys (zipf `write_zipf`) and prepares and decides at each.
    Returns {config: (requests per transaction at the busiest server, bound)} for Baseline
    (reads and validation in the shards), CV only (validators apart: the busier of a data
    shard and a validator), and caching with every read a hit, whose busiest server is the
    one validating: a validator for Kairos, the shard itself for Ideal leases — the same
    load, so one bound serves both."""
    pr, pw = hottest_share(keys, read_zipf, servers), hottest_share(keys, write_zipf, servers)
    touch_r, touch_w = 1 - (1 - pr) ** txn_keys, 1 - (1 - pw) ** txn_keys
    rw = 1 - ro
    validate = ro * touch_r + rw * 2 * touch_w
    data_reads = ro * txn_keys * pr + rw * txn_keys * pw
    loads = {
        "baseline": data_reads + validate,
        "cv": max(data_reads + rw * 2 * touch_w, validate),
        "all hits": validate,
    }
    return {c: (load, rate / load) for c, load in loads.items()}


def bounds_table(rate="300", zipfs="0.8 0.9 0.99 1.1 1.2"):
    """`benchpy table kairos-bounds [RATE] [ZIPFS]`: the bounds of hot_spot_bounds by read skew."""
    print(f"Upper bounds from the busiest server's {rate} requests/s (5 servers, 200,000 keys, 90 % read-only, 4 keys):\n")
    print("| read zipf | Baseline | CV only | every read a hit (Kairos, Ideal) | CV / Baseline | hits / Baseline |")
    print("|---:|---:|---:|---:|---:|---:|")
    for z in zipfs.split():
        b = hot_spot_bounds(read_zipf=float(z), rate=float(rate))
        base, cv, hits = b["baseline"][1], b["cv"][1], b["all hits"][1]
        print(f"| {z} | {base:,.0f} | {cv:,.0f} | {hits:,.0f} | {cv / base:.2f} | {hits / base:.2f} |")


CHARTS = {"kairos-fig8": chart_fig8, "kairos-fig9a": chart_fig9a, "kairos-fig11": chart_fig11,
          "kairos-fig13": chart_fig13}
