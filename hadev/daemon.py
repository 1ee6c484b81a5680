"""What every daemon launcher of the harness shares: the child process, its host, its start
errors and the environment that runs this checkout's code.

``hadev.journalnodes``, ``hadev.namenodes`` and ``hadev.zookeeper`` start their daemons through
these pieces, and tests run the project's command lines with ``run_command``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from conf import CONF_ENV

__all__ = [
    "CODE_ROOT",
    "LOOPBACK",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "DaemonHost",
    "DaemonProcess",
    "DaemonStartError",
    "child_environment",
    "failure_log_tails",
    "free_ports",
    "run_command",
    "start_error_from_log",
]

CODE_ROOT = Path(__file__).resolve().parents[1]
"""The checkout's root, holding the product packages: put first on a child's PYTHONPATH."""
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
ABORT_GRACE = 5.0  # seconds for a hung command to write its stacks after SIGABRT
# What the CLI prints when its RPC or HTTP port is taken (conf.rpc.PortInUseError).
_PORT_IN_USE = "address already in use"


@dataclass(frozen=True, slots=True)
class DaemonHost:
    """Where a daemon runs: the address it binds and is reached at, and the command prefix
    that runs it there (``hachaos`` puts each daemon in a network namespace of its own:
    ``("ip", "netns", "exec", "hc123-jn1")``). The default is loopback, no prefix, free
    ports; any other address gets the daemon's well-known ports (nothing else binds them in
    a namespace of its own)."""

    address: str = "127.0.0.1"
    command_prefix: tuple[str, ...] = ()

    @property
    def loopback(self) -> bool:
        return self.address == LOOPBACK.address


LOOPBACK = DaemonHost()


class DaemonStartError(RuntimeError):
    """The process exited, or did not serve, within the start timeout.

    The message is one line (with the last line of output); ``output`` is the end of the log.
    """

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output

    @property
    def port_in_use(self) -> bool:
        """The daemon could not listen because another process took one of its ports."""
        return _PORT_IN_USE in self.output


_E = TypeVar("_E", bound=DaemonStartError)


def start_error_from_log(
    error_type: type[_E], label: str, what: str, log_text: str, log_path: Path
) -> _E:
    """``error_type`` for a daemon that did not start: one line naming the daemon, what went
    wrong and its last line of output, with the end of its log attached."""
    output = log_text[-4000:]
    lines = output.strip().splitlines()
    last = lines[-1] if lines else "no output"
    return error_type(f"{label} {what}: {last} (log: {log_path})", output)


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000
_pick = random.SystemRandom()


def daemon_port_range() -> range:
    """The ports ``free_ports`` picks from: below the kernel's ephemeral range (the source
    ports of outgoing connections and of binds to port 0), or above it when too little lies
    below.

    A daemon's port inside that range can be lost while the daemon is down: a client that
    keeps reconnecting to it from an ephemeral port may be given that very port as its
    source and connect to itself (TCP's simultaneous open), and then holds the port. The
    restarted daemon fails with "address already in use", and the client reads its own
    bytes (a TLS client: WRONG_VERSION_NUMBER). Seen in a busy ``make test``: the README
    demo's restart of a killed NameNode, and a stopped ZooKeeper that still "answered"."""
    try:
        low, high = (int(part) for part in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 32_768, 60_999  # Linux's default
    if low - LOWEST_PORT >= 4_096:
        return range(LOWEST_PORT, low)
    return range(high + 1, 65_536)


def free_ports(n: int = 1, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports of ``daemon_port_range`` that were free a moment ago (bound, then
    closed), chosen at random so that parallel test workers rarely try the same one.

    Another process may take one before the daemon binds it; a first ``start`` retries
    with fresh ports when that happens.
    """
    candidates = daemon_port_range()
    ports: list[int] = []
    with contextlib.ExitStack() as stack:
        for _ in range(n * 200):
            if len(ports) == n:
                return ports
            port = _pick.choice(candidates)
            if port in ports:
                continue
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((host, port))
            except OSError:
                continue
            ports.append(port)
    if len(ports) == n:
        return ports
    raise OSError(f"no {n} free ports on {host} in {candidates.start}-{candidates.stop - 1}")


def child_environment(conf_env: Path | None = None) -> dict[str, str]:
    """The environment for a child Python process that must run this checkout's code.

    The caller's environment, without its HANAMENODE_CONF (unless ``conf_env`` is given) and
    with ``CODE_ROOT`` first on PYTHONPATH; output unbuffered so a log shows the last words of
    a killed process.
    """
    env = {k: v for k, v in os.environ.items() if k != CONF_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    if conf_env is not None:
        env[CONF_ENV] = str(conf_env)
    return env


_SPAWNED: collections.deque[DaemonProcess] = collections.deque(maxlen=64)
"""The daemons this process started last, newest last (``failure_log_tails``): held here, so
that a test's daemon is still known once the test's own references are gone."""
TAIL_LINES = 40


def failure_log_tails(since: float, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of the log of every daemon started by this process whose log
    changed at or after ``time.time()`` ``since`` (one that did nothing meanwhile is left
    out), each under a heading naming the daemon, its state and the file; "" when none.
    What a failing test prints (``tests/daemon_logs.py``): the daemons' side of the failure,
    also where only the test's output is kept."""
    parts = []
    for daemon in sorted(list(_SPAWNED), key=lambda d: (d.kind, d.name)):
        try:
            if daemon.log_path.stat().st_mtime < since:
                continue
        except FileNotFoundError:
            continue
        state = f"pid {daemon.pid}, running" if daemon.running else (
            f"exited with {daemon.returncode}"
        )
        parts.append(
            f"--- {daemon.kind} {daemon.name} ({state}), last {lines} lines of "
            f"{daemon.log_path} ---\n{daemon.log_tail(lines)}"
        )
    return "\n".join(parts)


class DaemonProcess:
    """A daemon of ours in a child process: its pid, state, log, signals and a stop that
    always ends it. A context manager; ``JournalNodeProcess`` and
    ``hadev.namenodes.NameNodeProcess`` add how to start and probe their daemon."""

    kind = "daemon"
    start_error_type: type[DaemonStartError] = DaemonStartError

    def __init__(self, name: str, workdir: Path, host: DaemonHost = LOOPBACK) -> None:
        self.name = name
        self.workdir = Path(workdir)
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None
        self.popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen
        """How ``spawn`` starts the process; a harness may hand the start to an interpreter
        that imported the daemon's modules ahead (``tests/powerloss/warm.py``)."""
        self.starts = 0
        self._stop_requested = False

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run on this daemon's host (behind its command prefix)."""
        return [*self.host.command_prefix, *args]

    @property
    def log_path(self) -> Path:
        """stdout and stderr of every start, appended."""
        return self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.kind} {self.name} was never started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        """Started and not yet exited (a SIGSTOPped process is running)."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last run: None while running or never started, -N for signal N."""
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        """The last ``lines`` lines of its log (read from the end: a log can be large)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines))
                data = f.read()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def starting(self) -> None:
        """What every start does before it spawns: count it, forget an earlier stop
        request, and be listed for ``failure_log_tails``."""
        self.starts += 1
        self._stop_requested = False
        if self in _SPAWNED:
            _SPAWNED.remove(self)
        _SPAWNED.append(self)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` if it runs. SIGKILL (the default) is a crash: nothing flushed or closed
        by the process itself, and the process is reaped before this returns. SIGSTOP pauses
        it, SIGCONT resumes it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(STOP_TIMEOUT)

    def request_stop(self) -> None:
        """Send SIGTERM (and SIGCONT, in case it is paused) without waiting; once per run: a
        second SIGTERM could land after the daemon's handler is gone, in interpreter
        shutdown, and turn a clean exit into death by signal."""
        if self.running and not self._stop_requested:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)
            self._stop_requested = True

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """``request_stop`` and wait; SIGKILL if it does not exit within ``timeout``. Returns
        the exit status (0 for a clean stop), None if never started."""
        if self.proc is None:
            return None
        self.request_stop()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
        return self.proc.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_until_serving(self, serving: Callable[[], bool], address: str, timeout: float) -> None:
        """Poll ``serving`` until it says yes. The start error (``start_error_type``) when the
        process exits first, or, after killing it, when ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise self.start_error(f"exited with status {code} before serving")
            if serving():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise self.start_error(f"did not serve on {address} within {timeout}s")
            time.sleep(0.05)

    def start_error(self, what: str) -> DaemonStartError:
        return start_error_from_log(
            self.start_error_type, f"{self.kind} {self.name}", what, self.log_text(), self.log_path
        )


def run_command(
    args: Sequence[str], conf_env: Path | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (a command of this checkout, e.g. ``python -m failover.hactl ...``) to
    completion in ``child_environment(conf_env)``, output captured. A process still running
    after ``timeout`` gets SIGABRT first: Python's fault handler (enabled here) writes every
    thread's stack to its stderr, so the caller sees where it hung (status -6); SIGKILL
    follows if even that does not end it (status -9)."""
    env = child_environment(conf_env)
    env["PYTHONFAULTHANDLER"] = "1"
    proc = subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=CODE_ROOT,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=ABORT_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
