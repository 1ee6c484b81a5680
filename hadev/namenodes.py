"""NameNode daemons as child processes: the launcher of the dev cluster, benchmarks and
process tests (docs/architecture.md §1: ``hanamenode run --conf C --id nn1``; §2.3:
``bench/`` and ``tests/`` run real NameNodes, and nothing imports ``tests/``).

A ``NameNodeProcess`` is ``python -m namenoded run --conf C --id nnX`` (``hanamenode run``)
run by this interpreter with this checkout first on PYTHONPATH (``hadev.journalnodes``'s
``child_environment``), its output appended to ``<workdir>/<id>.log``; ``start`` returns
once the NameNode reports STANDBY or ACTIVE over HAServiceProtocol. A
``NameNodeProcessCluster`` is a ``JournalNodeProcessCluster`` plus NameNode processes
``nn1..nnN`` sharing one generated configuration, which ``hafs`` and benchmarks load too::

    with NameNodeProcessCluster(tmp_path, extra_conf={"dfs.ha.tail-edits.period": "0.1"}) as c:
        c.transition_to_active("nn1")        # format, bootstrap-standby and run were done
        run_hafs(c.conf_path, "mkdir", "-p", "/a/b")
        c.transition_to_standby("nn1")
        c.transition_to_active("nn2")
        c.namenodes["nn1"].kill()            # SIGKILL; .restart() keeps its ports and dirs
    # leaving the block stops every process it started: NameNodes first, then JournalNodes

``run_hanamenode`` and ``run_hafs`` run a command line to completion (format,
bootstrap-standby, the shell) with its output captured.

Mutual TLS is the default (docs/operations.md §9.1, issue 25 item 6): the cluster makes a CA
and certificates in ``<base_dir>/tls`` (``hadev.pki``), one per daemon, ``client`` and
``admin``. ``conf_path`` is the users' file: ``hafs`` and ``HaFsClient`` present the client
certificate. ``admin_conf_path`` is the same file presenting the admin certificate: ``hactl``,
``hanamenode format`` and ``bootstrap-standby`` read it, and the launcher's own HA calls
(``transition_to_active``) use it. ``tls=False`` asks for plaintext; a test that does so
says why beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc

from conf import Settings, TLSSettings, load_settings, write_xml
from conf.rpc import make_channel
from conf.xmlconf import ConfigValue
from hadev.daemon import (
    LOOPBACK,
    DaemonHost,
    DaemonProcess,
    DaemonStartError,
    child_environment,
    free_ports,
    run_command,
)
from hadev.journalnodes import JournalNodeProcessCluster
from hadev.pki import ADMIN, CLIENT, PLAINTEXT, Pki, cluster_identities, make_pki, transport_conf
from hanamenode.errors import NamenodeError, NamenodeUnavailableError, from_rpc_error
from hanamenode.ha import HAState
from hanamenode.peers import until_reached
from hanamenode.storage import NameDirectory
from proto import namenode_pb2, namenode_pb2_grpc

__all__ = [
    "NAMENODE_PORTS",
    "NameNodeProcess",
    "NameNodeProcessCluster",
    "NameNodeStartError",
    "get_service_state",
    "get_service_status",
    "hanamenode_command",
    "run_command",
    "run_hafs",
    "run_hanamenode",
    "transition",
]

NAMENODE_PORTS = (8020, 9870)
"""RPC and HTTP ports of a NameNode on a host of its own (Hadoop's defaults)."""
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
TRANSITION_TIMEOUT = 60.0
COMMAND_TIMEOUT = 60.0


class NameNodeStartError(DaemonStartError):
    """A NameNode did not start (see DaemonStartError)."""


def hanamenode_command(subcommand: str, nn_id: str, conf: Path | None = None) -> list[str]:
    """``python -m namenoded <subcommand> [--conf C] --id nnX`` (the ``hanamenode``
    program) with this interpreter."""
    args = [sys.executable, "-m", "namenoded", subcommand]
    if conf is not None:
        args += ["--conf", str(conf)]
    return [*args, "--id", nn_id]


def run_hanamenode(
    args: Sequence[str], *, conf_env: Path | None = None, timeout: float = COMMAND_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m namenoded <args>`` (``hanamenode <args>``) to completion, output
    captured; a process still running after ``timeout`` is killed (status -9)."""
    return run_command([sys.executable, "-m", "namenoded", *args], conf_env, timeout)


def run_hafs(
    conf: Path | None, *args: str, timeout: float = COMMAND_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run the shell, ``hafs [--conf C] <args>`` (as ``python -m hanamenode.client``), to
    completion with its output captured."""
    command = [sys.executable, "-m", "hanamenode.client"]
    if conf is not None:
        command += ["--conf", str(conf)]
    return run_command([*command, *args], None, timeout)


def _ha_call(
    address: str,
    tls: TLSSettings | None,
    rpc: str,
    request: object,
    timeout: float,
) -> object:
    # A fresh channel each time: one that failed to connect would wait out its reconnect
    # backoff instead of trying again at once.
    channel = make_channel(address, tls)
    try:
        stub = namenode_pb2_grpc.HAServiceProtocolStub(channel)
        return getattr(stub, rpc)(request, timeout=timeout)
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None
    finally:
        channel.close()


def get_service_status(
    address: str, tls: TLSSettings | None = None, timeout: float = 5.0
) -> namenode_pb2.ServiceStatus:
    """What the NameNode at ``address`` reports (GetServiceStatus: HA state, last applied
    txid, epoch) within ``timeout`` seconds, asked again while it cannot be reached
    (``until_reached``); a ``NamenodeError`` (``NamenodeUnavailableError`` when it stays
    unreachable) otherwise."""

    def ask(left: float) -> namenode_pb2.ServiceStatus:
        reply = _ha_call(address, tls, "GetServiceStatus", namenode_pb2.HAEmpty(), left)
        assert isinstance(reply, namenode_pb2.ServiceStatus)
        return reply

    return until_reached(ask, timeout)


def get_service_state(
    address: str, tls: TLSSettings | None = None, timeout: float = 5.0
) -> HAState:
    """The HA state the NameNode at ``address`` reports (GetServiceStatus); a
    ``NamenodeError`` (``NamenodeUnavailableError`` when unreachable) otherwise."""
    reply = get_service_status(address, tls, timeout)
    name = namenode_pb2.HAState.Name(reply.state)
    return HAState[name] if name in HAState.__members__ else HAState.INITIALIZING


def transition(
    address: str,
    to: HAState,
    *,
    tls: TLSSettings | None = None,
    forced: bool = False,
    timeout: float = TRANSITION_TIMEOUT,
) -> None:
    """Ask the NameNode at ``address`` to become ``to`` (ACTIVE, STANDBY or OBSERVER), as a user
    (``forced``: as ``--forcemanual``); its refusal is raised as a ``NamenodeError``."""
    rpc = {
        HAState.ACTIVE: "TransitionToActive",
        HAState.STANDBY: "TransitionToStandby",
        HAState.OBSERVER: "TransitionToObserver",
    }[to]
    source = namenode_pb2.REQUEST_BY_USER_FORCED if forced else namenode_pb2.REQUEST_BY_USER
    _ha_call(address, tls, rpc, namenode_pb2.TransitionRequest(source=source), timeout)


class NameNodeProcess(DaemonProcess):
    """One NameNode daemon in a child process; a context manager that always stops it.

    ``conf_path`` must exist when it starts and configure ``nn_id`` with ``rpc_address``
    (the cluster below writes both). ``tls`` is for this launcher's own HA calls.
    """

    kind = "namenode"
    start_error_type = NameNodeStartError

    def __init__(
        self,
        nn_id: str,
        workdir: Path,
        conf_path: Path,
        rpc_address: str,
        *,
        http_address: str | None = None,
        tls: TLSSettings | None = None,
        log_format: str = "console",
        host: DaemonHost = LOOPBACK,
    ) -> None:
        super().__init__(nn_id, workdir, host)
        self.nn_id = nn_id
        self.conf_path = Path(conf_path)
        self.rpc_address = rpc_address
        self.http_address = http_address
        self.tls = tls
        self.log_format = log_format

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.running and self.proc else "not running"
        return f"NameNodeProcess({self.nn_id}, {self.address}, {state})"

    @property
    def address(self) -> str:
        """``host:port`` of its ClientProtocol/HAServiceProtocol server."""
        return self.rpc_address

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.http_address}/metrics" if self.http_address else None

    @property
    def status_url(self) -> str | None:
        """The status page (docs/operations.md §13)."""
        return f"http://{self.http_address}/status" if self.http_address else None

    # -- HA ------------------------------------------------------------------------------------

    def state(self, timeout: float = 5.0) -> HAState:
        """What it reports (GetServiceStatus); NamenodeError when it does not answer."""
        return get_service_state(self.address, self.tls, timeout)

    def transition_to_active(self, timeout: float = TRANSITION_TIMEOUT) -> None:
        transition(self.address, HAState.ACTIVE, tls=self.tls, timeout=timeout)

    def transition_to_standby(self, timeout: float = TRANSITION_TIMEOUT) -> None:
        transition(self.address, HAState.STANDBY, tls=self.tls, timeout=timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to serve."""
        if self.running:
            raise RuntimeError(f"namenode {self.nn_id} is already running (pid {self.pid})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.starting()
        command = [
            *hanamenode_command("run", self.nn_id, self.conf_path),
            "--log-format",
            self.log_format,
        ]
        with open(self.log_path, "ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            # Its own session: a Ctrl-C meant for the launcher (``hadev up``) does not reach
            # the daemon, which the launcher stops by pid, in order.
            self.proc = self.popen(
                self.command(command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=child_environment(),
                start_new_session=True,
            )
        return self.proc

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        """Block until it reports STANDBY, OBSERVER or ACTIVE; NameNodeStartError when the process
        exits first, or (after killing it) when ``timeout`` passes."""

        def serving() -> bool:
            try:
                return self.state(timeout=1.0) in (
                    HAState.STANDBY, HAState.ACTIVE, HAState.OBSERVER
                )
            except NamenodeUnavailableError:
                return False  # not listening yet

        self.wait_until_serving(serving, self.address, timeout)

    def start(self, timeout: float = START_TIMEOUT) -> NameNodeProcess:
        """Spawn and wait until it serves (as STANDBY, or OBSERVER when configured so)."""
        self.spawn()
        self.wait_serving(timeout)
        return self

    def restart(self, timeout: float = START_TIMEOUT) -> NameNodeProcess:
        """Stop it if it runs (SIGTERM), then start it again: same ports, same name dir."""
        self.stop()
        return self.start(timeout)


class NameNodeProcessCluster:
    """``journal_nodes`` JournalNode processes and NameNode processes ``nn1..nnN`` on
    loopback, with one configuration file ``conf_path`` (default ``<base_dir>/hdfs-site.xml``)
    that describes all of them, for the JournalNodes, the NameNodes, ``hafs`` and any client.
    Name dirs are ``<base_dir>/nn<i>``, JournalNode dirs ``<base_dir>/journal/jn<i>``, logs
    ``<log_dir>/<id>.log`` (default: NameNodes in ``base_dir``, JournalNodes in
    ``base_dir/journal``).

    ``start`` (entering the context) starts the JournalNodes, formats ``nn1`` and
    bootstraps the others unless their name dirs are formatted already (a restart on the same
    ``base_dir`` keeps the namespace), and starts every NameNode; all are then STANDBY.
    Leaving stops every process it started (and removes ``base_dir`` if it made it).
    ``hosts`` places daemons by id (``nn1``, ``jn2``...) on other hosts (``DaemonHost``).
    ``journal_nodes=0`` runs none: ``extra_conf`` then names the shared edits, e.g. the
    ZooKeeper journal's ``zookeeper://`` URI (docs/architecture.md §9.2).
    The last ``observers`` NameNodes are configured as observers
    (``dfs.namenode.observer.<ns>.<id>``): they start as OBSERVER.
    ``tls`` (default True) serves mutual TLS with certificates in ``tls_dir`` (default
    ``<base_dir>/tls``); ``admin_conf_path`` (default ``admin-site.xml`` beside ``conf_path``)
    is the operator's copy of the file (module docstring).
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        namenodes: int = 2,
        journal_nodes: int = 3,
        *,
        nameservice: str = "ns1",
        journal_id: str = "ns1",
        extra_conf: Mapping[str, ConfigValue] | None = None,
        log_format: str = "console",
        conf_path: Path | None = None,
        log_dir: Path | None = None,
        hosts: Mapping[str, DaemonHost] | None = None,
        observers: int = 0,
        tls: bool = True,
        tls_dir: Path | None = None,
        admin_conf_path: Path | None = None,
    ) -> None:
        if namenodes < 1:
            raise ValueError(f"a nameservice needs at least one NameNode, got {namenodes}")
        self._own_dir = base_dir is None
        self.base_dir = (
            Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="nnprocs-"))
        )
        self.nameservice = nameservice
        self.extra_conf = dict(extra_conf or {})
        self.conf_path = conf_path if conf_path is not None else self.base_dir / "hdfs-site.xml"
        self.admin_conf_path = (
            admin_conf_path
            if admin_conf_path is not None
            else self.conf_path.with_name("admin-site.xml")
        )
        self.tls = tls
        self.tls_dir = tls_dir if tls_dir is not None else self.base_dir / "tls"
        self._pki: Pki | None = None
        self._addresses = sorted({h.address for h in (hosts or {}).values()})
        self.journal = JournalNodeProcessCluster(
            journal_nodes,
            self.base_dir / "journal",
            journal_id=journal_id,
            conf_path=self.conf_path,
            render=self.properties,
            log_dir=log_dir,
            hosts=hosts,
        )
        ids = [f"nn{i}" for i in range(1, namenodes + 1)]
        if not 0 <= observers < namenodes:
            raise ValueError(f"{observers} observers among {namenodes} NameNodes: one must not be")
        self.observer_ids = ids[namenodes - observers :]
        hosts = hosts or {}
        ports = free_ports(2 * len(ids))
        self.namenodes: dict[str, NameNodeProcess] = {}
        for i, nn in enumerate(ids):
            host = hosts.get(nn, LOOPBACK)
            rpc, http = (ports[2 * i], ports[2 * i + 1]) if host.loopback else NAMENODE_PORTS
            self.namenodes[nn] = NameNodeProcess(
                nn,
                log_dir if log_dir is not None else self.base_dir,
                self.conf_path,
                f"{host.address}:{rpc}",
                http_address=f"{host.address}:{http}",
                log_format=log_format,
                host=host,
            )

    @property
    def ids(self) -> list[str]:
        return list(self.namenodes)

    def __getitem__(self, nn_id: str) -> NameNodeProcess:
        return self.namenodes[nn_id]

    def name_dir(self, nn_id: str) -> Path:
        return self.base_dir / nn_id

    @property
    def pki(self) -> Pki | None:
        """The cluster's certificates (made on first use, kept after); None in plaintext."""
        if self.tls and self._pki is None:
            identities = cluster_identities((jn.jn_id for jn in self.journal), self.namenodes)
            self._pki = make_pki(self.tls_dir, identities, self._addresses)
        return self._pki

    def tls_for(self, name: str) -> TLSSettings | None:
        """Mutual TLS presenting certificate ``name`` (``client``, ``admin``, a daemon id), or
        None in plaintext: for a test that calls as one particular role."""
        pki = self.pki
        return None if pki is None else pki.tls(name)

    def transport_conf(self, generic: str = CLIENT) -> dict[str, ConfigValue]:
        """The TLS keys of the file whose tools present certificate ``generic``, or the
        plaintext key with ``tls=False``."""
        pki = self.pki
        if pki is None:
            return dict(PLAINTEXT)
        daemons = [*(jn.jn_id for jn in self.journal), *self.namenodes]
        return transport_conf(pki, generic, daemons)

    def properties(self, generic: str = CLIENT) -> dict[str, ConfigValue]:
        """The shared configuration, as ``conf_path`` holds it (``generic``: whose
        certificate its tools present; ``admin_conf_path`` is the one with ``admin``)."""
        props: dict[str, ConfigValue] = self.journal.shared_properties()
        ns = self.nameservice
        props["dfs.nameservices"] = ns
        props[f"dfs.ha.namenodes.{ns}"] = ",".join(self.namenodes)
        for nn, proc in self.namenodes.items():
            props[f"dfs.namenode.rpc-address.{ns}.{nn}"] = proc.rpc_address
            if proc.http_address is not None:
                props[f"dfs.namenode.http-address.{ns}.{nn}"] = proc.http_address
            props[f"dfs.namenode.name.dir.{ns}.{nn}"] = self.name_dir(nn)
            if nn in self.observer_ids:
                props[f"dfs.namenode.observer.{ns}.{nn}"] = True
        return {**props, **self.transport_conf(generic), **self.extra_conf}

    def write_conf(self) -> Settings:
        """(Re)write ``conf_path`` and ``admin_conf_path``; return the first loaded, as every
        process will load it."""
        write_xml(self.properties(ADMIN), self.admin_conf_path)
        write_xml(self.properties(), self.conf_path)
        admin = load_settings(self.admin_conf_path)
        for proc in self.namenodes.values():
            proc.tls = admin.tls  # transitions asked as an operator need the admin role
        return load_settings(self.conf_path)

    def settings(self) -> Settings:
        """The users' settings: a client built from them presents the client certificate."""
        return load_settings(self.conf_path)

    def admin_settings(self) -> Settings:
        """The operator's settings (``admin_conf_path``): the admin certificate."""
        return load_settings(self.admin_conf_path)

    # -- lifecycle -----------------------------------------------------------------------------

    def _command(self, subcommand: str, nn_id: str) -> None:
        result = run_hanamenode(  # an operator's command: the admin certificate
            [subcommand, "--conf", str(self.admin_conf_path), "--id", nn_id, "--non-interactive"]
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise NameNodeStartError(
                f"hanamenode {subcommand} --id {nn_id} exited with {result.returncode}: {last}",
                result.stdout + result.stderr,
            )

    def start(
        self,
        timeout: float = START_TIMEOUT,
        *,
        before_namenodes: Callable[[], object] | None = None,
    ) -> NameNodeProcessCluster:
        """Start the JournalNodes and every NameNode (formatting/bootstrapping first when
        their name dirs are empty). ``before_namenodes`` is called once the first name dir
        is formatted, before the first NameNode starts. On failure, whatever started is
        stopped again."""
        try:
            self.journal.start()
            self.write_conf()
            for index, nn in enumerate(self.namenodes):
                if not NameDirectory(self.name_dir(nn)).is_formatted():
                    self._command("format" if index == 0 else "bootstrap-standby", nn)
                if index == 0 and before_namenodes is not None:
                    before_namenodes()
                self._start_namenode(nn, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_namenode(self, nn: str, timeout: float, attempts: int = 5) -> None:
        """Start ``nn``; on its first start, a port another process took meanwhile is
        replaced by a fresh one, and the NameNodes already running restart to read the new
        configuration (each reads it once)."""
        proc = self.namenodes[nn]
        for attempt in range(1, attempts + 1):
            try:
                proc.start(timeout)
                return
            except NameNodeStartError as exc:
                if not exc.port_in_use or proc.starts > attempt or attempt == attempts:
                    raise
                if not proc.host.loopback:
                    raise
            rpc_port, http_port = free_ports(2)
            proc.rpc_address = f"127.0.0.1:{rpc_port}"
            proc.http_address = f"127.0.0.1:{http_port}"
            self.write_conf()
            for other in self.namenodes.values():
                if other is not proc and other.running:
                    other.restart(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every NameNode (SIGTERM, in parallel; SIGKILL after ``timeout``), then the
        JournalNodes."""
        try:
            for proc in self.namenodes.values():
                proc.request_stop()
            for proc in self.namenodes.values():
                proc.stop(timeout)
        finally:
            self.journal.stop()

    def close(self) -> None:
        """``stop``, and remove ``base_dir`` if this object made it."""
        try:
            self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> NameNodeProcessCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- HA ------------------------------------------------------------------------------------

    def transition_to_active(self, nn_id: str, timeout: float = TRANSITION_TIMEOUT) -> None:
        self.namenodes[nn_id].transition_to_active(timeout)

    def transition_to_standby(self, nn_id: str, timeout: float = TRANSITION_TIMEOUT) -> None:
        self.namenodes[nn_id].transition_to_standby(timeout)

    def state(self, nn_id: str) -> HAState:
        return self.namenodes[nn_id].state()

    def active(self) -> str | None:
        """The id of the NameNode that reports ACTIVE (the first, if several do), or None."""
        for nn, proc in self.namenodes.items():
            try:
                if proc.running and proc.state() is HAState.ACTIVE:
                    return nn
            except NamenodeError:
                continue
        return None
