"""The failover controller's RPC side and ZooKeeper formatting (docs/architecture.md §6.4): what
``hactl`` and the elector call on a NameNode, the manual failover of a cluster without
automatic failover (HDFS ``FailoverController``), and ``format-zk``.

    nn1 = HAServiceTarget.from_settings(settings, "nn1")
    nn1.state()                                   # HAState.ACTIVE
    nn1.transition_to_standby(REQUEST_BY_ZKFC, timeout=5.0)
    HAServiceTarget.from_settings(settings, "nn2").graceful_failover(timeout=70.0)

    format_zk(settings, force=False, confirm=None)   # creates /hanamenode/<ns>/members

Every RPC uses a fresh channel: one that failed to connect would wait out its reconnect
backoff, and a fence or a status check must try *now*.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from conf import ConfigError, Settings, TLSSettings
from conf.rpc import make_channel
from conf.rpc_failures import failure_cause
from failover.errors import (
    FailoverFailedError,
    FencingFailedError,
    FormatDeniedError,
    UnknownNameNodeError,
    ZooKeeperUnavailableError,
)
from failover.fencing import FenceTarget, NodeFencer
from hanamenode.errors import NamenodeError, from_rpc_error
from hanamenode.ha import HAState
from hanamenode.peers import connect_address
from proto import namenode_pb2, namenode_pb2_grpc
from zk.client import admin_retry, client_from_settings, close_client, split_quorum
from zk.paths import ElectorPaths

__all__ = [
    "REQUEST_BY_USER",
    "REQUEST_BY_USER_FORCED",
    "REQUEST_BY_ZKFC",
    "HAServiceTarget",
    "describe_status",
    "fence_old_active",
    "format_zk",
    "manual_failover",
    "status_state",
    "working_znode_exists",
]

log = structlog.get_logger(__name__)

REQUEST_BY_USER = namenode_pb2.REQUEST_BY_USER
REQUEST_BY_USER_FORCED = namenode_pb2.REQUEST_BY_USER_FORCED
REQUEST_BY_ZKFC = namenode_pb2.REQUEST_BY_ZKFC


@dataclass(frozen=True, slots=True)
class HAServiceTarget:
    """One NameNode's HAServiceProtocol, by id and address (HDFS ``HAServiceTarget``).

    Every method raises the ``NamenodeError`` the NameNode answered with, or
    ``NamenodeUnavailableError`` when it cannot be reached in ``timeout``.
    """

    nn_id: str
    address: str
    tls: TLSSettings | None = None

    @classmethod
    def from_settings(cls, settings: Settings, nn_id: str) -> HAServiceTarget:
        """UnknownNameNodeError when ``nn_id`` is not a NameNode of the nameservice."""
        if nn_id not in settings.namenode_ids:
            raise UnknownNameNodeError(nn_id, settings.namenode_ids)
        address = connect_address(settings.namenode(nn_id).rpc_address)
        return cls(nn_id, address, settings.tls)

    def __str__(self) -> str:
        return f"NameNode {self.nn_id} at {self.address}"

    @property
    def speaks_tls(self) -> bool:
        return self.tls is not None and self.tls.enabled

    def why(self, exc: NamenodeError) -> str:
        """What ``exc`` from one of these calls says: the cause when this NameNode did not
        answer (refused, TLS, timeout, the caller's role: ``conf.rpc_failures``), else its
        refusal."""
        return failure_cause(exc, tls=self.speaks_tls) or str(exc)

    def fence_target(self, nameservice: str) -> FenceTarget:
        return FenceTarget(nameservice, self.nn_id, self.address)

    def _call(self, rpc: str, request: Any, timeout: float) -> Any:
        """One RPC within ``timeout``. A connection that failed before the request was sent
        (a TLS handshake the peer dropped on a loaded machine) is tried again while time
        remains; a refused connection is not: nothing listens there, and fencing a dead
        active must not wait for it."""
        deadline = time.monotonic() + timeout
        while True:
            channel = make_channel(self.address, self.tls)
            try:
                stub = namenode_pb2_grpc.HAServiceProtocolStub(channel)
                remaining = max(0.001, deadline - time.monotonic())
                return getattr(stub, rpc)(request, timeout=remaining)
            except grpc.RpcError as err:
                left = deadline - time.monotonic()
                if not retry_unsent(err.code(), err.details() or "", left):
                    raise from_rpc_error(err) from None
                log.info(
                    "connection failed before the call was sent; trying again",
                    rpc=rpc,
                    nn=self.nn_id,
                    address=self.address,
                    error=err.details(),
                )
            finally:
                channel.close()
            time.sleep(RETRY_PAUSE)

    def status(self, timeout: float) -> namenode_pb2.ServiceStatus:
        reply = self._call("GetServiceStatus", namenode_pb2.HAEmpty(), timeout)
        assert isinstance(reply, namenode_pb2.ServiceStatus)
        return reply

    def state(self, timeout: float) -> HAState:
        return status_state(self.status(timeout))

    def transition_to_active(self, source: namenode_pb2.RequestSource, timeout: float) -> None:
        self._call("TransitionToActive", namenode_pb2.TransitionRequest(source=source), timeout)

    def transition_to_standby(self, source: namenode_pb2.RequestSource, timeout: float) -> None:
        self._call("TransitionToStandby", namenode_pb2.TransitionRequest(source=source), timeout)

    def transition_to_observer(self, source: namenode_pb2.RequestSource, timeout: float) -> None:
        self._call("TransitionToObserver", namenode_pb2.TransitionRequest(source=source), timeout)

    def monitor_health(self, timeout: float) -> None:
        """Returns when healthy; ``HealthCheckFailedError`` naming the problem otherwise."""
        self._call("MonitorHealth", namenode_pb2.HAEmpty(), timeout)

    def cede_active(self, seconds: float, timeout: float) -> None:
        """Step down if active and stay out of the election for ``seconds`` (<= 0: rejoin)."""
        request = namenode_pb2.CedeRequest(millis_to_cede=int(seconds * 1000))
        self._call("CedeActive", request, timeout)

    def graceful_failover(self, timeout: float) -> str:
        """Make this NameNode active through the election; the previously active id ("" when
        it already was)."""
        reply = self._call("GracefulFailover", namenode_pb2.HAEmpty(), timeout)
        return str(reply.previous_active)


RETRY_PAUSE = 0.1
"""Seconds between two attempts of an RPC whose connection failed before it was sent."""


def retry_unsent(code: grpc.StatusCode, details: str, seconds_left: float) -> bool:
    """Whether to try an HAServiceProtocol call again: it failed while connecting (gRPC's
    "failed to connect to all addresses", so the request was never sent and trying again is
    safe even for a transition), not because the connection was refused, and there is time
    for another attempt."""
    return (
        code is grpc.StatusCode.UNAVAILABLE
        and details.startswith("failed to connect to all addresses")
        and "Connection refused" not in details
        and seconds_left > 2 * RETRY_PAUSE
    )


def status_state(status: namenode_pb2.ServiceStatus) -> HAState:
    name = namenode_pb2.HAState.Name(status.state)
    return HAState[name] if name in HAState.__members__ else HAState.INITIALIZING


def describe_status(status: namenode_pb2.ServiceStatus) -> str:
    """``active``, or ``active (ZooKeeper unreachable: automatic failover suspended)`` when
    the elector reports why automatic failover cannot act."""
    state = status_state(status).value
    return f"{state} ({status.failover_note})" if status.failover_note else state


def manual_failover(
    source: HAServiceTarget,
    target: HAServiceTarget,
    fencer: NodeFencer,
    *,
    nameservice: str,
    graceful_timeout: float,
    rpc_timeout: float,
    transition_timeout: float,
) -> None:
    """Failover without ZooKeeper (HDFS ``FailoverController.failover``): check that
    ``target`` is ready, ask ``source`` to step down (fencing it with ``fencer`` if that
    fails), make ``target`` active; if that fails and ``source`` stepped down gracefully, make
    ``source`` active again. FailoverFailedError naming the failed step otherwise."""
    try:
        status = target.status(rpc_timeout)
    except NamenodeError as exc:
        raise FailoverFailedError(
            f"Can't failover to an unreachable {target}: {target.why(exc)}"
        ) from None
    if status.state == namenode_pb2.ACTIVE:
        raise FailoverFailedError(f"Can't failover to an active {target}")
    if not status.ready_to_become_active:
        raise FailoverFailedError(
            f"{target} is not ready to become active: {status.not_ready_reason}"
        )
    graceful = True
    try:
        source.transition_to_standby(REQUEST_BY_USER, graceful_timeout)
    except NamenodeError as exc:
        graceful = False
        log.warning("graceful transition to standby failed; fencing", source=str(source),
                    error=str(exc))
        result = fencer.fence(source.fence_target(nameservice))
        if not result.succeeded:
            raise FailoverFailedError(
                f"Unable to fence {source}: {result.describe()}"
            ) from None
    try:
        target.transition_to_active(REQUEST_BY_USER, transition_timeout)
    except NamenodeError as exc:
        message = f"Unable to make {target} active ({target.why(exc)})."
        if graceful:
            try:
                source.transition_to_active(REQUEST_BY_USER, transition_timeout)
                message += f" Failed back to {source}."
            except NamenodeError as back:
                message += f" Failback to {source} failed too: {back}"
        raise FailoverFailedError(message) from None


def _start(client: KazooClient, timeout: float) -> None:
    try:
        client.start(timeout=timeout)
    except Exception as exc:
        close_client(client)
        raise ZooKeeperUnavailableError(
            f"cannot connect to ZooKeeper {client.hosts} within {timeout:g}s: {exc}"
        ) from None


def _connect_timeout(settings: Settings) -> float:
    return max(5.0, settings.zk.session_timeout)


def working_znode_exists(settings: Settings, timeout: float | None = None) -> bool:
    """Whether ``<parent>/<nameservice>`` exists (``format-zk`` was run)."""
    client = client_from_settings(settings)
    wait = timeout or _connect_timeout(settings)
    _start(client, wait)
    try:
        working = ElectorPaths.from_settings(settings).working
        return admin_retry(client, wait)(client.exists, working) is not None
    finally:
        close_client(client)


def format_zk(
    settings: Settings,
    *,
    force: bool = False,
    confirm: Callable[[str], bool] | None = None,
    timeout: float | None = None,
) -> str:
    """Create the working znode of the nameservice and its ``members`` child (``hdfs zkfc
    -formatZK``), with the chroot of ``ha.zookeeper.quorum`` first if there is one; return
    the working znode's path.

    If it exists already it is cleared (recursively) only with ``force`` or when
    ``confirm(question)`` says yes; FormatDeniedError otherwise. Clearing it while
    NameNodes run removes their lock and breadcrumb: stop them first.
    """
    if not settings.zk.quorum:
        raise ConfigError("not set: format-zk needs ZooKeeper", key="ha.zookeeper.quorum")
    paths = ElectorPaths.from_settings(settings)
    wait = timeout or _connect_timeout(settings)
    _, chroot = split_quorum(settings.zk.quorum)
    try:
        # Each call is asked again while the connection is lost (admin_retry): one ping
        # answered late on a loaded machine failed a dev cluster's start before.
        if chroot is not None:
            root = client_from_settings(settings, chroot=False)
            _start(root, wait)
            try:
                admin_retry(root, wait)(root.ensure_path, chroot)
            finally:
                close_client(root)
        client = client_from_settings(settings)
        _start(client, wait)
        retry = admin_retry(client, wait)
        try:
            if retry(client.exists, paths.working) is not None:
                question = (
                    f"The configured parent znode {paths.working} already exists.\n"
                    "Are you sure you want to clear all failover information from ZooKeeper?\n"
                    "WARNING: Before proceeding, ensure that all NameNodes are stopped!"
                )
                if not force and (confirm is None or not confirm(question)):
                    raise FormatDeniedError(
                        f"{paths.working} already exists; not clearing it "
                        "(use --force, or answer yes)"
                    )
                started = time.monotonic()
                retry(_delete_if_present, client, paths.working)
                log.info("cleared working znode", path=paths.working,
                         seconds=round(time.monotonic() - started, 3))
            retry(client.ensure_path, paths.working)
            retry(client.ensure_path, paths.members)
        finally:
            close_client(client)
    except KazooException as exc:
        raise ZooKeeperUnavailableError(
            f"ZooKeeper refused formatting {paths.working}: {type(exc).__name__} {exc}"
        ) from None
    log.info("formatted ZooKeeper for automatic failover", path=paths.working)
    return paths.working


def _delete_if_present(client: KazooClient, path: str) -> None:
    """``path`` and everything under it, if it is there: idempotent, so a retry after a lost
    connection that had already deleted it succeeds."""
    if client.exists(path) is not None:
        client.delete(path, recursive=True)


def fence_old_active(
    old: HAServiceTarget,
    fencer: NodeFencer,
    *,
    nameservice: str,
    graceful_timeout: float,
    count: Callable[[str, bool], None],
    log: Any,
) -> str:
    """Make sure ``old`` is not active (HDFS ``ZKFailoverController.fenceOldActive``): ask it
    to step down (the graceful fence, within ``graceful_timeout``), and if that fails run the
    fencing methods in order. Returns what worked; FencingFailedError naming both failures
    when nothing did. ``count(method, succeeded)`` hears of every try ("graceful", "shell").

    The graceful fence is asked only of an old active that answers ``GetServiceStatus``
    within ``GRACEFUL_PROBE_SECONDS`` (issue 25 item 4): one that is frozen or cut off would
    hold the new active for the whole ``graceful_timeout`` (a request it accepted and never
    answers), although the QJM epoch fences it anyway. A responsive one still gets the whole
    timeout to step down."""
    log.info("fencing the previous active", old=old.nn_id, address=old.address)
    probe = min(graceful_timeout, GRACEFUL_PROBE_SECONDS)
    try:
        old.status(probe)
    except NamenodeError as exc:
        graceful_error = f"no answer to a status call within {probe:g} s: {exc}"
        count("graceful", False)
        log.warning("old active unresponsive: not waiting for a graceful fence; trying the "
                    "fencing methods", old=old.nn_id, error=graceful_error)
        return _fence_by_methods(old, fencer, nameservice, graceful_error, count)
    try:
        old.transition_to_standby(REQUEST_BY_ZKFC, graceful_timeout)
    except NamenodeError as exc:
        graceful_error = str(exc)
        count("graceful", False)
        log.warning("graceful fence failed; trying the fencing methods", old=old.nn_id,
                    error=graceful_error)
    else:
        count("graceful", True)
        log.info("fenced gracefully", old=old.nn_id)
        return f"{old.nn_id} stepped down gracefully"
    return _fence_by_methods(old, fencer, nameservice, graceful_error, count)


GRACEFUL_PROBE_SECONDS = 0.25
"""How long an old active has to answer a status call before it is asked to step down."""


def _fence_by_methods(
    old: HAServiceTarget,
    fencer: NodeFencer,
    nameservice: str,
    graceful_error: str,
    count: Callable[[str, bool], None],
) -> str:
    result = fencer.fence(old.fence_target(nameservice))
    for attempt in result.attempts:
        count("shell", attempt.succeeded)
    if not result.succeeded:
        raise FencingFailedError(
            f"cannot fence {old.nn_id} ({old.address}): graceful fence failed "
            f"({graceful_error}); {result.describe()}"
        )
    return f"{old.nn_id} fenced by {result.method}"
