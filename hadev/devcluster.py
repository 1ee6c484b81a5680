"""The dev cluster (docs/architecture.md §1: ``hadev up`` and the README's demo): a real
ZooKeeper, JournalNodes and NameNodes with automatic failover (the elector inside each
``hanamenode run``), all real processes on free loopback ports, laid out in one directory::

    D/conf/ha-site.xml     the configuration every daemon and hafs read (client certificate)
    D/conf/admin-site.xml  the same for hactl and hanamenode format (admin certificate)
    D/conf/tls/            the CA and a certificate per daemon, client and admin (hadev.pki)
    D/conf/zk-auth         the ZooKeeper digest secret (ha.zookeeper.auth = @D/conf/zk-auth)
    D/conf/zk-reader       the clients' read-only ZooKeeper identity, for resolving the
                           NameNodes from it (dfs.client.failover.zookeeper.auth)
    D/conf/hadev.json      the shape it was made with (how many JournalNodes, NameNodes;
                           which journal: qjm, or zookeeper with no JournalNode)
    D/conf/ports.json      each loopback daemon's ports, taken again by the next start on D
    D/run/<name>.pid       zk.pid, jn1.pid, ..., nn1.pid, ... while they run
    D/run/<cmd>.<name>.request, .done   what another hadev command asks of ``hadev up``
    D/logs/<name>.log      zk.log, jn1.log, ..., nn1.log, ... (appended across runs)
    D/data/                zk/, journal/jn<i>/, nn<i>/: a later ``start`` on D reuses them

It composes the launchers that the tests and benchmarks use (``hadev.zookeeper.ZooKeeperServer``,
``hadev.namenodes.NameNodeProcessCluster`` with its ``JournalNodeProcessCluster``), and
formats on first use the way an operator would: ``hanamenode format`` on nn1,
``hanamenode bootstrap-standby`` on the others, ``hactl format-zk``::

    with DevCluster(path, session_timeout=1.0) as dev:   # started; one NameNode active
        first = dev.wait_active()
        dev.kill(first)                      # kill -9
        dev.wait_active(exclude=first)       # the other NameNode's elector takes over
        dev.restart(first)                   # back, as standby
    # leaving the block stops every process it started: NameNodes, JournalNodes, ZooKeeper

ZooKeeper grants session timeouts between 2 and 20 ticks, so the server's tickTime follows
the session timeout (a tenth of it, at most 100 ms).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from kazoo.security import make_digest_acl_credential

from conf import Settings, load_settings
from conf.keys import parse_zk_auth
from conf.rpc_failures import failure_cause
from conf.xmlconf import ConfigValue
from hadev.daemon import LOOPBACK, DaemonHost, free_ports
from hadev.journalnodes import JournalNodeProcess
from hadev.namenodes import NameNodeProcess, NameNodeProcessCluster, run_command
from hadev.zookeeper import MAIN_CLASS, ZooKeeperServer
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState

__all__ = [
    "DEFAULT_QUORUM_TIMEOUT",
    "DEFAULT_SESSION_TIMEOUT",
    "LOAD_POLICY",
    "DevCluster",
    "DevClusterError",
    "DevShape",
    "FailedCall",
    "MkdirLoad",
    "daemon_command",
    "dev_conf",
]

DEFAULT_SESSION_TIMEOUT = 1.0
"""Seconds. A crashed active is noticed when ZooKeeper expires its session, one session
timeout after the last ping it sent, so this sets the failover time (bench/failover.py: about
a second); on a loaded 2-core machine much shorter sessions expire by accident (a paused JVM
or interpreter)."""
DEFAULT_QUORUM_TIMEOUT = "10s"
"""Every QJM quorum wait of the dev cluster (Hadoop's are up to two minutes)."""
ZOOKEEPER_PORT = 2181
"""ZooKeeper's client port on a host of its own."""
START_TIMEOUT = 60.0
ACTIVE_TIMEOUT = 30.0
NAMESERVICE = "ns1"
ZK_USER = "hadev"
ZK_READER = "hafs-reader"
"""The clients' ZooKeeper identity: the HA znodes' ACL grants it ``r`` alone."""
"""The digest user of the dev cluster's ZooKeeper clients (``conf/zk-auth``)."""
JOURNAL_ID = "ns1"

JOURNALS = ("qjm", "zookeeper")
"""``hadev up --journal``: the QJM on JournalNodes, or the ZooKeeper journal."""

ZK_JOURNAL_PARENT = "/hanamenode/journal"
"""Where the ZooKeeper journal's znodes live: ``<parent>/<JOURNAL_ID>``."""


class DevClusterError(RuntimeError):
    """The dev cluster could not be started or used; the message says what to do."""


@dataclass(frozen=True, slots=True)
class DevShape:
    """What a dev cluster directory was made with (``D/conf/hadev.json``): a later start on
    the same directory must agree, since its data belongs to these nodes."""

    journalnodes: int
    namenodes: int
    observers: int = 0
    """Observer NameNodes after the ``namenodes`` (a file of before issue 14 has none)."""
    journal: str = "qjm"
    """The shared edit log: ``qjm`` (JournalNodes) or ``zookeeper`` (the ZooKeeper journal,
    docs/architecture.md §9.2; no JournalNode). A file of before issue 29 says none: qjm."""

    @classmethod
    def read(cls, path: Path) -> DevShape | None:
        try:
            fields = json.loads(path.read_text())
            return cls(
                int(fields["journalnodes"]),
                int(fields["namenodes"]),
                int(fields.get("observers", 0)),
                str(fields.get("journal", "qjm")),
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise DevClusterError(f"{path}: unreadable ({exc}); use a new --dir") from None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), sort_keys=True) + "\n")


def dev_conf(
    zk_connect: str, session_timeout: float, quorum_timeout: str = DEFAULT_QUORUM_TIMEOUT
) -> dict[str, ConfigValue]:
    """The dev cluster's settings on top of the launchers' addresses and directories:
    automatic failover on ``zk_connect``, and periods and timeouts of seconds rather than
    Hadoop's minutes (every QJM quorum wait is ``quorum_timeout``), so that a failure shows
    at once and a standby stays close behind."""
    return {
        "dfs.ha.automatic-failover.enabled": True,
        "ha.zookeeper.quorum": zk_connect,
        "ha.zookeeper.session-timeout.ms": round(session_timeout * 1000),
        "ha.health-monitor.check-interval.ms": 250,
        "ha.failover-controller.graceful-fence.rpc-timeout.ms": 1000,
        "ha.failover-controller.new-active.rpc-timeout.ms": 20000,
        "ha.failover-controller.cli-check.rpc-timeout.ms": 5000,
        # The standby also tails the open segment (what a majority of JournalNodes holds), so
        # it stays within about a tail period of the active; a roll every second keeps the
        # finalized part that a new active reads after recovery short as well.
        "dfs.ha.tail-edits.period": "100ms",
        "dfs.ha.tail-edits.in-progress": True,
        "dfs.ha.log-roll.period": "1s",
        "dfs.namenode.checkpoint.txns": 20000,
        "dfs.namenode.checkpoint.period": "10m",
        "dfs.qjournal.heartbeat.interval.ms": 250,
        # A JournalNode fetches the segments it missed every second, and one whose storage
        # was wiped (``hadev jn-wipe``) formats itself from its peers (HDFS-4025, HDFS-16690).
        "dfs.journalnode.sync.interval": "1s",
        "dfs.journalnode.enable.sync.format": True,
        **{
            f"dfs.qjournal.{op}.timeout.ms": quorum_timeout
            for op in (
                "start-segment",
                "prepare-recovery",
                "accept-recovery",
                "finalize-segment",
                "select-input-streams",
                "get-journal-state",
                "new-epoch",
                "write-txns",
                "format",
            )
        },
        # hafs rides through a failover: about 10 s of retries, 250 ms apart at most.
        "dfs.client.failover.max.attempts": 45,
        "dfs.client.failover.sleep.max.millis": 250,
        "dfs.client.rpc-timeout.ms": "15s",
    }


def daemon_command(name: str) -> tuple[str, ...]:
    """Arguments the command line of daemon ``name`` (zk, jn1, nn1, ...) holds, for
    ``hadev.zookeeper.stop_pid_file``: a pid file whose pid now runs something else is left
    alone."""
    if name == "zk":
        return (MAIN_CLASS,)
    if name.startswith("jn"):
        return ("journalnode", "run", name)
    return ("namenoded", "run", name)


class DevCluster:
    """ZooKeeper, ``journalnodes`` JournalNodes and ``namenodes`` NameNodes in ``base_dir``
    (layout in the module docstring); a context manager that starts and always stops them.

    ``quorum_timeout`` and ``session_timeout`` go to ``dev_conf``, ``extra_conf`` on top of
    it; ``log_format`` is the NameNodes' (``json`` for tools that read their events).
    ``hosts`` places daemons by name (``zk``, ``jn1``, ``nn2``...) on other hosts: an
    address and a command prefix (``hadev.journalnodes.DaemonHost``; ``hachaos`` gives each
    its own network namespace); the others run on loopback.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        journalnodes: int = 3,
        namenodes: int = 2,
        observers: int = 0,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        quorum_timeout: str = DEFAULT_QUORUM_TIMEOUT,
        extra_conf: Mapping[str, ConfigValue] | None = None,
        log_format: str = "console",
        hosts: Mapping[str, DaemonHost] | None = None,
        tls: bool = True,
        journal: str = "qjm",
    ) -> None:
        if journal not in JOURNALS:
            raise DevClusterError(f"journal {journal!r}: expected one of {', '.join(JOURNALS)}")
        if journal == "zookeeper":
            journalnodes = 0  # the ZooKeeper journal keeps the log: no JournalNode
        if namenodes < 2:
            raise DevClusterError(
                f"automatic failover needs two NameNodes or more, got {namenodes}"
            )
        if journal == "qjm" and journalnodes < 1:
            raise DevClusterError(f"the edit log needs a JournalNode or more, got {journalnodes}")
        if observers < 0:
            raise DevClusterError(f"observers must be 0 or more, got {observers}")
        self.base_dir = Path(base_dir).absolute()
        self.shape = DevShape(journalnodes, namenodes, observers, journal)
        self.session_timeout = session_timeout
        self.quorum_timeout = quorum_timeout
        self.extra_conf = dict(extra_conf or {})
        session_ms = round(session_timeout * 1000)
        tick_ms = max(10, min(100, session_ms // 10))
        if session_ms < 2 * tick_ms:
            raise DevClusterError(f"session timeout {session_timeout:g}s is too short")
        hosts = dict(hosts or {})
        self.hosts = hosts
        self.tls = tls
        zk_host = hosts.get("zk", LOOPBACK)
        self.zookeeper = ZooKeeperServer(
            self.data_dir / "zk",
            port=0 if zk_host.loopback else ZOOKEEPER_PORT,
            tick_time_ms=tick_ms,
            max_session_timeout_ms=max(20 * tick_ms, session_ms),
            pid_file=self.pid_file("zk"),
            log_path=self.log_dir / "zk.log",
            host=zk_host.address,
            command_prefix=zk_host.command_prefix,
        )
        self.nodes = NameNodeProcessCluster(
            self.data_dir,
            namenodes + observers,
            journalnodes,
            observers=observers,
            nameservice=NAMESERVICE,
            journal_id=JOURNAL_ID,
            log_format=log_format,
            conf_path=self.conf_path,
            admin_conf_path=self.admin_conf_path,
            log_dir=self.log_dir,
            hosts=hosts,
            tls=tls,
            tls_dir=self.tls_dir,
        )
        self.started = False
        self.stopped_by_request: set[str] = set()
        """Daemons stopped with ``control("stop", ...)``: not reported as having died."""
        self._take_remembered_ports()

    def __repr__(self) -> str:
        return f"DevCluster({self.base_dir})"

    # -- layout --------------------------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.base_dir / "conf" / "ha-site.xml"

    @property
    def admin_conf_path(self) -> Path:
        """The operator's file (``hactl``): the admin certificate instead of the client one."""
        return self.base_dir / "conf" / "admin-site.xml"

    @property
    def shape_path(self) -> Path:
        return self.base_dir / "conf" / "hadev.json"

    @property
    def ports_path(self) -> Path:
        return self.base_dir / "conf" / "ports.json"

    @property
    def run_dir(self) -> Path:
        return self.base_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.base_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    @property
    def namenode_ids(self) -> list[str]:
        return self.nodes.ids

    @property
    def journalnodes(self) -> list[JournalNodeProcess]:
        return list(self.nodes.journal)

    @property
    def names(self) -> list[str]:
        """Every daemon: ``zk``, ``jn1``..., ``nn1``..., in start order."""
        return ["zk", *(jn.jn_id for jn in self.nodes.journal), *self.nodes.ids]

    def journal_dir(self, jn_id: str) -> Path:
        """``current/`` of JournalNode ``jn_id``'s journal: its segment files."""
        index = [jn.jn_id for jn in self.nodes.journal].index(jn_id)
        return self.nodes.journal.journal_dir(index)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> DevCluster:
        """Start every daemon, formatting what is not formatted yet, and wait until one
        NameNode is active. A directory made with another shape is refused. On failure,
        whatever started is stopped again (DevClusterError, or the launcher's error, naming
        the daemon and its log)."""
        shape = DevShape.read(self.shape_path)
        if shape is not None and shape != self.shape:
            raise DevClusterError(
                f"{self.base_dir} holds a cluster of {shape.journalnodes} JournalNodes, "
                f"{shape.namenodes} NameNodes and {shape.observers} observers with the "
                f"{shape.journal} journal; start it with those, or use a new --dir"
            )
        reused = (self.zookeeper.data_dir / "version-2").is_dir()
        for directory in (self.run_dir, self.log_dir, self.data_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.shape.write(self.shape_path)
        self.started = True
        try:
            if self.zookeeper.port == 0:  # named in the configuration the JournalNodes read
                self.zookeeper.port = free_ports(1, self.zookeeper.host)[0]
            # Each start is a process that imports for a second or more: what does not need
            # the other runs alongside it. The JournalNodes need no ZooKeeper, and formatting
            # ZooKeeper (hactl) and the first name dir (hanamenode format) are independent;
            # only the NameNodes need both.
            with ThreadPoolExecutor(1, thread_name_prefix="hadev-start") as helper:
                zookeeper = helper.submit(self.zookeeper.start)
                self.nodes.extra_conf = self._node_conf()
                self.nodes.journal.start()
                zookeeper.result()
                self.nodes.extra_conf = self._node_conf()  # its port, if a retry changed it
                self.nodes.write_conf()
                self._write_pid_files()
                zk_formatted = helper.submit(self._format_zk, reused)
                # formats nn1 and bootstraps the others on first use
                self.nodes.start(timeout, before_namenodes=zk_formatted.result)
            self._write_pid_files()
            self._remember_ports()
            self.wait_active(ACTIVE_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return self

    # -- ports that stay across starts on one directory -------------------------------------

    def _ports(self) -> dict[str, list[int]]:
        """Each loopback daemon's ports now: ``zk`` [client], ``jnN`` and ``nnN`` [rpc, http]."""
        ports: dict[str, list[int]] = {}
        if self.hosts.get("zk", LOOPBACK).loopback and self.zookeeper.port:
            ports["zk"] = [self.zookeeper.port]
        for jn in self.nodes.journal:
            if jn.host.loopback:
                ports[jn.jn_id] = [jn.rpc_port, jn.http_port]
        for nn, proc in self.nodes.namenodes.items():
            if proc.host.loopback and proc.http_address is not None:
                ports[nn] = [_port(proc.rpc_address), _port(proc.http_address)]
        return ports

    def _remember_ports(self) -> None:
        """Keep the ports this start ended with (``D/conf/ports.json``), for the next one:
        bookmarked status pages and a shell's exported addresses stay good."""
        tmp = self.ports_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self._ports(), sort_keys=True) + "\n")
        tmp.replace(self.ports_path)

    def _take_remembered_ports(self) -> None:
        """Ask for the ports of the last start on this directory instead of new ones. A port
        another process holds now is replaced at start by a free one, as on a first start
        (the launchers' rule), and the new one is remembered."""
        try:
            remembered = json.loads(self.ports_path.read_text())
        except FileNotFoundError:
            return
        except ValueError as exc:
            raise DevClusterError(f"{self.ports_path}: unreadable ({exc}); remove it") from None
        # Only loopback daemons may move (``_ports`` lists them; ZooKeeper's port is 0, to be
        # chosen at start, until then).
        movable = set(self._ports())
        if self.hosts.get("zk", LOOPBACK).loopback:
            movable.add("zk")
        for name, ports in remembered.items():
            if name not in movable or not all(isinstance(p, int) for p in ports):
                continue
            if name == "zk":
                self.zookeeper.port = ports[0]
            elif name.startswith("jn"):
                jn = next(j for j in self.nodes.journal if j.jn_id == name)
                jn.rpc_port, jn.http_port = ports
            else:
                proc = self.nodes.namenodes[name]
                proc.rpc_address = f"{LOOPBACK.address}:{ports[0]}"
                proc.http_address = f"{LOOPBACK.address}:{ports[1]}"

    def _node_conf(self) -> dict[str, ConfigValue]:
        # The transport (mutual TLS with a certificate per daemon, client and admin, or
        # plaintext asked for) is the launcher's (NameNodeProcessCluster.transport_conf).
        return {
            **dev_conf(self.zookeeper.connect_string, self.session_timeout, self.quorum_timeout),
            **self.zk_acl_conf(),
            **self.journal_conf(),
            **self.extra_conf,
        }

    def journal_conf(self) -> dict[str, ConfigValue]:
        """With the ZooKeeper journal, its URI on the dev cluster's ZooKeeper (the QJM's
        comes from the JournalNodes' launcher)."""
        if self.shape.journal != "zookeeper":
            return {}
        uri = f"zookeeper://{self.zookeeper.connect_string}{ZK_JOURNAL_PARENT}/{JOURNAL_ID}"
        return {"dfs.namenode.shared.edits.dir": uri}

    @property
    def zk_auth_path(self) -> Path:
        return self.base_dir / "conf" / "zk-auth"

    @property
    def zk_reader_path(self) -> Path:
        return self.base_dir / "conf" / "zk-reader"

    def zk_acl_conf(self) -> dict[str, ConfigValue]:
        """Digest authentication of every ZooKeeper client of the cluster and the ACL of the
        HA znodes (``ha.zookeeper.auth``, ``ha.zookeeper.acl``; docs/operations.md §9.3): a
        secret made on first use in ``conf/zk-auth`` (mode 0600, read through ``@``
        indirection, so the XML files hold no password), the ACL granting every permission
        to its digest identity and ``r`` to the clients' (``conf/zk-reader``, given to them
        as ``dfs.client.failover.zookeeper.auth``, docs/operations.md §3.5)."""
        acl = []
        for path, user, perms in (
            (self.zk_auth_path, ZK_USER, "rwcda"), (self.zk_reader_path, ZK_READER, "r")
        ):
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(f"digest:{user}:{secrets.token_urlsafe(24)}\n")
            ((_, credential),) = parse_zk_auth(f"@{path}")
            name, _, password = credential.partition(":")
            acl.append(f"digest:{make_digest_acl_credential(name, password)}:{perms}")
        return {
            "ha.zookeeper.auth": f"@{self.zk_auth_path}",
            "ha.zookeeper.acl": ",".join(acl),
            "dfs.client.failover.zookeeper.auth": f"@{self.zk_reader_path}",
        }

    @property
    def tls_dir(self) -> Path:
        return self.base_dir / "conf" / "tls"

    def _format_zk(self, reused: bool) -> None:
        result = self.hactl("format-zk", "--non-interactive")
        if result.returncode == 0 or (reused and result.returncode == 2):
            return  # 2: the znodes exist, from an earlier run on this directory
        raise DevClusterError(
            f"hactl format-zk exited with {result.returncode}: {result.stderr.strip()}"
        )

    def _write_pid_files(self) -> None:
        for name in self.names:
            process = self.process(name)
            if process.running:
                self.pid_file(name).write_text(f"{process.pid}\n")

    def stop(self) -> None:
        """Stop every process this object started (NameNodes, then JournalNodes, then
        ZooKeeper: SIGTERM, SIGKILL after a timeout) and remove their pid files."""
        if not self.started:
            return
        try:
            self.nodes.stop()
        finally:
            self.zookeeper.stop()
            for name in self.names:
                self.pid_file(name).unlink(missing_ok=True)
            self.started = False

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- one daemon ----------------------------------------------------------------------------

    def process(self, name: str) -> ZooKeeperServer | JournalNodeProcess | NameNodeProcess:
        """The launcher of daemon ``name`` (``zk``, ``jn2``, ``nn1``...)."""
        if name == "zk":
            return self.zookeeper
        for jn in self.nodes.journal:
            if jn.jn_id == name:
                return jn
        if name in self.nodes.namenodes:
            return self.nodes.namenodes[name]
        raise KeyError(f"no daemon {name!r} (known: {', '.join(self.names)})")

    def namenode(self, nn_id: str) -> NameNodeProcess:
        return self.nodes.namenodes[nn_id]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to daemon ``name``: SIGKILL (reaped before this returns), SIGSTOP,
        SIGCONT, SIGTERM."""
        process = self.process(name)
        if isinstance(process, ZooKeeperServer):
            if sig not in (signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL):
                raise DevClusterError(
                    "ZooKeeper takes SIGSTOP, SIGCONT and SIGKILL here; stop() ends it"
                )
            if sig == signal.SIGKILL:
                process.kill()
            else:
                (process.pause if sig == signal.SIGSTOP else process.resume)()
            return
        process.kill(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.pid_file(name).unlink(missing_ok=True)

    def restart(self, name: str, timeout: float = START_TIMEOUT) -> None:
        """Stop daemon ``name`` if it runs, start it again (same ports, same data)."""
        process = self.process(name)
        process.restart(timeout)
        self.pid_file(name).write_text(f"{process.pid}\n")

    def wipe_journalnode(self, jn_id: str, timeout: float = START_TIMEOUT) -> Path:
        """Stop JournalNode ``jn_id`` (SIGTERM), empty its storage directory, and start it
        again on the same ports: a disk replaced under a JournalNode. It formats itself from
        its peers and syncs (``dfs.journalnode.enable.sync.format``, on in ``dev_conf``).
        Returns the emptied directory."""
        process = next((jn for jn in self.journalnodes if jn.jn_id == jn_id), None)
        if process is None:
            known = ", ".join(jn.jn_id for jn in self.journalnodes)
            raise DevClusterError(f"{jn_id!r} is not a JournalNode (known: {known})")
        process.stop()
        self.pid_file(jn_id).unlink(missing_ok=True)
        storage = process.edits_dir
        if storage.exists():
            for child in storage.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        process.start(timeout, fresh_ports=False)
        self.pid_file(jn_id).write_text(f"{process.pid}\n")
        return storage

    # -- requests from other hadev commands ------------------------------------------------

    def request_path(self, command: str, target: str) -> Path:
        """Where ``hadev <command> <target>`` asks the process that runs this cluster
        (``hadev up``) to act: a file in ``run/``, answered by a ``.done`` file beside it."""
        return self.run_dir / f"{command}.{target}.request"

    def control(self, command: str, name: str, timeout: float = START_TIMEOUT) -> str:
        """``start``, ``stop`` or ``restart`` daemon ``name`` (``zk``, ``jn1``, ``nn2``...)
        on its ports and data, for ``hadev start|stop|restart NAME``: what was done, in a few
        words. DevClusterError when it cannot be done (an unknown name, a ``start`` of a
        daemon that runs, a ``stop`` of one that does not)."""
        if name not in self.names:
            raise DevClusterError(f"no daemon {name!r} (known: {', '.join(self.names)})")
        process = self.process(name)
        if command == "stop":
            if not process.running:
                raise DevClusterError(f"{name} is not running")
            pid = process.pid
            self.stopped_by_request.add(name)
            process.stop()
            self.pid_file(name).unlink(missing_ok=True)
            return f"{name} stopped (pid {pid})"
        if command not in ("start", "restart"):
            raise DevClusterError(f"unknown command {command!r} (start, stop, restart)")
        if command == "start" and process.running:
            raise DevClusterError(f"{name} already runs (pid {process.pid})")
        self.restart(name, timeout)  # a process that is not running is only started
        self.stopped_by_request.discard(name)
        return f"{name} {command}ed (pid {process.pid})"

    def serve_requests(self) -> list[str]:
        """Carry out what other ``hadev`` commands asked of the process that owns these
        daemons (``jn-wipe``, ``start``, ``stop``, ``restart``), answering each with
        ``<request>.done`` ("ok: ..." or "error: ..."). Returns one line per request, for
        ``hadev up`` to print."""
        done: list[str] = []
        for request in sorted(self.run_dir.glob("*.request")):
            command, _, target = request.name.removesuffix(".request").partition(".")
            try:
                if command == "jn-wipe":
                    storage = self.wipe_journalnode(target)
                    answer = f"ok: {target} restarted on an empty {storage}"
                elif command in ("start", "stop", "restart"):
                    answer = f"ok: {self.control(command, target)}"
                else:
                    raise DevClusterError(f"unknown request {command!r}")
            except (DevClusterError, RuntimeError, OSError) as exc:
                answer = f"error: {exc}"
            answer_path = request.with_suffix(".done")
            tmp = answer_path.with_suffix(".done.tmp")
            tmp.write_text(answer + "\n")
            tmp.replace(answer_path)
            request.unlink(missing_ok=True)
            done.append(f"{command} {target}: {answer}")
        return done

    # -- HA state ------------------------------------------------------------------------------

    def states(self, timeout: float = 2.0) -> dict[str, str]:
        """Each NameNode's HA state as it reports it, or why it does not answer."""
        out: dict[str, str] = {}
        for nn_id, proc in self.nodes.namenodes.items():
            if not proc.running:
                out[nn_id] = "not running"
                continue
            try:
                out[nn_id] = proc.state(timeout).value
            except NamenodeError as exc:
                # "no answer: connection refused", "no answer: timed out (...)"
                out[nn_id] = f"no answer: {failure_cause(exc, tls=self.tls) or exc}"
        return out

    def active(self, exclude: Sequence[str] = (), timeout: float = 1.0) -> str | None:
        """The NameNode reporting ACTIVE (not one of ``exclude``), or None. Each NameNode
        has ``timeout`` seconds to answer (asked again while it cannot be reached:
        ``get_service_status``); one that does not is passed over, so a caller that
        asserts on the answer gives it longer (on a loaded machine a status call can take
        over a second, and a slow answer does not mean "not active")."""
        for nn_id, proc in self.nodes.namenodes.items():
            if nn_id in exclude or not proc.running:
                continue
            try:
                if proc.state(timeout) is HAState.ACTIVE:
                    return nn_id
            except NamenodeError:
                continue
        return None

    def wait_active(
        self, timeout: float = ACTIVE_TIMEOUT, exclude: Sequence[str] | str = ()
    ) -> str:
        """Wait until a NameNode not in ``exclude`` reports ACTIVE; its id.
        DevClusterError with every NameNode's state when ``timeout`` passes first."""
        excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude)
        deadline = time.monotonic() + timeout
        while True:
            found = self.active(excluded)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"no NameNode (other than {', '.join(excluded) or 'none'}) became active "
                    f"within {timeout:g}s: {self.states()}"
                )
            time.sleep(0.02)

    def wait_state(self, nn_id: str, state: HAState, timeout: float = ACTIVE_TIMEOUT) -> None:
        """Wait until ``nn_id`` reports ``state``; DevClusterError when ``timeout`` passes."""
        proc = self.nodes.namenodes[nn_id]
        deadline = time.monotonic() + timeout
        while True:
            try:
                if proc.state(1.0) is state:
                    return
            except NamenodeError:
                pass
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"{nn_id} did not become {state.value} within {timeout:g}s: {self.states()}"
                )
            time.sleep(0.02)

    # -- clients -------------------------------------------------------------------------------

    def settings(self) -> Settings:
        """The users' settings (``hafs``): a client built from them presents the client
        certificate."""
        return load_settings(self.conf_path)

    def admin_settings(self) -> Settings:
        """The operator's settings (``hactl``): the admin certificate."""
        return load_settings(self.admin_conf_path)

    def client(self, policy: RetryPolicy | None = None) -> HaFsClient:
        """An ``HaFsClient`` on every NameNode (``policy``: default from the configuration)."""
        return HaFsClient(self.settings(), policy=policy)

    def hactl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """``hactl --conf <admin conf> <args>`` as a process (``python -m failover.hactl``),
        as the operator: the admin certificate."""
        return run_command(
            [sys.executable, "-m", "failover.hactl", "--conf", str(self.admin_conf_path), *args],
            timeout=timeout,
        )


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


# -- a write load that remembers what was acknowledged ----------------------------------------

LOAD_POLICY = RetryPolicy(max_attempts=400, sleep_base=0.01, sleep_max=0.05, rpc_timeout=5.0)
"""Retries of a load client: about 20 s of failovers, 50 ms apart at most, so that a client
rides through a failover and sees the new active within a few tens of milliseconds."""


@dataclass(frozen=True, slots=True)
class FailedCall:
    """A mkdir that raised: its outcome is unknown (it may or may not have been applied)."""

    at: float
    path: str
    error: str


class MkdirLoad:
    """``writers`` threads, each with its own ``HaFsClient``, making fresh directories
    ``<root>/w<i>/d<n>`` in a loop, pausing ``pause`` seconds between calls, and recording
    every acknowledged path (and every call that raised)::

        with MkdirLoad(dev.settings(), "/load", writers=4) as load:
            load.wait_acks(100, timeout=10)
            dev.kill(dev.wait_active())
            load.wait_acks(100, timeout=10)      # acknowledged by the new active
        assert not load.missing(client)          # every acknowledged directory is there
    """

    def __init__(
        self,
        settings: Settings,
        root: str = "/load",
        *,
        writers: int = 4,
        pause: float = 0.0,
        policy: RetryPolicy = LOAD_POLICY,
    ) -> None:
        self.settings = settings
        self.root = root.rstrip("/")
        self.writers = writers
        self.pause = pause
        self.policy = policy
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.acked: list[list[str]] = [[] for _ in range(writers)]
        self.ack_times: list[float] = []
        self.failures: list[FailedCall] = []

    def writer_dir(self, index: int) -> str:
        return f"{self.root}/w{index}"

    @property
    def ack_count(self) -> int:
        with self._cond:
            return len(self.ack_times)

    def acked_paths(self) -> list[str]:
        with self._cond:
            return [path for paths in self.acked for path in paths]

    def acks_since(self, when: float) -> int:
        """Acknowledgements received after ``time.time()`` was ``when``."""
        with self._cond:
            return sum(1 for t in self.ack_times if t > when)

    def first_ack_after(self, when: float) -> float | None:
        """``time.time()`` of the first acknowledgement after ``when``, None if none yet."""
        with self._cond:
            return min((t for t in self.ack_times if t > when), default=None)

    def start(self) -> MkdirLoad:
        """Create the writers' directories, then start the threads."""
        with HaFsClient(self.settings, policy=self.policy) as fs:
            for index in range(self.writers):
                fs.mkdirs(self.writer_dir(index), parents=True)
        for index in range(self.writers):
            thread = threading.Thread(
                target=self._run, args=(index,), name=f"mkdir-load-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def _run(self, index: int) -> None:
        base = self.writer_dir(index)
        with HaFsClient(self.settings, policy=self.policy) as fs:
            n = len(self.acked[index])
            while not self._stop.is_set():
                path = f"{base}/d{n:07d}"
                n += 1
                try:
                    fs.mkdirs(path)
                except Exception as exc:
                    with self._cond:
                        self.failures.append(
                            FailedCall(time.time(), path, f"{type(exc).__name__}: {exc}")
                        )
                else:
                    with self._cond:
                        self.acked[index].append(path)
                        self.ack_times.append(time.time())
                        self._cond.notify_all()
                if self.pause:
                    self._stop.wait(self.pause)

    def wait_acks(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` more acknowledgements than now arrive; False on timeout."""
        with self._cond:
            target = len(self.ack_times) + count
            return self._cond.wait_for(lambda: len(self.ack_times) >= target, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the threads, each after its call in flight (``timeout`` for all of them)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        busy = [t.name for t in self._threads if t.is_alive()]
        if busy:
            raise DevClusterError(f"load threads still busy after {timeout:g}s: {busy}")

    def missing(self, fs: HaFsClient) -> list[str]:
        """Acknowledged directories that the namespace (as ``fs`` reads it) lacks."""
        missing: list[str] = []
        for index in range(self.writers):
            with self._cond:  # before listing: what is acknowledged later may not be listed
                acked = list(self.acked[index])
            present = {status.path for status in fs.list(self.writer_dir(index))}
            missing += [path for path in acked if path not in present]
        return missing

    def __enter__(self) -> MkdirLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
