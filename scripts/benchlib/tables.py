"""The markdown summaries of the bench-*.sh scripts: `python3 -m benchlib table NAME ARGS...`.

Every median and ratio comes from benchlib.summary; this file only chooses what goes in which
row. Each function prints its table to stdout (the scripts tee it into $RESULTS/summary.md).
"""
import csv
import json
import re
from pathlib import Path

from . import kairos
from .summary import (errors, fmt, latency, load, mean, median, median_ratio, p50_p99, ratio,
                      runs, throughput)


def es(results, n_runs, depth, ratios):
    """scripts/bench-es.sh: Strata's Eventual Store against Redis."""
    results, ratios = Path(results), ratios.split()
    rep = lambda target, w, p: runs(results, f"{target}-w{w}-p{p}")
    print(f"Medians of {n_runs} runs each; latencies in µs (p50 / p99 over all operations).\n")
    print("| writes % | pipeline | Strata ops/s | Redis ops/s | Strata/Redis | Strata p50 / p99 | Redis p50 / p99 | errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in ["1", depth]:
        for w in ratios:
            s, r = rep("strata", w, p), rep("redis", w, p)
            st, rt = throughput(s), throughput(r)
            print(f"| {w} | {p} | {fmt(st)} | {fmt(rt)} | {fmt(ratio(st, rt), '.2f')} | {p50_p99(s)} | {p50_p99(r)} | {errors(s + r)} |")

    def cpu(target, w, p):
        pat = re.compile(re.escape(f"{target}-w{w}-p{p}") + r"-r\d+\.cpu\.json")
        return [load(f) for f in sorted(results.iterdir()) if pat.fullmatch(f.name)]

    def cores(target, w, p, field):
        return fmt(median(c[field] / c["wall_s"] for c in cpu(target, w, p)), ".2f")

    def other_max(w, p):
        xs = [c["other_cpu_s"] / c["wall_s"] for t in ("strata", "redis") for c in cpu(t, w, p)]
        return f"{max(xs):.2f}" if xs else "-"

    print("\nCPU during a whole run (connect, preload, warmup and the measured window), median cores busy")
    print("on average: the servers (Strata: the 3 node processes together; Redis: redis-server) and the")
    print("load generator. The machine has 2.\n")
    print("| writes % | pipeline | Strata servers | Strata bench | Redis server | Redis bench | other load (max) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in ["1", depth]:
        for w in ratios:
            print(f"| {w} | {p} | {cores('strata', w, p, 'server_cpu_s')} | {cores('strata', w, p, 'bench_cpu_s')} "
                  f"| {cores('redis', w, p, 'server_cpu_s')} | {cores('redis', w, p, 'bench_cpu_s')} | {other_max(w, p)} |")
    print("\nother load: cores busy with processes that are neither the servers nor the load generator")
    print("(the largest over the runs of that row); above ~0.1 the row was measured on a busy machine.")
    print("\nredis-benchmark (its own client and connections; requests per second, latency in ms):\n")
    print("| test | -P | rps | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for p in ["1", depth]:
        f = results / f"redis-benchmark-P{p}.csv"
        if not f.exists():
            continue
        for row in csv.DictReader(f.read_text().splitlines()):
            print(f'| {row["test"]} | {p} | {float(row["rps"]):,.0f} | {row.get("p50_latency_ms", "?")} | {row.get("p99_latency_ms", "?")} |')


# strong-ZK is the sync table's definition (sync durability, leader reads): without runs of its
# own, `strong` is the sync table's.
LOG_SAME = {"strong": "sync"}
LOG_RATIOS = [("cad", "sync"), ("cad", "async"), ("orca", "strong"), ("orca", "weak"), ("orca", "cad")]


def log_runs(results, cfg, w):
    """The runs of log-table configuration `cfg` on YCSB workload `w` (bench-log.sh's names)."""
    reps = runs(results, f"{cfg}-{w}")
    if not reps and cfg in LOG_SAME:
        return runs(results, f"{LOG_SAME[cfg]}-{w}")
    return reps


def durable_pct(reports):
    """Median % of reads that waited for MakeDurable (None: no reads, or not a log-table run)."""
    return median((r.get("read_durability") or {}).get("pct") for r in reports)


def log(results, configs, workloads):
    """scripts/bench-log.sh: the log engine's durability layers."""
    configs, workloads = configs.split(), workloads.split()
    shown = configs + [c for c in LOG_SAME if c not in configs and LOG_SAME[c] in configs]
    cells = {(c, w): log_runs(results, c, w) for c in shown for w in workloads}
    n = max((len(v) for v in cells.values()), default=0)
    pairs = [(a, b) for a, b in LOG_RATIOS if a in shown and b in shown]
    print(f"YCSB against log tables: ops/s, median of {n} runs; p50 / p99 latency in µs.")
    if any(c not in configs for c in shown):
        print("orca/strong: strong-ZK is the sync table (same definition: sync durability, leader reads).")
    print()
    print("| workload | " + " | ".join(configs) + " | " + " | ".join(f"{a}/{b}" for a, b in pairs) + " | errors |")
    print("|---|" + "---:|" * (len(configs) + len(pairs) + 1))
    for w in workloads:
        row = [fmt(throughput(cells[(c, w)])) for c in configs]
        rs = [fmt(ratio(throughput(cells[(a, w)]), throughput(cells[(b, w)])), ".2f") for a, b in pairs]
        errs = sum(errors(cells[(c, w)]) for c in configs)
        print(f"| {w} | " + " | ".join(row) + " | " + " | ".join(rs) + f" | {errs} |")
    print("\n| workload | " + " | ".join(f"{c} p50 / p99" for c in configs) + " |")
    print("|---|" + "---:|" * len(configs))
    for w in workloads:
        print(f"| {w} | " + " | ".join(p50_p99(cells[(c, w)]) for c in configs) + " |")
    made_durable = [c for c in ("cad", "orca") if c in configs]
    if made_durable:
        print("\n% of reads that triggered durability (waited for MakeDurable at the leader; median of the runs):\n")
        print("| workload | " + " | ".join(made_durable) + " |")
        print("|---|" + "---:|" * len(made_durable))
        for w in workloads:
            print(f"| {w} | " + " | ".join(fmt(durable_pct(cells[(c, w)]), ".2f") for c in made_durable) + " |")


def etcd(results, n_runs, ratios):
    """scripts/bench-etcd.sh: Strata's synchronising operations against etcd's."""
    ratios = ratios.split()
    tput = lambda name: throughput(runs(results, name))
    lat = lambda name: p50_p99(runs(results, name))
    errs = lambda name: errors(runs(results, name))
    r2 = lambda a, b: fmt(ratio(a, b), ".2f")
    print(f"ops/s, median of {n_runs} runs; p50 / p99 latency of all operations in µs.\n")
    print("| workload | etcd ops/s | Strata ops/s | Strata/etcd | etcd p50 / p99 | Strata p50 / p99 | errors (etcd, Strata) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = [(f"{w}% writes: etcd put/get vs Strata release/acquire", f"etcd-abd-w{w}", f"strata-abd-w{w}") for w in ratios]
    rows.append(("CAS only: etcd txn compare-and-put vs Strata strong CAS", "etcd-cas", "strata-cas"))
    for what, e, s in rows:
        print(f"| {what} | {fmt(tput(e))} | {fmt(tput(s))} | {r2(tput(s), tput(e))} | {lat(e)} | {lat(s)} | {errs(e)}, {errs(s)} |")
    print("\nWhat choosing a weaker consistency buys on Strata at the same load (same runs):\n")
    print("| writes % | Strata relaxed (es) ops/s | Strata Kite mix ops/s | Strata ABD ops/s | relaxed/etcd | Kite mix/etcd |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w in ratios:
        e = tput(f"etcd-abd-w{w}")
        es_, kite, abd = tput(f"strata-es-w{w}"), tput(f"strata-kite-w{w}"), tput(f"strata-abd-w{w}")
        print(f"| {w} | {fmt(es_)} | {fmt(kite)} | {fmt(abd)} | {r2(es_, e)} | {r2(kite, e)} |")


ZK_MIX = {"W": "100% update", "A": "50% read, 50% update", "B": "95% read, 5% update", "C": "100% read",
          "D": "95% read, 5% insert (latest)", "F": "50% read, 50% RMW"}


def zk(results, n_runs, workloads, syncs, configs):
    """scripts/bench-zk.sh: YCSB on ZooKeeper, Strata's log tables and etcd."""
    workloads, syncs, configs = workloads.split(), syncs.split(), configs.split()
    # Every system of the run: (column name, its result files' name for a workload).
    others = [(f"ZK fs={s}", lambda w, s=s: f"zk-fs{s}-{w}") for s in syncs]
    if runs(results, f"etcd-{workloads[0]}"):
        others.append(("etcd", lambda w: f"etcd-{w}"))
    strata = [(f"Strata {c}", lambda w, c=c: f"strata-{c}-{w}") for c in configs]
    systems = others[:len(syncs)] + strata + others[len(syncs):]
    tput = lambda name: throughput(runs(results, name))
    print(f"ops/s, median of {n_runs} runs. ZooKeeper forceSync={'/'.join(syncs)}; Strata log tables {', '.join(configs)}.\n")
    print("| workload | " + " | ".join(n for n, _ in systems) + " | errors (" + ", ".join(n for n, _ in systems) + ") |")
    print("|---" + "|---:" * (len(systems) + 1) + "|")
    for w in workloads:
        row = [f"{w}: {ZK_MIX.get(w, w)}"] + [fmt(tput(f(w))) for _, f in systems]
        row += [", ".join(str(errors(runs(results, f(w)))) for _, f in systems)]
        print("| " + " | ".join(row) + " |")
    print("\nThroughput ratios, Strata table / " + " and ".join(n for n, _ in others) + ":\n")
    pairs = [(c, o) for c in configs for o in others]
    print("| workload | " + " | ".join(f"{c}/{n}" for c, (n, _) in pairs) + " |")
    print("|---" + "|---:" * len(pairs) + "|")
    for w in workloads:
        print(f"| {w} | " + " | ".join(fmt(ratio(tput(f"strata-{c}-{w}"), tput(f(w))), ".2f") for c, (_, f) in pairs) + " |")
    print("\np50 / p99 latency per operation class, µs (median over the runs):\n")
    print("| workload | class | " + " | ".join(n for n, _ in systems) + " |")
    print("|---|---" + "|---:" * len(systems) + "|")
    for w in workloads:
        for cls in ["read", "update", "insert", "rmw"]:
            cells = [p50_p99(runs(results, f(w)), cls) for _, f in systems]
            if all(c == "-" for c in cells):
                continue
            print(f"| {w} | {cls} | " + " | ".join(cells) + " |")


GEO_RATIOS = [("strong", "orca"), ("strong", "weak"), ("orca", "weak")]


def geo(results, configs, cases):
    """scripts/bench-geo.sh: latency with emulated data centres."""
    results, configs, cases = Path(results), configs.split(), cases.split()
    cells = {(c, k): runs(results, f"{c}-{k}") for c in configs for k in cases}
    changed = lambda c, k: len(list(results.glob(f"{c}-{k}-r*.leader-changed")))
    n = max((len(v) for v in cells.values()), default=0)
    print(f"Latency in ms, p50 / p99 (median of {n} runs); clients near the leader or near a follower in another data centre.\n")
    print("| case | " + " | ".join(configs) + " | errors |")
    print("|---|" + "---:|" * (len(configs) + 1))
    for k in cases:
        row = [p50_p99(cells[(c, k)], scale=1000, spec=".1f") + " (!)" * (changed(c, k) > 0) if cells[(c, k)] else "-" for c in configs]
        print(f"| {k} | " + " | ".join(row) + f" | {sum(errors(cells[(c, k)]) for c in configs)} |")
    if any(changed(c, k) for c in configs for k in cases):
        print("\n(!): the leader changed during a run of this cell (placement.txt): rerun on a quieter machine.")
    pairs = [(a, b) for a, b in GEO_RATIOS if a in configs and b in configs]
    if pairs:
        print("\nRatios of the p50 latencies (paper: strong/orca ≈ 14 for read-follower and write-leader, ≈ 2 for write-follower):\n")
        print("| case | " + " | ".join(f"{a}/{b}" for a, b in pairs) + " |")
        print("|---|" + "---:|" * len(pairs))
        for k in cases:
            p50 = lambda c: latency(cells[(c, k)], "p50")
            print(f"| {k} | " + " | ".join(fmt(ratio(p50(a), p50(b)), ".1f") for a, b in pairs) + " |")


def kite(results, n_runs, ratios, modes, depth="16"):
    """scripts/bench-kite.sh: the B1 sweep, the timeline run and the data-structure workloads."""
    results, ratios, modes = Path(results), ratios.split(), modes.split()
    rep = lambda m, w: runs(results, f"{m}-w{w}")
    print(f"B1: ops/s, median of {n_runs} runs (pipeline {depth}); p50 / p99 latency of all operations in µs.\n")
    print("| writes % | " + " | ".join(f"{m} ops/s" for m in modes) + " | Kite/ES | ABD/ES | Paxos/ES | Paxos/ABD | errors |")
    print("|---:|" + "---:|" * (len(modes) + 5))
    for w in ratios:
        t = {m: throughput(rep(m, w)) for m in modes}
        r = lambda a, b: fmt(ratio(t.get(a), t.get(b)), ".2f")
        errs = sum(errors(rep(m, w)) for m in modes)
        print(f"| {w} | " + " | ".join(fmt(t[m]) for m in modes) + f" | {r('kite', 'es')} | {r('abd', 'es')} | {r('paxos', 'es')} | {r('paxos', 'abd')} | {errs} |")
    print("\nLatency p50 / p99 (µs, medians):\n")
    print("| writes % | " + " | ".join(modes) + " |")
    print("|---:|" + "---:|" * len(modes))
    for w in ratios:
        print(f"| {w} | " + " | ".join(p50_p99(rep(m, w)) for m in modes) + " |")
    print("\nKite mode, per class (median p50 / p99 µs, and share of operations), by write ratio:\n")
    print("| writes % | relaxed read | acquire | relaxed write | release |")
    print("|---:|---:|---:|---:|---:|")
    for w in ratios:
        xs = rep("kite", w)
        if not xs:
            continue
        cells = []
        for c in ["relaxed_read", "acquire", "relaxed_write", "release"]:
            share = median(x["class_latency_us"][c]["count"] / max(x["ops"], 1) for x in xs)
            if not share:
                cells.append("-")
                continue
            p50 = median(x["class_latency_us"][c]["p50_us"] for x in xs)
            p99 = median(x["class_latency_us"][c]["p99_us"] for x in xs)
            cells.append(f"{p50:.0f} / {p99:.0f} ({100 * share:.1f}%)")
        print(f"| {w} | " + " | ".join(cells) + " |")
    tl = results / "timeline.json"
    if tl.exists():
        kite_timeline(results, load(tl))
    print("\nData-structure workloads (push-then-pop pairs on random structures):\n")
    print("| workload | pairs/s | requests/s | requests/pair | sync share | CAS failed locally / at a quorum | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in ["ts", "msq", "hml"]:
        for fields in [4, 32]:
            f = results / f"ds-{kind}-{fields}.json"
            if not f.exists():
                continue
            x = load(f)
            d = x["ds"]
            print(f"| {kind}-{fields} | {d['pairs_s']:,.0f} | {x['throughput_ops_s']:,.0f} | {d['requests_per_pair']:.1f} | {d['sync_share']:.3f} | {d['cas_local_fail']} / {d['cas_quorum_fail']} | {x['errors']} |")


def kite_timeline(results, x):
    """The timeline run of bench-kite.sh: per-node rates before, during and after the pause."""
    print(f"\nTimeline run: {x['throughput_ops_s']:,.0f} ops/s over {x['duration_s']:.1f} s, errors {x['errors']}, files {x['timeline_files']}")
    rows = list(csv.DictReader(open(x["timeline_files"][0])))
    nodes = [k for k in rows[0] if k.startswith("node")]
    low = [r for r in rows if float(r["node2"]) == 0]
    print(f"buckets: {len(rows)}; buckets with node2 = 0: {len(low)}"
          + (f" (t_ms {low[0]['t_ms']}..{low[-1]['t_ms']})" if low else ""))
    if low:
        a, b = int(low[0]["t_ms"]), int(low[-1]["t_ms"])
        periods = [
            ("before (100 ms .. pause - 50 ms)", [r for r in rows if 100 <= int(r["t_ms"]) < a - 50]),
            ("paused (+50 ms .. end - 50 ms)", [r for r in rows if a + 50 <= int(r["t_ms"]) <= b - 50]),
            ("after (end + 100 ms ..)", [r for r in rows if int(r["t_ms"]) > b + 100]),
        ]
        avg = lambda rs, k: fmt(mean(float(r[k]) for r in rs))
        print("\n| period | " + " | ".join(nodes) + " | total |")
        print("|---|" + "---:|" * (len(nodes) + 1))
        for name, rs in periods:
            print(f"| {name} | " + " | ".join(avg(rs, k) for k in nodes) + f" | {avg(rs, 'total')} |")
        # The deepest dip of the live nodes' total around the start of the pause.
        live = [sum(float(r[k]) for k in nodes if k != "node2") for r in rows]
        i0 = max(0, rows.index(low[0]) - 2)
        print(f"\nlive nodes (node0+node1) in the first 150 ms of the pause, per 10 ms bucket: {', '.join(f'{v:,.0f}' for v in live[i0:i0 + 15])}")
    sb, sa = results / "status-before-timeline.json", results / "status-after-timeline.json"
    if sb.exists() and sa.exists():
        before = {n["node"]: n for n in load(sb) if n.get("up")}
        after = {n["node"]: n for n in load(sa) if n.get("up")}
        print("\nCounters over the timeline run (after - before):\n")
        print("| node | machine epoch | slow releases | slow-path relaxed accesses |")
        print("|---:|---:|---:|---:|")
        for n in sorted(after):
            b, a = before.get(n, {}), after[n]
            d = lambda k: a.get(k, 0) - b.get(k, 0)
            print(f"| {n} | {b.get('machine_epoch', '?')} -> {a['machine_epoch']} | {d('barriers_slow'):,} | {d('slow_path_accesses'):,} |")


def move_ms(text):
    """The wall time `strata shard move` printed ("... in 12.3ms"), in ms."""
    m = re.search(r"in ([0-9.]+)(ms|s|µs)", text)
    return float(m.group(1)) * {"ms": 1, "s": 1000, "µs": 0.001}[m.group(2)]


def longest_gap_ms(path):
    """The longest stretch of a timeline CSV without a single completion, in ms."""
    rows = list(csv.reader(open(path)))[1:]
    bucket = int(rows[1][0]) - int(rows[0][0]) if len(rows) > 1 else 10
    gap = best = 0
    for r in rows:
        gap = gap + bucket if float(r[-1]) == 0 else 0
        best = max(best, gap)
    return best


def move(results, sizes, n_runs):
    """scripts/bench-move.sh: shard moves under load."""
    results = Path(results)
    print("| keys (asked) | keys moved | records moved | move ms | load errors | p50 µs | p99 µs | max µs | longest gap ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes.split():
        rows = []
        for run in range(1, int(n_runs) + 1):
            t = f"m{size}-r{run}"
            text = (results / f"{t}-move.txt").read_text()
            keys, records = map(int, re.search(r"(\d+) keys, \d+ clients' watermarks, (\d+) completion records", text).groups())
            rep = load(results / f"{t}.json")
            lat = rep["latency_us"]["all"]
            rows.append((keys, records, move_ms(text), rep["errors"], lat["p50_us"], lat["p99_us"], lat["max_us"],
                         longest_gap_ms(results / f"{t}-timeline.csv")))
        med = [median(c) for c in zip(*rows)]
        print(f"| {int(size):,} | {int(med[0]):,} | {int(med[1]):,} | {med[2]:.1f} | {max(r[3] for r in rows)} | {med[4]:.0f} | {med[5]:.0f} | {med[6]:.0f} | {med[7]:.0f} |")


def rifl(results, n_runs, vclients, parts, lruns):
    """scripts/bench-rifl.sh: what exactly-once costs, and the lease service."""
    results, n_runs, lruns = Path(results), int(n_runs), int(lruns)
    one = lambda name: load(results / f"{name}.json")
    lat = lambda x, q: x["latency_us"]["all"][f"{q}_us"]
    rss = lambda name: mean(int(k) for k in (results / f"{name}.rss").read_text().split())
    if "a" in parts.split():
        print(f"(a) exactly-once on vs off: medians of {n_runs} alternating runs; latency with 1 closed loop, throughput with 4 x 4 loops x pipeline 16.\n")
        print("| operation | p50 on µs | p50 off µs | p50 on/off | p99 on µs | p99 off µs | ops/s on | ops/s off | throughput on/off | errors |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for op in ["write", "faa"]:
            lt = {m: runs(results, f"{op}-lat-{m}") for m in ["on", "off"]}
            tp = {m: runs(results, f"{op}-tput-{m}") for m in ["on", "off"]}
            p50 = {m: latency(lt[m], "p50") for m in lt}
            p99 = {m: latency(lt[m], "p99") for m in lt}
            ops = {m: throughput(tp[m]) for m in tp}
            errs = sum(errors(lt[m] + tp[m]) for m in ["on", "off"])
            # Per-run ratios (each on run beside its off run), then their median.
            r50 = median_ratio((lat(a, "p50"), lat(b, "p50")) for a, b in zip(lt["on"], lt["off"]))
            rt = median_ratio((a["throughput_ops_s"], b["throughput_ops_s"]) for a, b in zip(tp["on"], tp["off"]))
            print(f"| {op} | {fmt(p50['on'], '.1f')} | {fmt(p50['off'], '.1f')} | {fmt(r50, '.3f')} | {fmt(p99['on'], '.1f')} | {fmt(p99['off'], '.1f')} | {fmt(ops['on'], '.0f')} | {fmt(ops['off'], '.0f')} | {fmt(rt, '.3f')} | {errs} |")
        print()
    if "b" in parts.split():
        off, off_rss = one("v-off"), rss("v-off")
        print("(b) writes from V simulated clients (RIFL §8.3 Q3), 32 closed loops; memory: mean resident memory of the 3 nodes minus the same load with RIFL off, per client.\n")
        print("| clients | ops/s | p50 µs | p99 µs | p50 vs 1 client | node memory MiB | RIFL memory per client, bytes |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        base = None
        for v in vclients.split():
            x, r = one(f"v-{v}"), rss(f"v-{v}")
            base = base or lat(x, "p50")
            print(f"| {int(v):,} | {x['throughput_ops_s']:.0f} | {lat(x, 'p50'):.1f} | {lat(x, 'p99'):.1f} | {fmt(ratio(lat(x, 'p50'), base), '.3f')} | {r / 1024:.0f} | {(r - off_rss) * 1024 / int(v):.0f} |")
        print(f"| RIFL off | {off['throughput_ops_s']:.0f} | {lat(off, 'p50'):.1f} | {lat(off, 'p99'):.1f} | | {off_rss / 1024:.0f} | |")
    if "c" in parts.split():
        rifl_leases(results, lruns)


def rifl_leases(results, lruns):
    """Part (c) of bench-rifl.sh: the lease service's rates (RIFL §8.3 Q4)."""
    print()
    print(f"(c) the lease service (RIFL §8.3 Q4): medians of {lruns} runs; each run's figure in brackets.\n")
    print("| requests | sent to | loops | per second | runs | p50 µs | p99 µs | leader node CPU, cores | bench CPU, cores | errors | rejected | leader moved |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rates = {}
    for name, what, at, loops in [
        ("renew-lat-leader", "renewals", "the leader", "1"),
        ("renew-lat-follower", "renewals", "a follower (forwarded)", "1"),
        ("renew-tput-leader", "renewals", "the leader", "4 x 4 x 16"),
        ("renew-tput-all", "renewals", "round-robin", "4 x 4 x 16"),
        ("create-lat-leader", "creations", "the leader", "1"),
        ("create-tput-leader", "creations", "the leader", "4 x 4 x 16"),
    ]:
        xs = runs(results, name)
        rates[name] = throughput(xs)
        rej = sum(x["lease"]["rejected"] for x in xs)
        # A run at the leader whose connection was forwarded when it ended, or at a follower
        # whose was not: the leadership moved during the part.
        moved = sum(1 for x in xs if name.endswith("-leader") and x["lease"]["forwarded_clients"] > 0
                    or name.endswith("-follower") and x["lease"]["forwarded_clients"] == 0)
        each = ", ".join(f"{x['throughput_ops_s']:,.0f}" for x in xs)
        # CPU over the whole bench process's life (leases created, warmup and window).
        cpu = [[float(v) for v in (results / f"{name}-r{r}.cpu").read_text().split()] for r in range(1, lruns + 1)]
        node = median((c1 - c0) / (t1 - t0) for c0, c1, t0, t1, _ in cpu)
        bench = median(b / (t1 - t0) for _, _, t0, t1, b in cpu)
        print(f"| {what} | {at} | {loops} | {fmt(rates[name])} | [{each}] | {fmt(latency(xs, 'p50'), '.1f')} | {fmt(latency(xs, 'p99'), '.1f')} | {fmt(node, '.2f')} | {fmt(bench, '.2f')} | {errors(xs)} | {rej} | {moved} |")
    need = 1_000_000 / (30 * 60 / 2)
    print(f"\nQ4: 1,000,000 clients, 30-minute leases renewed at half term: {need:,.0f} renewals/s;")
    for name, what in [("renew-tput-leader", "at the leader"), ("renew-tput-all", "round-robin")]:
        print(f"  {fmt(ratio(100 * need, rates[name]), '.3f')} % of the measured {fmt(rates[name])} renewals/s {what};")
    print(f"  paper: {100 * need / 750_000:.3f} % of 750,000 renewals/s (< 0.2 %).")
    print()


def txn_commit(reports, q):
    """Median commit-latency quantile `q` ("p50", "p99") in µs of `--workload txn` reports."""
    return median(r["txn"]["commit_us"][f"{q}_us"] for r in reports if r["txn"]["commit_us"]["count"] > 0)


def txn_aborts(reports):
    """Aborted attempts per committed transaction, median."""
    return median(r["txn"]["aborted_attempts"] / max(r["txn"]["committed"], 1) for r in reports)


TXN_SYSTEMS = (
    ("strata", "Strata, 5 shards (RIFL 2PC; fsync on a majority)"),
    ("strata-one", "Strata, 1 shard (one replicated log, as etcd: single-participant commits)"),
    ("etcd", "etcd `txn` (compare mod_revision, put; fsync on a majority)"),
    ("redis-aof", "Redis WATCH/MULTI/EXEC, appendfsync always (one node)"),
    ("redis", "Redis WATCH/MULTI/EXEC (in memory, one node)"),
)


def txn_abort_mix(reports):
    """The aborts of every run by reason, summed, as `reason n, ...`."""
    total = {}
    for r in reports:
        for reason, n in r["txn"].get("aborts", {}).items():
            total[reason] = total.get(reason, 0) + n
    return ", ".join(f"{k} {v}" for k, v in sorted(total.items(), key=lambda kv: -kv[1])) or "-"


TXN_TRANSPORT = {
    "on": "every system over TLS 1.3 with client certificates (Strata as `strata up` starts it; etcd's clients and members, Redis' `tls-port`)",
    "off": "every system on plain TCP (Strata with `--insecure-plaintext`)",
}


TXN_KEY_ORDER = {"hot-first": "the hottest first", "hot-last": "the hottest last"}


def txn(results, n_runs, participants, contended, tls="on"):
    """scripts/bench-txn.sh: transactions by participant count, then the same read-modify-write
    against etcd's `txn` and Redis WATCH/MULTI/EXEC, uniform and under contention; TLS is the
    script's TLS setting (every system's transport)."""
    participants = participants.split()
    print(f"Strata transactions of K objects in K distinct shards (K participants), 1 client x 1 session; median of {n_runs} runs.\n")
    print("| participants | commit p50 µs | ratio to 1 | commit p99 µs | transaction p50 µs (reads + commit) | committed/s | committed/s, 4x4 loops |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = txn_commit(runs(results, f"lat-k{participants[0]}"), "p50")
    for k in participants:
        lat = runs(results, f"lat-k{k}")
        c50 = txn_commit(lat, "p50")
        print(f"| {k} | {fmt(c50)} | {fmt(ratio(c50, base), '.2f')} | {fmt(txn_commit(lat, 'p99'))} | "
              f"{fmt(latency(lat, 'p50'))} | {fmt(throughput(lat))} | {fmt(throughput(runs(results, f'tput-k{k}')))} |")
    if not contended:
        return
    workloads = (("uni", "keys uniform"), ("zipf", "zipfian θ 0.99 over the keys: contention"))
    reads = (("", "keys read one after the other"), ("many-", "keys read in one request"))
    for (mode, how), (prefix, what) in ((m, w) for m in reads for w in workloads):
        prefix = mode + prefix
        if not runs(results, f"{prefix}-strata-one"):
            continue
        strata = throughput(runs(results, f"{prefix}-strata"))
        one = throughput(runs(results, f"{prefix}-strata-one"))
        key_order = runs(results, f"{prefix}-strata-one")[0]["args"].get("txn_key_order", "hot-first")
        order = f", {TXN_KEY_ORDER[key_order]}" if prefix.endswith("zipf") else ""  # uniform keys: none hot
        print(f"\nThe same read-modify-write of {contended} keys ({what}; {how}{order}), 4 clients x 4 sessions, side by side, "
              f"{TXN_TRANSPORT.get(tls, tls)}; median of {n_runs} runs:\n")
        print("| system | committed/s | Strata 5 shards / system | Strata 1 shard / system | aborted attempts per commit | transaction p50 / p99 µs | commit p50 µs | aborts by reason (all runs) |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for name, label in TXN_SYSTEMS:
            r = runs(results, f"{prefix}-{name}")
            if r:
                tput = throughput(r)
                print(f"| {label} | {fmt(tput)} | {fmt(ratio(strata, tput), '.2f')} | {fmt(ratio(one, tput), '.2f')} | "
                      f"{fmt(txn_aborts(r), '.2f')} | {p50_p99(r)} | {fmt(txn_commit(r, 'p50'))} | {txn_abort_mix(r)} |")
    txn_read_many(results)


def txn_read_many(results):
    """Each system's keys read in one request (`many-X` runs) beside one at a time (`X`), run i
    of one right after run i of the other."""
    rows = []
    for prefix in ("uni", "zipf"):
        for name, label in TXN_SYSTEMS:
            each, many = runs(results, f"{prefix}-{name}"), runs(results, f"many-{prefix}-{name}")
            if each and many:
                pairs = [(m["throughput_ops_s"], e["throughput_ops_s"]) for m, e in zip(many, each)]
                rows.append((prefix, label, throughput(many), throughput(each), median_ratio(pairs),
                             min((r for r in (ratio(m, e) for m, e in pairs) if r is not None), default=None)))
    if not rows:
        return
    print("\nKeys read in one request beside one at a time, each system (committed/s medians; per-run ratios pair run i of each):\n")
    print("| workload | system | one request | one at a time | ratio of medians | per-run median | per-run min |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for prefix, label, many, each, per_run, lowest in rows:
        print(f"| {prefix} | {label} | {fmt(many)} | {fmt(each)} | {fmt(ratio(many, each), '.2f')} | "
              f"{fmt(per_run, '.2f')} | {fmt(lowest, '.2f')} |")


TABLES = {"es": es, "log": log, "etcd": etcd, "zk": zk, "geo": geo, "kite": kite, "move": move, "rifl": rifl, "txn": txn,
          "kairos": kairos.table, "kairos-bounds": kairos.bounds_table}


def ab(results, prefix="baseline", after="after", before="before"):
    """BASELINE=... runs of any script: every configuration `X` with runs `X-rN` of this build
    and `baseline-X-rN` of the baseline, interleaved in one run: after/before ratios. With
    PREFIX, AFTER and BEFORE (`plain TLS plain`: TLS=both), the partner runs are `PREFIX-X-rN`
    and the columns are named AFTER and BEFORE."""
    results = Path(results)
    pat = re.compile(r"(.+)-r\d+\.json$")
    names = sorted({m.group(1) for f in results.iterdir() if (m := pat.fullmatch(f.name))})
    # The partner's runs are `PREFIX-X` beside `X` (bench-log.sh) or beside `strata-X`
    # (bench-es.sh, whose names start with the target).
    partner = lambda n: f"{prefix}-{n.removeprefix('strata-')}" if n.startswith("strata-") else f"{prefix}-{n}"
    configs = [n for n in names if not n.startswith(f"{prefix}-") and partner(n) in names]
    if prefix == "baseline":
        print("This build (after) beside the baseline (before), interleaved in one run: ops/s medians,")
    else:
        print(f"{after} beside {before} (runs `{prefix}-*`), interleaved in one run: ops/s medians,")
    print("the ratio of the medians, and the median and lowest of the per-run ratios (run i of one")
    print("beside run i of the other); p50 latency in µs.\n")
    print(f"| configuration | runs | {after} ops/s | {before} ops/s | {after}/{before} | per-run median | per-run min | {after} p50 | {before} p50 | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in configs:
        a, b = runs(results, c), runs(results, partner(c))
        pairs = [(x["throughput_ops_s"], y["throughput_ops_s"]) for x, y in zip(a, b)]
        per_run = [ratio(x, y) for x, y in pairs]
        lowest = min((r for r in per_run if r is not None), default=None)
        print(f"| {c} | {len(pairs)} | {fmt(throughput(a))} | {fmt(throughput(b))} | "
              f"{fmt(ratio(throughput(a), throughput(b)), '.3f')} | {fmt(median_ratio(pairs), '.3f')} | "
              f"{fmt(lowest, '.3f')} | {fmt(latency(a, 'p50'), '.0f')} | {fmt(latency(b, 'p50'), '.0f')} | "
              f"{errors(a + b)} |")
TABLES["ab"] = ab
