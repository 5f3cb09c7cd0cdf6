"""Questions about a running Strata cluster, for scripts/bench-lib.sh: `python3 -m benchlib
cluster QUESTION ARGS...`. Status questions read `strata status --json` on stdin; the others
read the cluster.json `strata up` writes.

  led TABLE...            exit 0 iff every TABLE has a leader
  leader TABLE [SHARD]    print the node leading SHARD (default: any) of TABLE; exit 1 if none
  leader-addr TABLE       print that node's client address
  pid CLUSTER_JSON NODE   print node NODE's pid (NODE: an index, or a client address)
  rss CLUSTER_JSON        print every node's resident memory in KiB, space-separated
"""
import json
import sys


def leaders(status, table, shard=None):
    return [n for n in status for s in n.get("shards", [])
            if s.get("table") == table and s.get("role") == "leader" and (shard is None or s.get("shard") == shard)]


def main(question, args):
    if question in ("led", "leader", "leader-addr"):
        status = json.load(sys.stdin)
        if question == "led":
            return 0 if all(leaders(status, t) for t in args) else 1
        led = leaders(status, args[0], int(args[1]) if len(args) > 1 else None)
        if not led:
            return 1
        print(led[0]["node"] if question == "leader" else led[0]["addr"])
        return 0
    nodes = json.load(open(args[0]))["nodes"]
    if question == "pid":
        which = args[1]
        node = nodes[int(which)] if which.isdigit() else next(n for n in nodes if n["client_addr"] == which)
        print(node["pid"])
    elif question == "rss":
        rss = []
        for n in nodes:
            with open(f"/proc/{n['pid']}/status") as f:
                rss += [line.split()[1] for line in f if line.startswith("VmRSS:")]
        print(" ".join(rss))
    else:
        raise SystemExit(f"unknown question {question}")
    return 0
