"""A real Apache ZooKeeper server on loopback, for the dev cluster and the tests
(docs/operations.md §8.1). Never a fake: the Java server from Debian's ``zookeeper`` package
(``/usr/share/java/zookeeper.jar``, with ``slf4j-simple`` as its log binding) or from
``$ZOOKEEPER_HOME/lib/*.jar``, run standalone with its own data directory::

    with ZooKeeperServer(tmp_path / "zk", tick_time_ms=100) as zk:   # sessions 0.2 s .. 2 s
        client = KazooClient(zk.connect_string, timeout=2.0)
        zk.pause()      # SIGSTOP: every session stalls, and expires after its timeout
        zk.resume()     # SIGCONT
    # leaving the block stops it by pid: SIGTERM, then SIGKILL

ZooKeeper grants session timeouts between 2 and 20 ticks (``minSessionTimeout`` and
``maxSessionTimeout`` default to that), so short session timeouts need a short tickTime.
The config binds the client port to 127.0.0.1 only, turns off the AdminServer (which would
take port 8080) and allows the four-letter words ``ruok``, ``srvr`` and ``mntr``; ``start``
returns once ``ruok`` answers ``imok`` and ``srvr`` reports the server's mode (about half a
second on a warm machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import structlog

from hadev.daemon import free_ports
from zk.errors import ZooKeeperNotInstalledError, ZooKeeperStartError

__all__ = [
    "DEBIAN_JAR",
    "MAIN_CLASS",
    "ZooKeeperServer",
    "find_java",
    "four_letter_word",
    "runs",
    "stop_pid_file",
    "terminate",
    "zookeeper_classpath",
]

log = structlog.get_logger(__name__)

DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_LOG_BINDING = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
HOME_ENV = "ZOOKEEPER_HOME"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
_INSTALL_HINT = (
    "install Debian's package (apt-get install -y zookeeper default-jre-headless; "
    "not zookeeperd, which starts a system service) or set ZOOKEEPER_HOME to an "
    "Apache ZooKeeper release"
)


def find_java(java: str | None = None) -> str:
    """The ``java`` to run: ``java`` if given, else ``$JAVA_HOME/bin/java``, else the one on
    PATH; ZooKeeperNotInstalledError naming the package to install otherwise."""
    candidates = [java] if java else []
    if not java and os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if not java:
        candidates.append("java")
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    raise ZooKeeperNotInstalledError(
        f"cannot run ZooKeeper: no Java runtime ({' or '.join(candidates)} not found); "
        "install one (apt-get install -y default-jre-headless)"
    )


def zookeeper_classpath(
    zookeeper_home: str | os.PathLike[str] | None = None, debian_jar: Path = DEBIAN_JAR
) -> str:
    """The classpath of the server: ``zookeeper_home`` (default ``$ZOOKEEPER_HOME``) with its
    ``lib/*.jar`` and top-level jars, else Debian's jar plus ``slf4j-simple``.
    ZooKeeperNotInstalledError naming what to install when neither is there."""
    home = zookeeper_home if zookeeper_home is not None else os.environ.get(HOME_ENV)
    if home:
        root = Path(home)
        jars = sorted(root.glob("lib/*.jar")) + sorted(root.glob("*.jar"))
        if not any(j.name.startswith("zookeeper") for j in jars):
            raise ZooKeeperNotInstalledError(
                f"cannot run ZooKeeper: {HOME_ENV}={root} holds no zookeeper*.jar "
                f"(in lib/ or at the top); {_INSTALL_HINT}"
            )
        return os.pathsep.join(str(j) for j in jars)
    if not debian_jar.is_file():
        raise ZooKeeperNotInstalledError(
            f"cannot run ZooKeeper: {debian_jar} is missing and {HOME_ENV} is not set; "
            f"{_INSTALL_HINT}"
        )
    parts = [str(debian_jar)]
    binding = debian_jar.parent / DEBIAN_LOG_BINDING.name
    if binding.is_file():
        parts.append(str(binding))
    return os.pathsep.join(parts)


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ``mntr``) and return the answer;
    OSError when the server cannot be reached in ``timeout``."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]  # outside the ephemeral range: see daemon_port_range


def runs(pid: int, command: Sequence[str] = (MAIN_CLASS,)) -> bool:
    """Whether process ``pid`` is alive (not a zombie) and every string of ``command`` is one
    of the arguments of its command line (default: a ZooKeeper server)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(args[0]) and all(word.encode() in args for word in command)


def terminate(pid: int, timeout: float, command: Sequence[str]) -> None:
    """SIGCONT (it may be paused) and SIGTERM, then SIGKILL after ``timeout``; for a process
    that is not our child (a pid file)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not runs(pid, command):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def stop_pid_file(
    pid_file: Path, timeout: float = STOP_TIMEOUT, *, command: Sequence[str] = (MAIN_CLASS,)
) -> bool:
    """Stop the process whose pid ``pid_file`` holds (``hadev down``), by pid: SIGTERM, then
    SIGKILL after ``timeout``. ``command`` says what it must be running (``runs``; default a
    ZooKeeper server; the dev cluster passes its daemons' arguments too). False when the file
    is missing or its pid no longer runs that (the pid may have been reused), True when one
    was stopped. The file is removed."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    stopped = False
    if runs(pid, command):
        terminate(pid, timeout, command)
        stopped = True
    pid_file.unlink(missing_ok=True)
    return stopped


class ZooKeeperServer:
    """One standalone ZooKeeper server, a child process; a context manager that stops it.

    ``base_dir`` holds ``zoo.cfg``, ``data/`` and ``zookeeper.log`` (default: a temporary
    directory, removed on ``stop``; ``log_path`` puts the log elsewhere). ``port`` 0 picks a
    free one (and another if it is taken before the server binds it). ``pid_file``, if given,
    holds the pid while it runs. ``host`` is the address it binds (``port`` must then be
    given unless it is loopback); ``command_prefix`` runs it there (``ip netns exec NS``).
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int | None = None,
        pid_file: str | os.PathLike[str] | None = None,
        java: str | None = None,
        classpath: str | None = None,
        heap_mb: int = 256,
        log_path: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(
            tempfile.mkdtemp(prefix="zookeeper-")
        )
        self.host = host
        self.command_prefix = tuple(command_prefix)
        self._fixed_port = port
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms or 20 * tick_time_ms
        self.pid_file = Path(pid_file) if pid_file is not None else None
        self._java = java
        self._classpath = classpath
        self.heap_mb = heap_mb
        self._log_path = Path(log_path) if log_path is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log = log.bind(zk_dir=str(self.base_dir))

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.running and self.proc else "not running"
        return f"ZooKeeperServer({self.connect_string}, {state})"

    # -- what it is ----------------------------------------------------------------------------

    @property
    def connect_string(self) -> str:
        """``<host>:<port>``: kazoo's ``hosts`` and ``ha.zookeeper.quorum``."""
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.base_dir / "zoo.cfg"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's stdout and stderr, every start appended."""
        return self._log_path or self.base_dir / "zookeeper.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("ZooKeeper was never started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        """Started and not exited (a paused server is running)."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        return four_letter_word(self.host, self.port, word, timeout)

    def is_serving(self, timeout: float = 1.0) -> bool:
        """Whether ``ruok`` answers ``imok`` and ``srvr`` names a mode within ``timeout``
        (``ruok`` alone answers ``imok`` a moment before the server serves requests)."""
        try:
            return (
                self.four_letter_word("ruok", timeout) == "imok"
                and "Mode: " in self.four_letter_word("srvr", timeout)
            )
        except OSError:
            return False

    # -- lifecycle -----------------------------------------------------------------------------

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
            "autopurge.purgeInterval=0",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def command(self) -> list[str]:
        """The java command line (ZooKeeperNotInstalledError when Java or the jars lack)."""
        java = find_java(self._java)
        classpath = self._classpath or zookeeper_classpath()
        return [
            java,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]

    def start(self, timeout: float = START_TIMEOUT, attempts: int = 5) -> ZooKeeperServer:
        """Start it and wait until ``ruok`` answers ``imok``. With ``port`` 0, a port another
        process took meanwhile is replaced by a fresh one (up to ``attempts`` times)."""
        if self.running:
            raise RuntimeError(f"ZooKeeper is already running (pid {self.pid})")
        self.command()  # Java and the jars, checked before a port or a directory is taken
        for attempt in range(1, attempts + 1):
            if self._fixed_port == 0 and (self.port == 0 or attempt > 1):
                self.port = _free_port(self.host)
            try:
                self._spawn()
                self._wait_serving(timeout)
                return self
            except ZooKeeperStartError as exc:
                if not exc.port_in_use or self._fixed_port != 0 or attempt == attempts:
                    raise
                self._log.warning("ZooKeeper port taken, trying another", port=self.port)
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.starts += 1
        with open(self.log_path, "ab") as out:
            out.write(f"--- start {self.starts} on port {self.port} ---\n".encode())
            out.flush()
            # Its own session: a Ctrl-C meant for the dev cluster's foreground process does
            # not reach the server, which is stopped by pid like every other daemon.
            self.proc = subprocess.Popen(
                [*self.command_prefix, *self.command()],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                start_new_session=True,
            )
        if self.pid_file is not None:
            self.pid_file.parent.mkdir(parents=True, exist_ok=True)
            self.pid_file.write_text(f"{self.proc.pid}\n")
        self._log.info("zookeeper starting", pid=self.proc.pid, port=self.port)

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise self._start_error(f"exited with status {code} before serving")
            if self.is_serving(timeout=0.5):
                self._log.info(
                    "zookeeper serving",
                    pid=self.pid,
                    connect=self.connect_string,
                    tick_time_ms=self.tick_time_ms,
                    seconds=round(time.monotonic() - started, 2),
                )
                return
            if time.monotonic() > deadline:
                error = self._start_error(f"did not answer ruok within {timeout}s")
                self.stop()
                raise error
            time.sleep(0.05)

    def _start_error(self, what: str) -> ZooKeeperStartError:
        output = self.log_text()[-4000:]
        lines = output.strip().splitlines()
        last = lines[-1] if lines else "no output"
        return ZooKeeperStartError(
            f"ZooKeeper on {self.connect_string} {what}: {last} (log: {self.log_path})", output
        )

    def pause(self) -> None:
        """SIGSTOP: the server stops answering; clients lose their connection and, after the
        session timeout, their sessions (once it runs again)."""
        if self.running:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.running:
            os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, a crash: reaped before this returns; ``restart`` brings it back on the
        same port and data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused), SIGKILL if it has not exited within
        ``timeout``. Returns the exit status (None if never started). Removes the pid file,
        and the base directory if this object made it."""
        code: int | None = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._log.warning("zookeeper ignored SIGTERM, killing it", pid=self.pid)
                    self.proc.kill()
                    self.proc.wait(STOP_TIMEOUT)
            code = self.proc.returncode
            self._log.info("zookeeper stopped", pid=self.pid, status=code)
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        return code

    def restart(self, timeout: float = START_TIMEOUT) -> ZooKeeperServer:
        """Stop and start on the same port and data (sessions survive if it is quick)."""
        own, self._own_dir = self._own_dir, False
        try:
            self.stop()
        finally:
            self._own_dir = own
        fixed, self._fixed_port = self._fixed_port, self.port
        try:
            return self.start(timeout)
        finally:
            self._fixed_port = fixed

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
