# SPDX-License-Identifier: BSD-3-Clause
"""The torch backend's tests. usage: run_torch_tests.py CASE... (or one of SELECTIONS: "all",
every case but those of NOT_IN_ALL; "torch26", the torch 2.6 leg's)

Environment: CHORUS_PYTHONPATH (the build's python/ directory), CHORUS_CHORUSRUN (the
chorusrun binary), CHORUS_JOIN_PROBE (chorus_join_probe, for case "stranger"), CHORUS_VERSION
(meson.build's version, for case "package"). Each case launches real ranks with a hard
deadline; a hang is a failure. Prints one line per case (PASS, FAIL, or SKIP saying why it
cannot run here) and exits non-zero if any failed."""
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import launch

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = os.path.join(HERE, "ops_check.py")
DDP = os.path.join(HERE, "ddp_check.py")
FAILURE = os.path.join(HERE, "failure_check.py")
INIT = os.path.join(HERE, "init_check.py")
SHARED = os.path.join(HERE, "shared_check.py")
WORK = os.path.join(HERE, "work_check.py")
LIVENESS = os.path.join(HERE, "liveness_check.py")
SECRET = os.path.join(HERE, "secret_check.py")
STRANGER = os.path.join(HERE, "stranger.py")
WIRE = os.path.join(HERE, "wire_check.py")
PACKAGE = os.path.join(HERE, "package_check.py")
BACKEND_STRING = os.path.join(HERE, "backend_string_check.py")
QUIET = os.path.join(HERE, "quiet_check.py")
WORKLOADS = os.path.join(HERE, "workloads_check.py")
SUITE = os.path.join(HERE, "suite", "run_suite.py")
SUITE_SUBSET = os.path.join(HERE, "suite", "ci_subset.txt")
SUITE_SUBSET_TORCH2 = os.path.join(HERE, "suite", "ci_subset_torch2.txt")
STRANGER_USER = "chorus-stranger"


class Skip(Exception):
    """A case that cannot run here, and why."""


def last_line(outputs, marker):
    lines = [ln for out in outputs for ln in (out or "").splitlines() if marker in ln]
    if not lines:
        raise AssertionError(f"no line with {marker!r} in the output:\n" + "\n".join(outputs))
    return lines[-1]


def ranks_reporting(outputs, marker):
    return sum(1 for out in outputs for ln in (out or "").splitlines() if marker in ln)


def case_ops(n):
    outputs = launch.by_hand(OPS, n, deadline_s=240).expect_success()
    if ranks_reporting(outputs, "OK ops:") != n:
        raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
    return last_line(outputs, "OK ops:")


def case_shared(n):
    """chorus.torch.shared_empty: the single-copy path through torch, and the mismatch."""
    outputs = launch.by_hand(SHARED, n, deadline_s=120).expect_success()
    if ranks_reporting(outputs, "OK shared:") != n:
        raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
    return last_line(outputs, "OK shared:")


def case_wire():
    """bf16_wire_hook against bf16_compress_hook on gloo, same inputs (4 ranks, 4 "hosts")."""
    outputs = launch.by_hand(WIRE, 4, deadline_s=180).expect_success()
    return last_line(outputs, "OK wire:")


def case_work(n):
    """Works that are never waited on without a bound: dropped in flight (the result still
    lands), polled with is_completed(), followed through get_future(), waited on with a bound."""
    outputs = launch.by_hand(WORK, n, deadline_s=180).expect_success()
    if ranks_reporting(outputs, "OK work:") != n:
        raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
    return last_line(outputs, "OK work:")


def case_package():
    """The package as the build tree holds it: __version__, _C.pyi against _C, py.typed,
    python -m chorus.run (package_check.py; scripts/test_pip.sh runs it on a pip install)."""
    r = subprocess.run([sys.executable, PACKAGE], env=launch.base_env(), capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0 or "PACKAGE_OK" not in r.stdout:
        raise AssertionError(f"package_check.py: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return last_line([r.stdout], "PACKAGE_OK")


def case_init(method):
    """tcp://, file:// and store= rendezvous (env:// is what every other case uses)."""
    tmp = tempfile.mkdtemp(prefix="chorus_init_")
    # tcp:// and store=: the store's port is held until the launch is over (reserve_port).
    reserved = launch.reserve_port()
    try:
        shared = (os.path.join(tmp, "rendezvous") if method == "file"
                  else str(reserved.getsockname()[1]))
        outputs = launch.by_hand(INIT, 3, args=[method, shared], deadline_s=120).expect_success()
    finally:
        reserved.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if ranks_reporting(outputs, f"OK init {method}") != 3:
        raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
    return f"3 ranks formed through {method}, allreduce/broadcast/subgroup exact"


def case_backend_strings(n):
    """chorus.torch's hooks on groups made with every backend string torch accepts: "chorus",
    and on torch 2.x "cpu:chorus" and "cpu:chorus,cuda:gloo" (a backend per device)."""
    import torch

    specs = ["chorus"]
    if int(torch.__version__.split(".")[0]) >= 2:
        specs += ["cpu:chorus", "cpu:chorus,cuda:gloo"]
    for spec in specs:  # a launch each: see backend_string_check.py
        outputs = launch.by_hand(BACKEND_STRING, n, args=[spec], deadline_s=180).expect_success()
        if ranks_reporting(outputs, f"OK backend {spec}") != n:
            raise AssertionError(f"not every rank finished {spec}:\n" + "\n".join(outputs))
    return (f"allreduce_hook and bf16_wire_hook take the chorus path on {' | '.join(specs)} "
            "(= DDP on gloo); on gloo they average or refuse")


def case_quiet(n):
    """Group setup prints nothing: every rank's output from quiet_check.py on chorus, up to its
    "setup done" line, is empty, except lines that gloo's run of the same script prints as well
    (torch's own, compared without their numbers: timestamps, pids, ports); at teardown chorus
    warns of nothing (torch's own lines there are left out: see quiet_check.py)."""
    def lines(backend):
        # A job token, as chorusrun gives: without one chorus warns (by design, "Security" in
        # docs/torch.md) that the group's secret is kept in the store.
        env = {"CHORUS_STORE_TOKEN": "quiet-check-token"}
        outputs = launch.by_hand(QUIET, n, args=[backend], env=env,
                                 deadline_s=120).expect_success()
        if ranks_reporting(outputs, f"OK quiet {backend}") != n:
            raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
        parts = [(out or "").split("quiet: setup done") for out in outputs]
        teardown.extend(ln for part in parts for ln in part[-1].splitlines()
                        if " chorus " in ln and " WARN " in ln)
        return [[ln for ln in part[0].splitlines() if ln.strip()] for part in parts]

    def shape(line):
        return re.sub(r"[0-9]+", "#", line)

    teardown = []

    torch_own = {shape(ln) for out in lines("gloo") for ln in out}
    extra = [f"rank {r}: {ln}" for r, out in enumerate(lines("chorus")) for ln in out
             if shape(ln) not in torch_own]
    if extra:
        raise AssertionError("chorus's group setup printed (gloo's did not):\n" +
                             "\n".join(extra))
    if teardown:
        raise AssertionError("chorus warned at teardown:\n" + "\n".join(teardown))
    return (f"{n} staggered ranks: setup of the default group and a subgroup printed nothing"
            + (f" ({len(torch_own)} line(s) torch prints on gloo too)" if torch_own else ""))


def run_ddp(launcher, n):
    tmp = tempfile.mkdtemp(prefix="chorus_ddp_")
    try:
        if launcher == "torchrun":
            outputs = launch.torchrun(DDP, n, args=[tmp]).expect_success()
        else:
            outputs = launch.chorusrun(os.environ["CHORUS_CHORUSRUN"], DDP, n,
                                       args=[tmp]).expect_success()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ranks_reporting(outputs, "OK ddp:") != n:
        raise AssertionError("not every rank finished:\n" + "\n".join(outputs))
    return last_line(outputs, "OK ddp:")


def run_workloads(n, selection, deadline_s):
    """workloads_check.py's workloads at n ranks: each on gloo and on chorus in the same
    processes, compared. Every workload rank 0 planned must end PASS on every rank or SKIP on
    every rank (an API this torch lacks); returns (passed lines of rank 0, skip reasons)."""
    tmp = tempfile.mkdtemp(prefix="chorus_workloads_")
    try:
        # A job token, as chorusrun gives (else chorus warns that the group's secret is kept
        # in the store: "Security" in docs/torch.md).
        env = {"CHORUS_STORE_TOKEN": "workloads-check-token"}
        outputs = launch.by_hand(WORKLOADS, n, args=[tmp, selection], env=env,
                                 deadline_s=deadline_s).expect_success()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    everything = "\n".join(o or "" for o in outputs)
    if ranks_reporting(outputs, "OK workloads") != n:
        raise AssertionError("not every rank finished:\n" + everything)
    plan = last_line(outputs, "WORKLOAD PLAN").split("WORKLOAD PLAN ", 1)[1].split()
    passed, skipped = [], {}
    for name in plan:
        ends = [[ln.split("WORKLOAD ", 1)[1] for ln in (out or "").splitlines()
                 if re.search(rf"WORKLOAD (PASS|SKIP) {name}\b", ln)] for out in outputs]
        kinds = {e.split()[0] for rank_ends in ends for e in rank_ends}
        if any(len(e) != 1 for e in ends) or len(kinds) != 1:
            raise AssertionError(f"{name}: not one PASS or SKIP on every rank:\n" + everything)
        if kinds == {"SKIP"}:
            skipped[name] = ends[0][0].split(": ", 1)[1]
        else:
            passed.append(ends[0][0].split(" ", 1)[1])
    return passed, skipped


def case_workloads(counts, selection, deadline_s):
    """The workloads (DDP variants, ZeRO, FSDP1, FSDP2, DTensor, tensor parallel, DCP,
    functional collectives) on gloo and on chorus, equal within 1e-5 relative, at each rank
    count in turn. A workload this torch lacks is skipped and named with its reason; the case
    is skipped only where every workload is."""
    import torch

    lines, skips = [], {}
    for n in counts:
        passed, skipped = run_workloads(n, selection, deadline_s)
        lines += [f"{n} ranks: {p}" for p in passed]
        skips.update(skipped)
    summary = "".join(f"\n  skipped {k}: {v}" for k, v in skips.items())
    if not lines:
        raise Skip(f"no workload runs on torch {torch.__version__}:{summary}")
    return (f"{len(lines)} workload runs on torch {torch.__version__} equal to gloo and the "
            "reference:\n  " + "\n  ".join(lines) + summary)


def case_failure(mode):
    """Rank 1 is killed or stopped; ranks 0 and 2 must raise naming it, then exit 0."""
    run = launch.by_hand(FAILURE, 3, args=[mode], deadline_s=90)
    try:
        for i in (0, 2):
            if run.wait(i) != 0:
                raise AssertionError(f"survivor {i} failed:\n" + run.report())
    finally:
        if run.procs[1].poll() is None:
            os.killpg(run.procs[1].pid, signal.SIGKILL)  # the stopped rank
    run.wait(1)
    return last_line(run.outputs, "RAISED")[:160]


def case_exit(first, how):
    """Ranks leave in an order the driver controls (no sleeps): the first ones, then, once they
    are gone, the rest (released by closing their stdin). Nobody may hang."""
    run = launch.by_hand(FAILURE, 3, args=["exit", first, how], deadline_s=90,
                         stdin=subprocess.PIPE)
    firsts = [0] if first == "store" else [1, 2]
    for i in firsts:
        if run.wait(i) != 0:
            raise AssertionError(f"rank {i} failed:\n" + run.report())
    for i in range(3):
        if i not in firsts:
            run.procs[i].stdin.close()
            run.procs[i].stdin = None
    for i in range(3):
        if i not in firsts and run.wait(i) != 0:
            raise AssertionError(f"rank {i} failed:\n" + run.report())
    if ranks_reporting(run.outputs, "EXITING") != 3:
        raise AssertionError("not every rank exited cleanly:\n" + run.report())
    return f"rank {'0 (store host)' if first == 'store' else '1, 2'} left first, {how}: all exited"


def case_exit_in_callback():
    """The interpreter exits while a future callback sleeps, in four launches at once (whether
    the group is destroyed before the callback wakes varies with the interpreter's teardown;
    without the exit quiesce about a third of such launches aborted)."""
    runs = [launch.by_hand(FAILURE, 2, args=["exit_in_callback"], deadline_s=60)
            for _ in range(4)]
    try:
        for run in runs:
            outputs = run.expect_success()
            if ranks_reporting(outputs, "EXITING") != 2:
                raise AssertionError("not every rank exited cleanly:\n" + run.report())
    finally:
        for run in runs:
            run.kill_all()
    return f"{len(runs)} launches exited 0 with a callback asleep"


def case_liveness():
    """15 s callbacks, a 15 s GIL hold, a slow DDP hook, a 20 s SIGSTOP: under chorusrun at 2
    and 4 ranks at once (each launch is mostly asleep in its stalls)."""
    # The default peer timeout, whatever the caller's environment says.
    env = {"CHORUS_PEER_TIMEOUT": "10"}
    tmp = tempfile.mkdtemp(prefix="chorus_liveness_")
    for n in (2, 4):
        os.mkdir(os.path.join(tmp, str(n)))
    runs = {n: launch.chorusrun(os.environ["CHORUS_CHORUSRUN"], LIVENESS, n,
                                args=[os.path.join(tmp, str(n))], env=env, deadline_s=240)
            for n in (2, 4)}
    phases = []
    try:
        for n, run in runs.items():
            outputs = run.expect_success()
            if ranks_reporting(outputs, "OK liveness") != n:
                raise AssertionError(f"not every rank of {n} finished:\n" + "\n".join(outputs))
            rank0 = [re.sub(r"^(\[rank \d+\] )+", "", ln)
                     for out in outputs for ln in (out or "").splitlines()
                     if ln.startswith("[rank 0]") and ("OK " in ln or "RAISED" in ln)]
            phases.append(f"{n} ranks, rank 0: " + ", ".join(ln[:60] for ln in rank0))
    finally:
        for run in runs.values():
            run.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    return "; ".join(phases)


def stranger_account():
    """The unprivileged account the stranger runs as, made once (a system user, no home)."""
    try:
        return pwd.getpwnam(STRANGER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", STRANGER_USER], check=True,
                       timeout=60)
        return pwd.getpwnam(STRANGER_USER)


def case_stranger():
    """A chorusrun torch job (4 ranks, CHORUS_TRANSPORT=tcp: ring links only, so rank 0 would
    answer a dial claiming rank 2) waits while an unprivileged local user reads chorus's keys
    in its torch store with a plain TCPStore client and dials rank 0 with every secret it could
    make of them (and of a wrong token): each attempt must be refused, and the job's next
    allreduce exact."""
    if os.geteuid() != 0:
        raise Skip(f"needs root to run the stranger as the unprivileged account {STRANGER_USER}")
    if not os.environ.get("CHORUS_JOIN_PROBE"):
        raise Skip("CHORUS_JOIN_PROBE is unset: the probe (tests/torch/join_probe.cpp) is built "
                   "with -Dtests=true, and meson's torch_security test sets it")
    account = stranger_account()
    tmp = tempfile.mkdtemp(prefix="chorus_stranger_")
    try:
        # What the stranger runs, where it may read it; a home of its own for torch's caches.
        os.chmod(tmp, 0o755)
        probe = shutil.copy(os.environ["CHORUS_JOIN_PROBE"], tmp)
        script = shutil.copy(STRANGER, tmp)
        os.chmod(probe, 0o755)
        os.chmod(script, 0o644)
        home = os.path.join(tmp, "home")
        os.mkdir(home, 0o700)
        os.chown(home, account.pw_uid, account.pw_gid)
        run = launch.chorusrun(os.environ["CHORUS_CHORUSRUN"], SECRET, 4,
                               env={"CHORUS_TRANSPORT": "tcp"}, deadline_s=180)
        job = launch.Follow(run.procs[0])
        try:
            store_line = job.wait_for("STORE ", run.deadline)
            host, port = store_line.split("STORE ", 1)[1].split()[:2]
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
                   "USE_LIBUV": "0", "OMP_NUM_THREADS": "1"}  # no token, nothing of the job's
            stranger = subprocess.run(
                [sys.executable, script, host, port, probe], env=env, cwd=home,
                user=account.pw_uid, group=account.pw_gid, extra_groups=[],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=max(1.0, run.deadline - time.monotonic()))
            code = job.finish(run.deadline)
        finally:
            run.kill_all()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seen = stranger.stdout + stranger.stderr
    report = f"stranger (exit {stranger.returncode}):\n{seen}\njob (exit {code}):\n{job.output()}"
    if "READ default_pg/0/tcp/g1/current" not in seen or f"uid={account.pw_uid}" not in seen:
        raise AssertionError("the stranger did not read the group's record as itself:\n" + report)
    probes = [ln for ln in seen.splitlines() if ln.startswith("probe ")]
    joinable = [ln for ln in probes if "accept_proof=valid" in ln]
    if joinable:
        raise AssertionError("a reader of the torch store can join the group (its key is in the "
                             "store): " + "; ".join(joinable) + "\n" + report)
    if len(probes) < 2 or any("accept_proof=invalid after_proof=closed" not in ln for ln in probes):
        raise AssertionError("every join attempt must be answered and refused:\n" + report)
    if code != 0 or ranks_reporting([job.output()], "OK secret") != 4:
        raise AssertionError("the job did not finish exactly:\n" + report)
    return (f"{STRANGER_USER} read the record, {len(probes)} join attempts refused, "
            "allreduce exact")


ELASTIC = os.path.join(HERE, "..", "..", "examples", "torch_elastic.py")
ELASTIC_STEPS = 60
ELASTIC_FAIL_AT = 20
# An elastic launch's bound: 25-55 s on a 2-core machine running the other legs (load 7); a CI
# machine at load 20 has taken over three times that.
ELASTIC_DEADLINE_S = 300


def elastic_job(train_args, launcher_args=(), env=None):
    """examples/torch_elastic.py on 4 ranks under chorusrun --elastic."""
    cmd = [os.environ["CHORUS_CHORUSRUN"], "--elastic", *launcher_args, "--standalone", "-n", "4",
           sys.executable, ELASTIC, "--steps", str(ELASTIC_STEPS), *train_args]
    return launch.command(cmd, launch.base_env(env), ELASTIC_DEADLINE_S,
                          "chorusrun --elastic torch_elastic.py")


def check_elastic_output(output, worlds_after):
    """Every step printed once; world 4 before the failure, then `worlds_after(step, world)`
    must hold; "final" equal to a single process's training (the same as the survivors'
    training from the state after step 19: the gradient does not depend on the world size)."""
    sys.path.insert(0, os.path.dirname(ELASTIC))
    import torch_elastic  # the reference, from the example itself

    worlds = {}
    for step, world in re.findall(r"step (\d+) world (\d+) loss ", output):
        worlds.setdefault(int(step), []).append(int(world))
    for step in range(1, ELASTIC_STEPS + 1):
        printed = worlds.get(step, [])
        if len(printed) != 1:
            raise AssertionError(f"step {step} printed {len(printed)} times:\n{output[-6000:]}")
        if step < ELASTIC_FAIL_AT and printed[0] != 4:
            raise AssertionError(f"step {step}: world {printed[0]}, expected 4:\n{output[-6000:]}")
        if step >= ELASTIC_FAIL_AT:
            worlds_after(step, printed[0])
    final = float(re.search(r"final ([-0-9.e+]+)", output).group(1))
    want = torch_elastic.reference(ELASTIC_STEPS)
    if abs(final - want) > 1e-6 * abs(want):
        raise AssertionError(f"final {final} but a single process ends at {want}")
    return final, want


def case_elastic_killed(ranks):
    """SIGKILLed at step 20 of 60: the survivors shrink and finish."""
    kills = [a for r in ranks for a in ("--kill-at", f"{r}:{ELASTIC_FAIL_AT}")]
    # One death: named by the failure, so a long grace costs nothing. Two: the failure names
    # one, and the survivors wait the whole grace for the other; 5 s keeps a survivor that a
    # busy machine slows (Python, DDP) from being taken for a late rank.
    grace = ["--grace-ms", "10000" if len(ranks) == 1 else "5000"]
    run = elastic_job(kills + grace)
    run.wait_all()
    out = run.outputs[0]
    if run.codes[0] != 0:
        raise AssertionError(run.report())

    def after(step, world):
        if world != 4 - len(ranks):
            raise AssertionError(f"step {step}: world {world}, expected {4 - len(ranks)}")

    final, want = check_elastic_output(out, after)
    return f"killed rank(s) {ranks} at step 20: world 4 -> {4 - len(ranks)}, final {final:.9g}"


def case_elastic_rejoin(rank):
    """SIGKILLed at step 20 with --max-restarts 1: its replacement joins, world 4 again."""
    run = elastic_job(["--kill-at", f"{rank}:{ELASTIC_FAIL_AT}", "--grace-ms", "10000",
                       "--step-ms", "20", "--rejoin-wait-ms", "60000"], ["--max-restarts", "1"])
    run.wait_all()
    out = run.outputs[0]
    if run.codes[0] != 0:
        raise AssertionError(run.report())
    back = []

    def after(step, world):
        if step == ELASTIC_FAIL_AT and world != 3:
            raise AssertionError(f"step {step}: world {world}, expected 3")
        if step > ELASTIC_FAIL_AT:
            if world == 4 and not back:
                back.append(step)
            elif world != (4 if back else 3):
                raise AssertionError(f"step {step}: world {world} after rejoining at {back}")

    final, want = check_elastic_output(out, after)
    if not back:
        raise AssertionError("the replacement never joined:\n" + out[-6000:])
    joined = last_line([out], "joined as rank")
    return f"rank {rank} killed, back at step {back[0]}; {joined.split('torch_elastic: ')[-1]}"


def elastic_sequence_problems(output, steps):
    """What is wrong with the printed steps (each of 1..steps once, in order): "" if nothing."""
    problems = []
    due = 1
    for step in (int(s) for s in re.findall(r"step (\d+) world \d+ loss ", output)):
        if step != due:
            problems.append(f"step {step} printed where {due} was due")
        due = step + 1
    if due != steps + 1:
        problems.append(f"the last step printed is {due - 1}")
    return "; ".join(problems)


def case_elastic_printed():
    """Each step printed exactly once, in order, when the printing rank dies: SIGKILLed between
    a step's allreduce and its line (step 20 of 60), then at seeded random moments over many
    fast steps (from a thread of its own, wherever the main thread is)."""
    import random

    sys.path.insert(0, os.path.dirname(ELASTIC))
    import torch_elastic

    rng = random.Random(50)
    runs = [(60, ["--kill-after-op", f"0:{ELASTIC_FAIL_AT}", "--grace-ms", "10000"])]
    for _ in range(2):
        runs.append((400, ["--kill-after-us", f"0:{rng.randrange(0, 400000)}",
                           "--grace-ms", "5000"]))
    shrunk = 0
    for steps, train_args in runs:
        cmd = [os.environ["CHORUS_CHORUSRUN"], "--elastic", "--standalone", "-n", "3",
               sys.executable, ELASTIC, "--steps", str(steps), *train_args]
        run = launch.command(cmd, launch.base_env(None), ELASTIC_DEADLINE_S,
                             "chorusrun --elastic torch_elastic.py")
        run.wait_all()
        out = run.outputs[0]
        if run.codes[0] != 0:
            raise AssertionError(f"{train_args}:\n{run.report()}")
        problems = elastic_sequence_problems(out, steps)
        if problems:
            raise AssertionError(f"{train_args}: {problems}\n{out[-6000:]}")
        final = float(re.search(r"final ([-0-9.e+]+)", out).group(1))
        want = torch_elastic.reference(steps)
        if abs(final - want) > 1e-6 * abs(want):
            raise AssertionError(f"{train_args}: final {final} but a single process ends at {want}")
        shrunk += "world 2 loss" in out
    return f"{len(runs)} runs, every step printed once in order, {shrunk} went on in a world of 2"


def case_elastic_stopped():
    """SIGSTOPped at step 20: named by the peer timeout (3 s), fenced out when woken; exits 3."""
    run = elastic_job(["--stop-at", f"2:{ELASTIC_FAIL_AT}", "--grace-ms", "10000"],
                      env={"CHORUS_PEER_TIMEOUT": "3s"})
    job = launch.Follow(run.procs[0])
    deadline = time.monotonic() + 150
    try:
        job.wait_for("final ", deadline)
        pid = int(re.search(r"stopping pid (\d+)", job.output()).group(1))
        os.kill(pid, signal.SIGCONT)
        code = job.finish(deadline)
    finally:
        run.kill_all()
    out = job.output()
    if code != 0 or "fenced out" not in out:
        raise AssertionError(f"exit {code}:\n{out[-6000:]}")

    def after(step, world):
        if world != 3:
            raise AssertionError(f"step {step}: world {world}, expected 3")

    check_elastic_output(out, after)
    return "stopped rank 2 named by the peer timeout, fenced out when woken, job exited 0"


def case_suite_subset():
    """Part of torch's own distributed suite (tests/torch/suite/ci_subset*.txt: collectives,
    groups, p2p, DDP, object collectives) against chorus at 2 ranks; each must pass (a skip
    fails). The whole suite, next to gloo, is `make test-torch-suite`."""
    import torch

    subsets = [SUITE_SUBSET] + ([SUITE_SUBSET_TORCH2] if int(torch.__version__[0]) >= 2 else [])
    out = tempfile.mkdtemp(prefix="chorus_suite_")
    result = os.path.join(out, "result.json")
    try:
        run = launch.command([sys.executable, SUITE, "--backend", "chorus", "--world-size", "2",
                              "--json", result] + [a for s in subsets for a in ("--tests", s)],
                             launch.base_env({"TEMP_DIR": out}), 600, "torch suite subset")
        code = run.wait(0)  # kills the suite and its ranks at the deadline
        output = run.outputs[0]
        try:
            with open(result) as f:
                summary = json.load(f)
        except OSError:
            raise AssertionError(f"the suite wrote no result (exit {code}):\n"
                                 + output[-4000:]) from None
    finally:
        shutil.rmtree(out, ignore_errors=True)
    not_passed = {k: v for k, v in summary["tests"].items() if v != "passed"}
    if not_passed or code != 0:
        raise AssertionError("".join(f"{k}: {v}\n" for k, v in sorted(not_passed.items()))
                             + output[-4000:])
    return (f"{len(summary['tests'])} tests of torch {summary['torch']}'s distributed suite "
            f"passed in {summary['seconds']} s")


CASES = {
    "ops_2": lambda: case_ops(2),
    "ops_4": lambda: case_ops(4),
    "work_2": lambda: case_work(2),
    "work_4": lambda: case_work(4),
    "shared_2": lambda: case_shared(2),
    "shared_4": lambda: case_shared(4),
    "init_tcp": lambda: case_init("tcp"),
    "init_file": lambda: case_init("file"),
    "init_store": lambda: case_init("store"),
    "package": case_package,
    "backend_strings_2": lambda: case_backend_strings(2),
    "backend_strings_4": lambda: case_backend_strings(4),
    "quiet_2": lambda: case_quiet(2),
    "quiet_4": lambda: case_quiet(4),
    "wire": case_wire,
    "ddp_torchrun_2": lambda: run_ddp("torchrun", 2),
    "ddp_torchrun_4": lambda: run_ddp("torchrun", 4),
    "ddp_chorusrun_2": lambda: run_ddp("chorusrun", 2),
    "ddp_chorusrun_4": lambda: run_ddp("chorusrun", 4),
    "killed_rank": lambda: case_failure("killed"),
    "stopped_rank": lambda: case_failure("stopped"),
    "liveness": case_liveness,
    "exit_in_callback": case_exit_in_callback,
    "exit_store_first_destroy": lambda: case_exit("store", "destroy"),
    "exit_store_first_no_destroy": lambda: case_exit("store", "exit"),
    "exit_store_last_destroy": lambda: case_exit("others", "destroy"),
    "exit_store_last_no_destroy": lambda: case_exit("others", "exit"),
    "stranger": case_stranger,
    "elastic_killed": lambda: case_elastic_killed([2]),
    "elastic_killed_rank0": lambda: case_elastic_killed([0]),
    "elastic_killed_two": lambda: case_elastic_killed([1, 3]),
    "elastic_rejoin": lambda: case_elastic_rejoin(0),
    "elastic_stopped": case_elastic_stopped,
    "elastic_printed": case_elastic_printed,
    "suite_subset": case_suite_subset,
    # one workload of each kind at 2 ranks (every torch leg of make test)
    "workloads": lambda: case_workloads((2,), "subset", 180),
    # every workload at 2 and 4 ranks: for the torch matrix
    "workloads_all": lambda: case_workloads((2, 4), "all", 240),
}


# Cases "all" leaves out: the elastic variants whose torch code path elastic_rejoin covers too
# (kill, shrink, DDP made again; plus grow). Each launch starts four torch processes; the
# default leg runs elastic_stopped as well, and all of them run when named. workloads_all:
# every workload at 2 and 4 ranks, for the torch matrix; the legs run case workloads.
NOT_IN_ALL = ("elastic_killed", "elastic_killed_rank0", "elastic_killed_two", "elastic_stopped",
              "workloads_all")
# "torch26" (the torch 2.6 leg of `make test`): "all" without the 2-rank variants of cases that
# also run at 4 ranks. That leg checks torch 2.x's API and behaviour, which the rank count does
# not change; the default leg runs both counts on its torch.
TWO_RANK_TWINS = ("ops_2", "work_2", "shared_2", "ddp_torchrun_2", "ddp_chorusrun_2",
                  "backend_strings_2", "quiet_2")
SELECTIONS = {
    "all": [n for n in CASES if n not in NOT_IN_ALL],
    "torch26": [n for n in CASES if n not in NOT_IN_ALL + TWO_RANK_TWINS],
}


def run_one(name):
    """Runs case `name`; returns (status, line): PASS, SKIP or FAIL and what to print."""
    start = time.monotonic()
    try:
        summary = CASES[name]()
        return "PASS", f"PASS {name} ({time.monotonic() - start:.1f} s): {summary}"
    except Skip as e:
        return "SKIP", f"SKIP {name}: {e}"
    except Exception as e:  # noqa: BLE001 - report every case, then fail
        return "FAIL", f"FAIL {name} ({time.monotonic() - start:.1f} s):\n{e}"


def run_in_parallel(names, jobs):
    """Each case in a process of its own (this script with that one case), `jobs` at a time,
    the longest first so that the short ones fill in; each case's output is printed whole when
    it ends. Most of a case is waiting (ranks starting, timeouts, stalls), so cases overlap
    well; each already runs beside others under meson's parallel test runner."""
    waiting = sorted(names, key=lambda n: (n not in LONG_CASES, names.index(n)))
    running = {}  # pid -> (name, output file)
    failed = []
    while waiting or running:
        while waiting and len(running) < jobs:
            name = waiting.pop(0)
            out = tempfile.TemporaryFile(mode="w+")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), name],
                                    stdout=out, stderr=subprocess.STDOUT)
            running[proc.pid] = (name, out)
        pid, status = os.wait()  # the next case to end (the cases are this process's children)
        if pid not in running:
            continue
        name, out = running.pop(pid)
        out.seek(0)
        lines = [ln for ln in out.read().splitlines() if "torch cases passed" not in ln]
        out.close()
        print("\n".join(lines), flush=True)
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(name)
    return [n for n in names if n in failed]


# Cases of a minute or more on 2 cores, started first when cases run in parallel.
LONG_CASES = ("liveness", "suite_subset", "ddp_chorusrun_4", "ddp_torchrun_4", "shared_4")


def main(argv):
    jobs = 1
    if argv[:1] == ["--jobs"] and len(argv) >= 2 and argv[1].isdigit():
        jobs = max(1, int(argv[1]))
        argv = argv[2:]
    names = SELECTIONS[argv[0]] if len(argv) == 1 and argv[0] in SELECTIONS else argv
    unknown = [n for n in names if n not in CASES]
    if not names or unknown:
        print(f"usage: run_torch_tests.py [--jobs N] CASE... | {' | '.join(SELECTIONS)}   "
              f"(cases: {', '.join(CASES)})")
        return 2
    if jobs > 1 and len(names) > 1:
        failed = run_in_parallel(names, jobs)
    else:
        failed = []
        for name in names:
            status, line = run_one(name)
            print(line, flush=True)
            if status == "FAIL":
                failed.append(name)
    print(f"{len(names) - len(failed)} of {len(names)} torch cases passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
