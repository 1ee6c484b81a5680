"""Real JournalNode processes for tests and benchmarks: start, wait until serving, stop, kill.

A ``JournalNodeProcess`` is ``python -m journalnode run --conf C --id jnX`` with a generated
XML configuration (``conf.write_xml``) on free loopback ports, its stdout and stderr appended
to a log file. Nothing here is a pytest fixture, so ``bench/`` uses it too::

    with start_journalnode(tmp_path, "jn1", probe_journal="ns1") as jn:
        channel = GrpcJournalChannel(jn.address)
        ...
        jn.kill()            # SIGKILL, as a crash
        jn.restart()         # same directory, same ports (fresh ones if they were taken)
        assert jn.terminate() == 0   # SIGTERM: a clean stop exits 0

``run_journalnode`` runs the command line for the cases that must fail at start-up and
returns its exit status and output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from conf import CONF_ENV, write_xml
from conf.xmlconf import ConfigValue
from journalnode.errors import JournalError, JournalUnavailableError
from qjm.channel import GrpcJournalChannel

__all__ = [
    "REPO_ROOT",
    "JournalNodeProcess",
    "JournalNodeStartError",
    "free_ports",
    "journalnode_command",
    "journalnode_config",
    "run_journalnode",
    "start_journalnode",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
# What the CLI prints when its RPC or HTTP port is taken (conf.rpc.PortInUseError).
_PORT_IN_USE = "address already in use"


class JournalNodeStartError(RuntimeError):
    """The process exited, or did not serve, within the start timeout; carries its output."""


def free_ports(n: int = 1, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that were free a moment ago (bound to port 0, then closed).

    Another process may take one before the JournalNode binds it; ``start_journalnode``
    retries with fresh ports when that happens.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def journalnode_command(jn_id: str, conf: Path | None = None) -> list[str]:
    """``python -m journalnode run [--conf C] --id jnX`` with this interpreter."""
    args = [sys.executable, "-m", "journalnode", "run"]
    if conf is not None:
        args += ["--conf", str(conf)]
    return [*args, "--id", jn_id]


def journalnode_config(
    rpc_port: int, http_port: int, edits_dir: Path, extra: Mapping[str, ConfigValue] | None = None
) -> dict[str, ConfigValue]:
    """The properties of a one-JournalNode configuration on 127.0.0.1."""
    return {
        "dfs.journalnode.rpc-address": f"127.0.0.1:{rpc_port}",
        "dfs.journalnode.http-address": f"127.0.0.1:{http_port}",
        "dfs.journalnode.edits.dir": edits_dir,
        **(extra or {}),
    }


def _environment(conf_env: Path | None) -> dict[str, str]:
    """The caller's environment without its HANAMENODE_CONF (unless one is given) and with the
    checkout first on PYTHONPATH, so the child runs this tree's code."""
    env = {k: v for k, v in os.environ.items() if k != CONF_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    if conf_env is not None:
        env[CONF_ENV] = str(conf_env)
    return env


@dataclass
class JournalNodeProcess:
    """One JournalNode daemon in a child process; a context manager that always stops it."""

    jn_id: str
    workdir: Path
    edits_dir: Path
    rpc_port: int
    http_port: int
    probe_journal: str = "probe"
    extra_conf: Mapping[str, ConfigValue] = field(default_factory=dict)
    conf_via_env: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    starts: int = 0

    @property
    def conf_path(self) -> Path:
        return self.workdir / f"{self.jn_id}-site.xml"

    @property
    def log_path(self) -> Path:
        """stdout and stderr of every start, appended."""
        return self.workdir / f"{self.jn_id}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.rpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"journalnode {self.jn_id} is not running")
        return self.proc.pid

    def write_conf(self) -> Path:
        props = journalnode_config(self.rpc_port, self.http_port, self.edits_dir, self.extra_conf)
        return write_xml(props, self.conf_path)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------------ lifecycle

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to serve."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"journalnode {self.jn_id} is already running (pid {self.pid})")
        self.write_conf()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                journalnode_command(self.jn_id, None if self.conf_via_env else self.conf_path),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                env=_environment(self.conf_path if self.conf_via_env else None),
            )
        return self.proc

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        """Block until an IsFormatted RPC gets an answer; JournalNodeStartError on exit or timeout.

        A fresh channel per attempt: a channel that failed to connect would wait out its
        reconnect backoff instead of trying again at once.
        """
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise JournalNodeStartError(
                    f"journalnode {self.jn_id} exited with status {code} before serving:\n"
                    + self.log_text()[-4000:]
                )
            channel = GrpcJournalChannel(self.address)
            try:
                channel.is_formatted(self.probe_journal, timeout=0.5)
                return
            except JournalUnavailableError:
                pass  # not listening yet
            except JournalError:
                return  # an answer, even a refusal, means the servicer runs
            finally:
                channel.close()
            if time.monotonic() > deadline:
                self.kill()
                raise JournalNodeStartError(
                    f"journalnode {self.jn_id} did not serve on {self.address} within "
                    f"{timeout}s:\n" + self.log_text()[-4000:]
                )
            time.sleep(0.05)

    def start(self, timeout: float = START_TIMEOUT, attempts: int = 5) -> JournalNodeProcess:
        """Spawn and wait until serving; on a port taken meanwhile, retry with fresh ports."""
        for attempt in range(1, attempts + 1):
            self.spawn()
            try:
                self.wait_serving(timeout)
                return self
            except JournalNodeStartError as exc:
                if _PORT_IN_USE not in str(exc) or attempt == attempts:
                    raise
            self.rpc_port, self.http_port = free_ports(2)
        raise AssertionError("unreachable")

    def restart(self, timeout: float = START_TIMEOUT) -> JournalNodeProcess:
        """Start again on the same directory and (if still free) the same ports."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"journalnode {self.jn_id} is still running; stop it first")
        return self.start(timeout)

    def kill(self) -> None:
        """SIGKILL and reap: a crash, with nothing flushed or closed by the process itself."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(STOP_TIMEOUT)

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        if self.proc is None:
            raise RuntimeError(f"journalnode {self.jn_id} was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        return self.proc.returncode

    def __enter__(self) -> JournalNodeProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None:
            self.terminate()


def start_journalnode(
    workdir: Path,
    jn_id: str = "jn1",
    *,
    edits_dir: Path | None = None,
    probe_journal: str = "probe",
    extra_conf: Mapping[str, ConfigValue] | None = None,
    conf_via_env: bool = False,
    timeout: float = START_TIMEOUT,
) -> JournalNodeProcess:
    """A serving JournalNode process with its files under ``workdir`` (storage in
    ``workdir/<jn_id>-edits`` unless ``edits_dir`` is given), on free loopback ports.

    ``probe_journal`` is the journal id asked IsFormatted while waiting: the JournalNode
    creates a journal's directory on first use, so pass the journal the caller will use.
    """
    rpc_port, http_port = free_ports(2)
    jn = JournalNodeProcess(
        jn_id=jn_id,
        workdir=Path(workdir),
        edits_dir=edits_dir if edits_dir is not None else Path(workdir) / f"{jn_id}-edits",
        rpc_port=rpc_port,
        http_port=http_port,
        probe_journal=probe_journal,
        extra_conf=dict(extra_conf or {}),
        conf_via_env=conf_via_env,
    )
    try:
        return jn.start(timeout)
    except BaseException:
        if jn.proc is not None:
            jn.terminate()
        raise


def run_journalnode(
    args: Sequence[str],
    *,
    conf_env: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m journalnode <args>`` to completion (start-up failures); output captured.

    A process still running after ``timeout`` is killed and reported as a test failure by
    the caller's assertion on its exit status (-9).
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "journalnode", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=_environment(conf_env),
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
