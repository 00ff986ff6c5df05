#!/usr/bin/env python3
"""The last lines of `make test` and `make check`: what ran, how long it took
and where the time went (docs/testing.md).

    test-report.py --started EPOCH_S --budget SECONDS RESULTS...
        prints each part's counts (JUnit XML from Criterion and pytest), the
        wall time since EPOCH_S against the budget and the 10 slowest
        end-to-end tests; exits 1 when a part has a failure or an error.
    test-report.py --update tests/e2e/durations.json RESULTS...
        writes the measured seconds per end-to-end file, which
        tests/e2e/suite.py uses to hand out the longest files first.
"""
import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SLOWEST = 10


def cases(path):
    """(name, seconds, outcome) for every test case of one JUnit file."""
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed", "error": "error"}.get(tag, tag)
        name = case.get("classname", "") + "::" + case.get("name", "")
        yield name, float(case.get("time") or 0), outcome


def e2e_nodeid(name):
    """tests.e2e.test_x::test_y[p] -> tests/e2e/test_x.py::test_y[p]"""
    module, _, test = name.partition("::")
    return module.replace(".", "/") + ".py::" + test


def summary(paths, started, budget):
    bad = False
    e2e = []
    for path in paths:
        got = list(cases(path))
        counts = Counter(outcome for _, _, outcome in got)
        bad |= bool(counts.get("failed") or counts.get("error"))
        told = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no tests"
        print(f"test report: {Path(path).stem}: {told}")
        if Path(path).stem.startswith("e2e"):
            e2e += got
    if e2e:
        print(f"test report: the {min(SLOWEST, len(e2e))} slowest end-to-end tests:")
        for name, seconds, _ in sorted(e2e, key=lambda c: -c[1])[:SLOWEST]:
            print(f"  {seconds:7.1f} s  {e2e_nodeid(name)}")
    if started is not None:
        wall = time.time() - started
        print(f"test report: wall time {wall:.0f} s ({wall / 60:.1f} min); "
              f"the budget is {budget:.0f} s (docs/testing.md)")
    return 1 if bad else 0


def update(target, paths):
    files = {}
    for path in paths:
        for name, seconds, _ in cases(path):
            file = Path(e2e_nodeid(name).split("::")[0]).name
            files[file] = round(files.get(file, 0) + seconds, 1)
    Path(target).write_text(json.dumps({
        "about": "seconds per end-to-end file, the sum of its tests' times in the last "
                 "`scripts/test-report.py --update` (docs/testing.md)",
        "files": dict(sorted(files.items(), key=lambda kv: -kv[1]))}, indent=1) + "\n")
    print(f"test report: {target}: {len(files)} files")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="JUnit XML files")
    ap.add_argument("--started", type=float, help="when the run began (seconds since the epoch)")
    ap.add_argument("--budget", type=float, default=600, help="the run's budget in seconds")
    ap.add_argument("--update", metavar="DURATIONS_JSON",
                    help="write the end-to-end durations there instead of a summary")
    args = ap.parse_args()
    present = [p for p in args.results if Path(p).exists()]
    if args.update:
        return update(args.update, present)
    return summary(present, args.started, args.budget)


if __name__ == "__main__":
    sys.exit(main())
