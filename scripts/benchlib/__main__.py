"""python3 -m benchlib table NAME ARGS... | chart NAME ARGS... | cluster QUESTION ARGS...

See benchlib/__init__.py; scripts/bench-lib.sh calls these through `benchpy`.
"""
import sys

from . import charts, cluster, tables


def main(argv):
    if len(argv) < 2 or argv[0] not in ("table", "chart", "cluster"):
        raise SystemExit(__doc__)
    what, name, args = argv[0], argv[1], argv[2:]
    if what == "table":
        tables.TABLES[name](*args)
        return 0
    if what == "chart":
        charts.main(name, args)
        return 0
    return cluster.main(name, args)


sys.exit(main(sys.argv[1:]))
