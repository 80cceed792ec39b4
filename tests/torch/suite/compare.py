# SPDX-License-Identifier: BSD-3-Clause
"""Compares run_suite.py results of gloo and chorus (same torch, same world size).

usage: compare.py GLOO.json CHORUS.json [--known known_differences.txt]

Prints the totals side by side and every test that passed on gloo but not on chorus. Exits
non-zero if such a test is not in the known-differences file (one test name per line, the
reason after a '#'), or if a test listed there passes on chorus now (the list is then stale).
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def known_differences(path):
    known = {}
    if path:
        with open(path) as f:
            for line in f:
                name, _, reason = line.partition("#")
                if name.strip():
                    known[name.strip()] = reason.strip()
    return known


def outcome(result, name):
    return result["tests"].get(name, "absent").split(":", 1)[0]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gloo")
    p.add_argument("chorus")
    p.add_argument("--known")
    args = p.parse_args(argv)
    gloo, chorus = load(args.gloo), load(args.chorus)
    known = known_differences(args.known)
    print(f"torch {chorus['torch']}, world size {chorus['world_size']}:")
    for label, r in (("gloo", gloo), ("chorus", chorus)):
        t = r["totals"]
        print(f"  {label:7s} passed {t.get('passed', 0):3d}  failed {t.get('failed', 0):3d}  "
              f"error {t.get('error', 0):3d}  skipped {t.get('skipped', 0):3d}  ({r['seconds']} s)")
    unexpected = []
    for name in sorted(gloo["tests"]):
        if outcome(gloo, name) != "passed" or outcome(chorus, name) == "passed":
            continue
        detail = chorus["tests"].get(name, "absent")
        if name in known:
            print(f"  known:      {name}: {known[name]}")
        else:
            print(f"  UNEXPECTED: {name}: passed on gloo, on chorus {detail}")
            unexpected.append(name)
    stale = [n for n in known if outcome(chorus, n) == "passed"]
    for name in stale:
        print(f"  STALE:      {name} is listed as a known difference but passes on chorus")
    only_chorus = [n for n in sorted(chorus["tests"])
                   if outcome(chorus, n) == "passed" and outcome(gloo, n) != "passed"]
    if only_chorus:
        print(f"  passed on chorus only: {', '.join(only_chorus)}")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
