"""JournalNode daemons as child processes: the one launcher of the demo, benchmarks and tests.

docs/architecture.md §1 (``journalnode run --conf C --id jnX``) and §2.3 (``bench/`` and
``tests/`` both run real JournalNodes, and nothing imports ``tests/``, so it lives in the
harness package ``hadev``, which no product package imports).

A ``JournalNodeProcess`` is ``python -m journalnode run --conf C --id jnX`` run by this
interpreter with this checkout first on PYTHONPATH, its stdout and stderr appended to a log
file; ``start`` returns once the daemon answers an IsFormatted RPC. A
``JournalNodeProcessCluster`` is n of them on free loopback ports sharing one generated
configuration (``conf.write_xml``), which a writer can load too::

    with JournalNodeProcessCluster(3, base_dir, journal_id="ns1") as cluster:
        qjm = QuorumJournalManager.connect(cluster.addresses, "ns1", ns_info)
        cluster.kill(2)                   # SIGKILL: a crash, reaped
        cluster.kill(1, signal.SIGSTOP)   # a pause, until cluster.kill(1, signal.SIGCONT)
        cluster.restart(2)                # same directory, same ports
    # leaving the block stops every process it started: SIGTERM, then SIGKILL

``start_journalnode`` starts a single JournalNode with a one-node configuration of its own;
``run_journalnode`` runs the command line to completion (start-up failures).

Mutual TLS is the default (docs/operations.md §9.1): alone, these launchers make a CA and
certificates in ``<base_dir>/tls`` (``hadev.pki``), one per JournalNode and the generic
``harness`` one (namenode and admin roles) that the test's own writers present::

    QuorumJournalManager.connect(cluster.addresses, "ns1", ns_info, tls=cluster.harness_tls)

``tls=False`` asks for plaintext; a test that does so says why beside it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc

from conf import TLSSettings, load_settings, write_xml
from conf.guard import Role
from conf.rpc import make_channel
from conf.xmlconf import ConfigValue
from hadev.daemon import (
    LOOPBACK,
    START_TIMEOUT,
    STOP_TIMEOUT,
    DaemonHost,
    DaemonProcess,
    DaemonStartError,
    child_environment,
    free_ports,
    run_command,
)
from hadev.pki import HARNESS, PLAINTEXT, Pki, make_pki, transport_conf
from journalnode.errors import JournalUnavailableError, from_rpc_error
from proto import journal_pb2, journal_pb2_grpc

__all__ = [
    "JOURNALNODE_PORTS",
    "JournalNodeProcess",
    "JournalNodeProcessCluster",
    "JournalNodeStartError",
    "journalnode_command",
    "journalnode_config",
    "run_journalnode",
    "start_journalnode",
]

JOURNALNODE_PORTS = (8485, 8480)
"""RPC and HTTP ports of a JournalNode on a host of its own (Hadoop's defaults)."""


class JournalNodeStartError(DaemonStartError):
    """A JournalNode did not start (see DaemonStartError)."""


def journalnode_command(jn_id: str, conf: Path | None = None) -> list[str]:
    """``python -m journalnode run [--conf C] --id jnX`` with this interpreter."""
    args = [sys.executable, "-m", "journalnode", "run"]
    if conf is not None:
        args += ["--conf", str(conf)]
    return [*args, "--id", jn_id]


def journalnode_config(
    rpc_port: int,
    http_port: int,
    edits_dir: Path,
    extra: Mapping[str, ConfigValue] | None = None,
    host: str = "127.0.0.1",
) -> dict[str, ConfigValue]:
    """The properties of a one-JournalNode configuration on ``host``."""
    return plaintext_unless_tls(
        {
            "dfs.journalnode.rpc-address": f"{host}:{rpc_port}",
            "dfs.journalnode.http-address": f"{host}:{http_port}",
            "dfs.journalnode.edits.dir": edits_dir,
            **(extra or {}),
        }
    )


def plaintext_unless_tls(props: Mapping[str, ConfigValue]) -> dict[str, ConfigValue]:
    """``props``, asking for plaintext RPC (``hanamenode.rpc.tls.enabled`` false) unless they
    configure TLS: a daemon refuses to start in plaintext it was not asked for (the file of
    ``journalnode_config`` alone, for tests of the command line)."""
    if any(key.startswith("hanamenode.rpc.tls.") for key in props):
        return dict(props)
    return {**props, **PLAINTEXT}


def harness_transport(
    tls_dir: Path, jn_ids: Sequence[str], tls: bool
) -> tuple[Pki | None, dict[str, ConfigValue]]:
    """The transport of a JournalNode-only launcher: with ``tls``, a CA and certificates in
    ``tls_dir`` (one per JournalNode of a cluster, the generic ``harness`` for the test's
    writers), else plaintext. A JournalNode alone (no ``jn_ids``: its file lists no ids, and
    it has no peers to call) serves with the generic one."""
    if not tls:
        return None, dict(PLAINTEXT)
    identities: dict[str, set[Role]] = {HARNESS: {Role.NAMENODE, Role.ADMIN}}
    identities.update({jn: {Role.JOURNALNODE} for jn in jn_ids})
    pki = make_pki(tls_dir, identities)
    return pki, transport_conf(pki, HARNESS, jn_ids)


def _probe(address: str, journal_id: str, tls: TLSSettings | None = None) -> bool:
    """Whether the JournalNode at ``address`` answers an IsFormatted RPC (any answer counts:
    even a refusal means the servicer runs). A fresh channel each time: one that failed to
    connect would wait out its reconnect backoff instead of trying again at once."""
    channel = make_channel(address, tls)
    try:
        stub = journal_pb2_grpc.QJournalServiceStub(channel)
        stub.IsFormatted(journal_pb2.IsFormattedRequest(journal_id=journal_id), timeout=0.5)
        return True
    except grpc.RpcError as err:
        return not isinstance(from_rpc_error(err), JournalUnavailableError)
    finally:
        channel.close()


class JournalNodeProcess(DaemonProcess):
    """One JournalNode daemon in a child process; a context manager that always stops it.

    Alone (``start_journalnode``) it writes its own configuration ``<workdir>/<id>-site.xml``
    with ``extra_conf`` on top, with mutual TLS (certificates in ``<workdir>/tls``) unless
    ``tls`` is False; in a cluster, ``conf_path`` and ``properties`` are the cluster's shared
    file and the function that renders it (transport included). Its output goes to
    ``<workdir>/<id>.log``, appended across restarts.
    """

    kind = "journalnode"
    start_error_type = JournalNodeStartError

    def __init__(
        self,
        jn_id: str,
        workdir: Path,
        *,
        edits_dir: Path | None = None,
        rpc_port: int = 0,
        http_port: int = 0,
        conf_path: Path | None = None,
        properties: Callable[[], Mapping[str, ConfigValue]] | None = None,
        extra_conf: Mapping[str, ConfigValue] | None = None,
        probe_journal: str = "probe",
        conf_via_env: bool = False,
        host: DaemonHost = LOOPBACK,
        tls: bool = True,
    ) -> None:
        super().__init__(jn_id, workdir, host)
        self.jn_id = jn_id
        self.edits_dir = edits_dir if edits_dir is not None else self.workdir / f"{jn_id}-edits"
        if not (rpc_port and http_port):
            rpc_port, http_port = free_ports(2) if host.loopback else JOURNALNODE_PORTS
        self.rpc_port = rpc_port
        self.http_port = http_port
        self.conf_path = conf_path if conf_path is not None else self.workdir / f"{jn_id}-site.xml"
        self._properties = properties
        self.extra_conf = dict(extra_conf or {})
        self.probe_journal = probe_journal
        self.conf_via_env = conf_via_env
        self.tls = tls
        self._transport: tuple[Pki | None, dict[str, ConfigValue]] | None = None

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.running and self.proc else "not running"
        return f"JournalNodeProcess({self.jn_id}, {self.address}, {state})"

    def _own_transport(self) -> tuple[Pki | None, dict[str, ConfigValue]]:
        if self._transport is None:
            self._transport = harness_transport(self.workdir / "tls", [], self.tls)
        return self._transport

    @property
    def harness_tls(self) -> TLSSettings | None:
        """What a test's writer presents to this JournalNode: alone, the ``harness``
        certificate (namenode and admin roles); in a cluster, the generic one of the shared
        file. None in plaintext."""
        if self._properties is None:
            pki = self._own_transport()[0]
            return None if pki is None else pki.tls(HARNESS)
        tls = load_settings(self.conf_path).tls
        return tls if tls.enabled else None

    @property
    def address(self) -> str:
        return f"{self.host.address}:{self.rpc_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host.address}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.http_address}/metrics"

    @property
    def status_url(self) -> str:
        """The status page (docs/operations.md §13)."""
        return f"http://{self.http_address}/status"

    def properties(self) -> Mapping[str, ConfigValue]:
        """What the configuration file holds now (ports may change on a first start)."""
        if self._properties is not None:
            return self._properties()
        return journalnode_config(
            self.rpc_port,
            self.http_port,
            self.edits_dir,
            {**self._own_transport()[1], **self.extra_conf},
            self.host.address,
        )

    # ------------------------------------------------------------------ lifecycle

    def spawn(self) -> subprocess.Popen[bytes]:
        """Write the configuration and start the process, without waiting for it to serve."""
        if self.running:
            raise RuntimeError(f"journalnode {self.jn_id} is already running (pid {self.pid})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_xml(self.properties(), self.conf_path)
        self.starting()
        with open(self.log_path, "ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            # Its own session: a Ctrl-C meant for the launcher (``hadev up``) does not reach
            # the daemon, which the launcher stops by pid, in order.
            self.proc = self.popen(
                self.command(
                    journalnode_command(self.jn_id, None if self.conf_via_env else self.conf_path)
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=child_environment(self.conf_path if self.conf_via_env else None),
                start_new_session=True,
            )
        return self.proc

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        """Block until an IsFormatted RPC gets an answer; JournalNodeStartError when the
        process exits first, or (after killing it) when ``timeout`` passes."""
        tls = load_settings(self.conf_path).tls  # the operator's certificate, with TLS on
        self.wait_until_serving(
            lambda: _probe(self.address, self.probe_journal, tls), self.address, timeout
        )

    def start(
        self, timeout: float = START_TIMEOUT, *, fresh_ports: bool = True, attempts: int = 5
    ) -> JournalNodeProcess:
        """Spawn and wait until serving. With ``fresh_ports``, a port taken by another process
        between choosing and binding it is replaced by a fresh one (up to ``attempts`` times);
        without, that is a JournalNodeStartError like any other."""
        for attempt in range(1, attempts + 1):
            self.spawn()
            try:
                self.wait_serving(timeout)
                return self
            except JournalNodeStartError as exc:
                if not (fresh_ports and exc.port_in_use and self.host.loopback):
                    raise
                if attempt == attempts:
                    raise
            self.rpc_port, self.http_port = free_ports(2)
        raise AssertionError("unreachable")

    def restart(self, timeout: float = START_TIMEOUT) -> JournalNodeProcess:
        """Stop it if it runs (SIGTERM), then start again on the same directory and ports."""
        self.stop()
        return self.start(timeout, fresh_ports=False)


def start_journalnode(
    workdir: Path,
    jn_id: str = "jn1",
    *,
    edits_dir: Path | None = None,
    probe_journal: str = "probe",
    extra_conf: Mapping[str, ConfigValue] | None = None,
    conf_via_env: bool = False,
    timeout: float = START_TIMEOUT,
    tls: bool = True,
) -> JournalNodeProcess:
    """A serving JournalNode process with its files under ``workdir`` (storage in
    ``workdir/<jn_id>-edits`` unless ``edits_dir`` is given), on free loopback ports.

    ``probe_journal`` is the journal id asked IsFormatted while waiting: the JournalNode
    creates a journal's directory on first use, so pass the journal the caller will use.
    Mutual TLS unless ``tls`` is False (``harness_tls`` is what a writer presents).
    """
    jn = JournalNodeProcess(
        jn_id,
        workdir,
        edits_dir=edits_dir,
        extra_conf=extra_conf,
        probe_journal=probe_journal,
        conf_via_env=conf_via_env,
        tls=tls,
    )
    try:
        return jn.start(timeout)
    except BaseException:
        jn.stop()
        raise


class JournalNodeProcessCluster:
    """``n`` JournalNode processes ``jn1..jnN`` on loopback, one shared configuration file.

    Node ``i`` (0-based) keeps its directory ``<base_dir>/jn<i+1>`` and its ports across
    ``stop``/``kill``/``restart``, so a restarted node is the same JournalNode to its writers.
    ``conf_path`` (default ``<base_dir>/journalnodes-site.xml``) lists every node
    (``dfs.journalnode.ids`` and per-id keys) and, when a ``journal_id`` is given,
    ``dfs.namenode.shared.edits.dir`` for writers that load it with ``conf.load_settings``.
    A launcher that shares one file between these and other daemons passes ``conf_path`` and
    ``render``, the function that returns the whole file (default ``properties``). Logs go
    to ``<log_dir>/jn<i>.log`` (default ``base_dir``). ``hosts`` places nodes by id on
    other hosts (``DaemonHost``; the others stay on loopback). Alone, it serves mutual TLS
    (certificates in ``<base_dir>/tls``, ``harness_tls`` for the test's writers) unless ``tls``
    is False. A context manager: entering starts every node, leaving stops every process it
    started (and removes ``base_dir`` if it made it).
    """

    def __init__(
        self,
        n: int = 3,
        base_dir: Path | None = None,
        *,
        journal_id: str | None = None,
        extra_conf: Mapping[str, ConfigValue] | None = None,
        conf_path: Path | None = None,
        render: Callable[[], Mapping[str, ConfigValue]] | None = None,
        log_dir: Path | None = None,
        hosts: Mapping[str, DaemonHost] | None = None,
        tls: bool = True,
    ) -> None:
        if n < 0:
            raise ValueError(f"a journal cluster of {n} nodes")
        self.tls = tls
        self._transport: tuple[Pki | None, dict[str, ConfigValue]] | None = None
        hosts = hosts or {}
        self._own_dir = base_dir is None
        self.base_dir = (
            Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="jnprocs-"))
        )
        self.journal_id = journal_id
        self.extra_conf = dict(extra_conf or {})
        self.conf_path = (
            conf_path if conf_path is not None else (self.base_dir / "journalnodes-site.xml")
        )
        ports = free_ports(2 * n)
        self.nodes = [
            JournalNodeProcess(
                f"jn{i + 1}",
                log_dir if log_dir is not None else self.base_dir,
                edits_dir=self.base_dir / f"jn{i + 1}",
                rpc_port=ports[2 * i] if f"jn{i + 1}" not in hosts else 0,
                http_port=ports[2 * i + 1] if f"jn{i + 1}" not in hosts else 0,
                conf_path=self.conf_path,
                properties=render or self.properties,
                probe_journal=journal_id or "probe",
                host=hosts.get(f"jn{i + 1}", LOOPBACK),
            )
            for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, index: int) -> JournalNodeProcess:
        return self.nodes[index]

    def __iter__(self) -> Iterator[JournalNodeProcess]:
        return iter(self.nodes)

    @property
    def addresses(self) -> list[str]:
        """``host:port`` of every node's QJournalService, in node order."""
        return [node.address for node in self.nodes]

    def _own_transport(self) -> tuple[Pki | None, dict[str, ConfigValue]]:
        if self._transport is None:
            ids = [node.jn_id for node in self.nodes]
            self._transport = harness_transport(self.base_dir / "tls", ids, self.tls)
        return self._transport

    @property
    def harness_tls(self) -> TLSSettings | None:
        """What a test's writers and readers present to these JournalNodes when they run
        alone (namenode and admin roles); None in plaintext."""
        pki = self._own_transport()[0]
        return None if pki is None else pki.tls(HARNESS)

    def properties(self) -> dict[str, ConfigValue]:
        """The shared configuration, as ``conf_path`` holds it (ports as they are now)."""
        return {**self._own_transport()[1], **self.shared_properties()}

    def shared_properties(self) -> dict[str, ConfigValue]:
        """The JournalNodes' part of a configuration (``properties`` without the transport),
        for a launcher that writes one file for them and other daemons."""
        props: dict[str, ConfigValue] = {
            "dfs.journalnode.ids": ",".join(node.jn_id for node in self.nodes)
        }
        for node in self.nodes:
            props[f"dfs.journalnode.rpc-address.{node.jn_id}"] = node.address
            props[f"dfs.journalnode.http-address.{node.jn_id}"] = node.http_address
            props[f"dfs.journalnode.edits.dir.{node.jn_id}"] = node.edits_dir
        if self.journal_id is not None and self.nodes:  # none: the ZooKeeper journal's
            uri = f"qjournal://{';'.join(self.addresses)}/{self.journal_id}"
            props["dfs.namenode.shared.edits.dir"] = uri
        return {**props, **self.extra_conf}

    def journal_dir(self, index: int, journal_id: str | None = None) -> Path:
        """``<edits dir>/<journal id>/current`` of node ``index``."""
        jid = journal_id or self.journal_id
        if jid is None:
            raise ValueError("no journal id given and the cluster has none")
        return self.nodes[index].edits_dir / jid / "current"

    def _indexes(self, index: int | None) -> list[int]:
        return list(range(len(self.nodes))) if index is None else [index]

    def start(
        self, index: int | None = None, timeout: float = START_TIMEOUT
    ) -> JournalNodeProcessCluster:
        """Start node ``index`` (default: every node not running), the processes in parallel.

        On a node's first start a port taken meanwhile is replaced by a fresh one (and the
        shared file rewritten); later starts keep the node's ports. If starting the whole
        cluster fails, whatever did start is stopped again.
        """
        todo = [self.nodes[i] for i in self._indexes(index) if not self.nodes[i].running]
        try:
            for node in todo:
                node.spawn()
            for node in todo:
                try:
                    node.wait_serving(timeout)
                except JournalNodeStartError as exc:
                    if not (exc.port_in_use and node.starts == 1 and node.host.loopback):
                        raise
                    node.rpc_port, node.http_port = free_ports(2)
                    node.start(timeout)
        except BaseException:
            if index is None:
                self.stop()
            raise
        return self

    def stop(self, index: int | None = None, timeout: float = STOP_TIMEOUT) -> list[int | None]:
        """Stop node ``index`` (default: all) with SIGTERM, then SIGKILL after ``timeout``.

        Returns the exit statuses of those nodes (None for one never started), in order; the
        signals go to every process before waiting for any.
        """
        nodes = [self.nodes[i] for i in self._indexes(index)]
        for node in nodes:
            node.request_stop()
        return [node.stop(timeout) for node in nodes]

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node ``index`` (see ``JournalNodeProcess.kill``)."""
        self.nodes[index].kill(sig)

    def restart(self, index: int, timeout: float = START_TIMEOUT) -> JournalNodeProcess:
        """Stop node ``index`` if it runs, then start it on the same directory and ports."""
        return self.nodes[index].restart(timeout)

    def __enter__(self) -> JournalNodeProcessCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every process (removing ``base_dir`` if this object made it)."""
        try:
            self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)


def run_journalnode(
    args: Sequence[str],
    *,
    conf_env: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m journalnode <args>`` to completion (start-up failures); output captured.

    A process still running after ``timeout`` is killed; its status is then -9.
    """
    return run_command([sys.executable, "-m", "journalnode", *args], conf_env, timeout)
