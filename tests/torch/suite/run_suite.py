# SPDX-License-Identifier: BSD-3-Clause
"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test)
against a backend, unchanged but for registering the backend.

usage: run_suite.py --backend chorus|gloo --world-size N [--tests FILE | --match REGEX ...]
                    [--start fork|spawn] [--json OUT] [--list]

As torch's test/distributed/test_distributed_spawn.py does for gloo, nccl and ucc: one test
class made of TestDistBackend and DistributedTest._DistTestBase, every test run by fresh ranks
(forked from this process by default, which has imported torch and the suite: a rank starts in
milliseconds instead of the seconds a spawned interpreter takes to import torch, so the whole
suite takes minutes, not an hour; --start spawn does exactly what torch's runner does, for
CUDA-free CPU backends the same tests with the same outcomes). For backend "chorus" the only
addition is what torch does for its own backends in DistTestCases: chorus is declared a plugin
backend that supports DDP and subgroups (and "gpu" only where torch has no CUDA, see
_register_chorus). Nothing in the suite is edited; the tests that cannot pass on chorus are
skipped by the suite's own decorators or listed, with why, in known_differences.txt.

A spawned rank imports this file again (as __mp_main__), so the registration happens at import.
A test that hangs is ended by the suite's own per-test timeout (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT,
set here to 120 s unless given).

Environment: CHORUS_PYTHONPATH (the build's python/ directory) when chorus is not installed.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def _configure_environment():
    # Read by the suite at import: which backend, how many ranks, where its temp files go.
    os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
    # The suite rendezvouses through a FileStore, which names no host: keep both backends on
    # loopback rather than the first interface they would pick.
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if os.environ.get("CHORUS_PYTHONPATH"):
        sys.path.insert(0, os.environ["CHORUS_PYTHONPATH"])
    try:
        import expecttest  # noqa: F401
    except ImportError:
        # torch's common_utils imports expecttest; Debian 12 does not package it. The stand-in
        # has the two names the suite reaches.
        sys.path.append(os.path.join(HERE, "stand_in"))


def _register_chorus():
    import chorus.torch  # noqa: F401  (registers the backend "chorus")
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("chorus")
    import torch

    if not torch.cuda.is_available():
        # The suite gates some CPU tests by the "gpu" feature (torch 1.13's object collectives:
        # test_all_gather_object_*, test_gather_object_*, test_broadcast_object_list), whose
        # CUDA code runs only for nccl. Where torch has no CUDA, no CUDA test can run, so declaring
        # it runs those CPU tests and nothing else (the rest also need every backend of the set
        # available, or a GPU).
        DistTestCases.backend_feature["gpu"].add("chorus")


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--tests", action="append", default=[],
                   help="file with one test name per line (# comments); may be repeated")
    p.add_argument("--match", action="append", default=[], help="regex on the test name")
    p.add_argument("--json", help="write {test: outcome} here")
    p.add_argument("--list", action="store_true", help="print the selected names and stop")
    p.add_argument("--start", choices=["fork", "spawn"], default="fork",
                   help="how ranks start: fork (default; this process has imported torch and "
                   "the suite, so a rank starts in milliseconds) or spawn (what torch's "
                   "test_distributed_spawn.py does: a fresh interpreter per rank, seconds each)")
    return p.parse_args(argv)


if __name__ == "__main__":
    _args = _parse_args(sys.argv[1:])
    os.environ["BACKEND"] = _args.backend
    os.environ["WORLD_SIZE"] = str(_args.world_size)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="chorus-suite-"))
    os.environ["CHORUS_SUITE_START"] = _args.start
    # torch's common_utils parses sys.argv when imported (here and in every spawned rank).
    sys.argv = sys.argv[:1]

_configure_environment()
if os.environ.get("BACKEND") == "chorus":
    _register_chorus()

# The suite reads BACKEND, WORLD_SIZE and the features above when it is imported.
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ.get("CHORUS_SUITE_START", "fork") == "fork":
            import torch.multiprocessing

            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


class _Outcomes(unittest.TextTestResult):
    """Records one outcome per test: passed, failed, error, skipped."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.outcomes = {}
        self.started = {}
        self.seconds = {}

    def _name(self, test):
        return test.id().rsplit(".", 1)[-1]

    def startTest(self, test):
        self.started[self._name(test)] = time.monotonic()
        super().startTest(test)

    def _done(self, test, outcome, detail=""):
        name = self._name(test)
        self.outcomes[name] = outcome if not detail else f"{outcome}: {detail}"
        self.seconds[name] = round(time.monotonic() - self.started.get(name, time.monotonic()), 1)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._done(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._done(test, "failed", _first_line(self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self._done(test, "error", _first_line(self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._done(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._done(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._done(test, "failed", "unexpected success")


def _first_line(text):
    # The exception's own line (the last one naming an Error), short enough for a summary.
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    named = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
    return ((named or lines or [""])[-1])[:300]


def _selected_names(args):
    names = sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))
    wanted = None
    if args.tests:
        wanted = set()
        for path in args.tests:
            with open(path) as f:
                wanted |= {ln.split("#", 1)[0].strip() for ln in f} - {""}
        unknown = wanted - set(names)
        if unknown:
            sys.exit(f"run_suite: not in this torch's suite: {', '.join(sorted(unknown))}")
        names = [n for n in names if n in wanted]
    if args.match:
        patterns = [re.compile(m) for m in args.match]
        names = [n for n in names if any(p.search(n) for p in patterns)]
    return names


def main(args):
    names = _selected_names(args)
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Outcomes, stream=sys.stdout)
    start = time.monotonic()
    result = runner.run(suite)
    totals = {}
    for outcome in result.outcomes.values():
        key = outcome.split(":", 1)[0]
        totals[key] = totals.get(key, 0) + 1
    import torch

    summary = {"backend": args.backend, "world_size": args.world_size,
               "torch": torch.__version__, "seconds": round(time.monotonic() - start),
               "totals": totals, "tests": result.outcomes, "test_seconds": result.seconds}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    print(f"suite: torch {torch.__version__} backend {args.backend} world size "
          f"{args.world_size}: " + ", ".join(f"{v} {k}" for k, v in sorted(totals.items()))
          + f" in {summary['seconds']} s")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(_args))
