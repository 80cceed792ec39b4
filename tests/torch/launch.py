# SPDX-License-Identifier: BSD-3-Clause
"""Starting torch ranks for the tests: by hand (env://), by torchrun, by chorusrun.

Every launch has a hard deadline: ranks still running past it are killed and the launch fails
with their output, so a hang is a failure, never a stuck CI.
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GDB = shutil.which("gdb")


def session_processes(leader):
    """The pids of the processes in session `leader` (a launch's command and everything it
    started), leader first."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == leader:  # field 6 of stat, the session id
            pids.append(int(entry))
    return sorted(pids, key=lambda pid: pid != leader)


def stacks_of_session(leader, bound_s=60):
    """What the launch's processes still running at its deadline are doing: each one's command
    line and every thread's native stack (gdb, when installed), so that a hang in CI says where
    it hangs. Bounded: gdb gets `bound_s` in all."""
    until = time.monotonic() + bound_s
    parts = []
    for pid in session_processes(leader):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        parts.append(f"=== pid {pid}: {cmdline}")
        left = until - time.monotonic()
        if GDB is None or left <= 1:
            parts.append("(no stacks: gdb is not installed or the bound is spent)")
            continue
        try:
            # Symbols of chorus, libc and libstdc++ only: reading libtorch's takes gdb minutes
            # on a busy machine (its frames show as ??).
            got = subprocess.run([GDB, "-p", str(pid), "-batch", "-nx",
                                  "-iex", "set auto-solib-add off",
                                  "-ex", r"sharedlibrary chorus|_C\.|libc\.|libstdc",
                                  "-ex", "set pagination off", "-ex", "thread apply all bt 25"],
                                 capture_output=True, text=True, timeout=left,
                                 stdin=subprocess.DEVNULL)
            parts.append("\n".join(ln for ln in got.stdout.splitlines()
                                   if ln.startswith(("#", "Thread "))))
        except subprocess.TimeoutExpired:
            parts.append("(gdb ran out of time)")
    return "\n".join(parts)


def ephemeral_port_range():
    """The kernel's range for bind(0) and connect() (net.ipv4.ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def reserve_port():
    """A port for a launch's store, held until the launch ends: a socket bound to it that never
    listens. Between the reservation and rank 0's bind lie seconds of importing torch, and a
    busy machine has many programs looking for a free port meanwhile; three kinds could take it:
    - bind(0) and connect(): the kernel never hands them a bound port;
    - another reservation: each binds without SO_REUSEADDR, which fails on a port any socket
      holds (SO_REUSEADDR is set only after the bind, so that rank 0's store can bind later);
    - a "bind port 0, read it, close, bind it again later" picker (torch's own test suite finds
      its MASTER_PORT so, and runs beside these tests): it may have been handed the port just
      before this reservation, and its later bind with SO_REUSEADDR succeeds beside a socket that
      does not listen. So the port is picked below the kernel's ephemeral range, where no
      bind(0) ever lands.
    rank 0's store still binds and listens on it, because torch's TCPStore sets SO_REUSEADDR
    (checked on torch 1.13, 2.6 and 2.15), and a second store on the port still fails with
    EADDRINUSE. Returns the socket (the port is sock.getsockname()[1]); Launch closes it."""
    low, _ = ephemeral_port_range()
    first = 10000 if low > 12000 else 1024
    rng = random.SystemRandom()
    for _ in range(500):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", rng.randrange(first, low)))
        except OSError:
            sock.close()
            continue
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return sock
    raise AssertionError(f"no free port in {first}..{low - 1} to reserve after 500 tries")


def base_env(extra=None):
    env = dict(os.environ)
    env.update(extra or {})
    pythonpath = env.get("CHORUS_PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, HERE, env.get("PYTHONPATH")) if p)
    env["USE_LIBUV"] = "0"  # Debian's torch 2.6 is built without libuv; 1.13 ignores it
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


class Launch:
    """Processes of one launch, their output, and a deadline."""

    def __init__(self, procs, deadline_s, what, reserved=None):
        self.procs = procs
        # reserve_port()'s socket: closed once every process has been waited for (else at exit)
        self.reserved = reserved
        self.deadline = time.monotonic() + deadline_s
        self.what = what
        self.outputs = [None] * len(procs)
        self.codes = [None] * len(procs)

    def wait(self, i):
        """Waits for process i (until the deadline); returns its exit code."""
        p = self.procs[i]
        left = max(0.1, self.deadline - time.monotonic())
        try:
            out, _ = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            stacks = stacks_of_session(p.pid)
            self.kill_all()
            out, _ = p.communicate()
            self.codes[i] = "timeout"
            self.outputs[i] = out
            raise AssertionError(f"{self.what}: process {i} still running at the deadline; "
                                 f"output:\n{out}\n" + self.report() +
                                 f"\nits processes at the deadline:\n{stacks}")
        self.codes[i] = p.returncode
        self.outputs[i] = out
        return p.returncode

    def wait_all(self):
        for i in range(len(self.procs)):
            if self.codes[i] is None:
                self.wait(i)
        self.release()
        return self.codes

    def release(self):
        if self.reserved is not None:
            self.reserved.close()
            self.reserved = None

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def report(self):
        """Every process's exit code and output. Made when the launch failed: a process not
        waited for yet is collected first (killed if it still runs, "killed at report"), so the
        report shows where each rank was, not only the one that failed first."""
        for i, p in enumerate(self.procs):
            if self.codes[i] is not None:
                continue
            running = p.poll() is None
            if running:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                out, _ = p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                out = None
            self.outputs[i] = out
            self.codes[i] = "killed at report" if running else p.returncode
        lines = []
        for i, p in enumerate(self.procs):
            lines.append(f"--- {self.what} process {i}: exit {self.codes[i]} ---")
            lines.append(self.outputs[i] or "(no output)")
        return "\n".join(lines)

    def expect_success(self):
        self.wait_all()
        if any(c != 0 for c in self.codes):
            raise AssertionError(f"{self.what} failed:\n" + self.report())
        return self.outputs


def _popen(cmd, env, stdin=subprocess.DEVNULL):
    return subprocess.Popen(cmd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def command(cmd, env, deadline_s, what):
    """One command (and every process it starts: its own session) under a deadline."""
    return Launch([_popen(cmd, env)], deadline_s, what)


def by_hand(script, n, args=(), env=None, deadline_s=120, stdin=subprocess.DEVNULL):
    """n ranks with env:// variables set by hand (as a user would without a launcher); MASTER_PORT
    is reserved for the launch (reserve_port)."""
    reserved = reserve_port()
    port = reserved.getsockname()[1]
    procs = []
    for r in range(n):
        e = base_env(env)
        e.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                 LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n))
        procs.append(_popen([sys.executable, script, *args], e, stdin))
    return Launch(procs, deadline_s, f"{os.path.basename(script)} x{n} (store port {port})",
                  reserved)


def torchrun(script, n, args=(), env=None, deadline_s=180):
    """torchrun --nproc_per_node n. --redirects/--tee 1 and a log dir: Debian 12's torch 1.13
    torchrun misparses its defaults on Python 3.11 (an IntFlag change). With nolibuv/ on
    PYTHONPATH: Debian 13's torch 2.6 torchrun cannot run a script otherwise."""
    logs = tempfile.mkdtemp(prefix="chorus_torchrun_")
    reserved = reserve_port()
    env = dict(env or {})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(HERE, "nolibuv"), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", str(n), "--master_addr", "127.0.0.1",
           "--master_port", str(reserved.getsockname()[1]), "--redirects", "1", "--tee", "1",
           "--log_dir", logs, script, *args]
    return Launch([_popen(cmd, base_env(env))], deadline_s, f"torchrun {os.path.basename(script)} x{n}",
                  reserved)


def chorusrun(chorusrun_path, script, n, args=(), env=None, deadline_s=180):
    """chorusrun --standalone --nproc-per-node n: the torch script runs unchanged."""
    cmd = [chorusrun_path, "--standalone", "--nproc-per-node", str(n), sys.executable, script, *args]
    return Launch([_popen(cmd, base_env(env))], deadline_s, f"chorusrun {os.path.basename(script)} x{n}")


class Follow:
    """Reads a process's output as it comes (a thread), so that a driver can act on a line while
    the process runs; every wait has a deadline (time.monotonic())."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self._cv = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def output(self):
        with self._cv:
            return "".join(self.lines)

    def wait_for(self, marker, deadline):
        """The first line containing marker; AssertionError at EOF or past the deadline."""
        with self._cv:
            while True:
                for line in self.lines:
                    if marker in line:
                        return line
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    raise AssertionError(f"no line with {marker!r} "
                                         f"({'ended' if self._eof else 'deadline'}); output:\n"
                                         + "".join(self.lines))
                self._cv.wait(left)

    def finish(self, deadline):
        """Waits for the process to exit (killing its session past the deadline); its exit code."""
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stacks = stacks_of_session(self.proc.pid)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._thread.join(10)
            raise AssertionError("still running at the deadline; output:\n" + self.output() +
                                 f"\nits processes at the deadline:\n{stacks}")
        self._thread.join(10)
        return self.proc.returncode
