"""The client's failover proxy: a list of NameNode addresses plus one retry policy
(docs/architecture.md §1 and §5.6; HDFS ``ConfiguredFailoverProxyProvider`` with
``RetryPolicies.failoverOnNetworkException``).

One *logical* call gets one ``(client_id, call_id)``; every attempt of it, on whichever
NameNode, carries the same pair, so the NameNode's retry cache answers a retry whose first
attempt did run (its answer was lost, or the active failed over after logging it) with the
first answer instead of running it twice (HDFS-4942's at-most-once guarantee).

An attempt refused with ``StandbyError`` (or ``EditLogError``: that active is stepping down),
or failing because the NameNode is unreachable (UNAVAILABLE, DEADLINE_EXCEEDED: connection
refused, a dead or paused process), moves on to the next NameNode, after a sleep from
``RetryPolicy.sleep_before``. Any other refusal is the namespace's verdict and is raised at
once as its own ``NamenodeError`` class (``PathExistsError``, ``InvalidPathError``, ...). The
NameNode that answered last is tried first by the next call.

Consistent reads on observers (HDFS-12943's ``ObserverReadProxyProvider``; docs/consistency.md
§9): every call sends the highest txid this proxy has seen (request metadata
``hn-seen-txid``) and takes the txid of each answer's trailer ``hn-state-txid``. With
``observer_reads``, a read goes first to one observer (found by asking every NameNode its
state, again every ``OBSERVER_PROBE_PERIOD``), which answers once it has applied that txid;
a refusal (``ObserverBehindError``), a dead or a paused observer costs that one attempt, and
the read then goes to the active as any call does. Writes always go to the active. Before
its first observer read a proxy calls ``msync`` (as HDFS's proxy does), so it never reads
older state than what was acknowledged before it started.

Resolving from ZooKeeper (``dfs.client.failover.zookeeper.quorum``; docs/operations.md §3.5):
the list is not configured but followed, by a ``NameNodeResolver`` (``zk_resolver``). Each
new ``Resolution`` replaces it, makes its active the NameNode the next call tries first, and,
when the active moved, opens the session to the new one at once and gives up the session to
the old one: its unanswered calls fail as unreachable and are sent again, with their ids, to
the new active, as after any failover, without waiting for the old one to answer or time out.

    proxy = FailoverProxy.from_settings(settings)
    reply = proxy.call(
        "Mkdirs",
        lambda stub, header, timeout: stub.Mkdirs(
            namenode_pb2.MkdirsRequest(header=header, path="/a"), timeout=timeout
        ),
    )
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar, cast

import grpc
import structlog

from conf import ConfigError, Settings, TLSSettings
from conf.rpc import make_channel
from conf.rpc_failures import failure_cause, peer_name
from conf.settings import ClientSettings
from hanamenode.client.resolver import NameNodeAddress, NameNodeResolver, Resolution
from hanamenode.client.session import ClientSession, SessionStub
from hanamenode.errors import (
    EditLogError,
    NamenodeError,
    NamenodeUnavailableError,
    ObserverBehindError,
    StandbyError,
    from_rpc_error,
)
from hanamenode.ha import ACTIVE_HINT_KEY, SEEN_TXID_KEY, STATE_TXID_KEY, parse_txid
from hanamenode.peers import connect_address
from proto import namenode_pb2, namenode_pb2_grpc

__all__ = [
    "CLIENT_ID_BYTES",
    "FailoverProxy",
    "Invoke",
    "NameNodeAddress",
    "RetryPolicy",
    "classify",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")

CLIENT_ID_BYTES = 16
"""Length of a client id: random, like HDFS's 16-byte ClientId (a UUID)."""

# Status codes that say "this NameNode could not answer", not "the namespace refuses".
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

OBSERVER_PROBE_PERIOD = 10.0
"""Seconds between two rounds of asking every NameNode its state to find the observers, and
how long an observer that failed to answer is passed over."""
OBSERVER_PROBE_TIMEOUT = 2.0
"""Deadline of one GetServiceStatus of that round (a dead NameNode must not hold a read)."""

Invoke = Callable[[namenode_pb2_grpc.ClientProtocolStub, namenode_pb2.RpcHeader, float], T]
"""One attempt of a call: ``(stub, header, timeout) -> reply``; it must put ``header`` in
its request unchanged and pass ``timeout`` to the stub."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard one call tries: ``max_attempts`` attempts in all, over all NameNodes, each
    with a deadline of ``rpc_timeout`` seconds, with ``sleep_before`` between them.

    The defaults are ``conf``'s (``dfs.client.failover.*``, ``dfs.client.rpc-timeout.ms``).
    """

    max_attempts: int = 15
    sleep_base: float = 0.05
    sleep_max: float = 1.0
    rpc_timeout: float = 20.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.sleep_base < 0 or self.sleep_max < 0 or self.rpc_timeout <= 0:
            raise ValueError(f"sleeps must be >= 0 and the timeout > 0: {self}")

    @classmethod
    def from_settings(cls, client: ClientSettings) -> RetryPolicy:
        return cls(
            max_attempts=client.failover_max_attempts,
            sleep_base=client.failover_sleep_base,
            sleep_max=client.failover_sleep_max,
            rpc_timeout=client.rpc_timeout,
        )

    def sleep_before(self, failovers: int, jitter: float = 1.0) -> float:
        """Seconds to sleep before the attempt that follows the ``failovers``-th failover.

        The first failover is immediate: the other NameNode is usually the active one. After
        that the sleep doubles from ``sleep_base`` up to ``sleep_max``, times ``jitter``
        (HDFS draws it from [0.5, 1.5) so that many clients do not retry in step):

        >>> [RetryPolicy(sleep_base=0.05, sleep_max=1.0).sleep_before(k) for k in range(1, 8)]
        [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
        """
        if failovers <= 1:
            return 0.0
        return min(self.sleep_max, self.sleep_base * 2 ** (failovers - 2)) * jitter


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _TxidInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Sends the highest txid seen with every call and keeps the txid of every answer, a
    refusal included (docs/consistency.md §9)."""

    def __init__(self, seen: Callable[[], int], saw: Callable[[int], None]) -> None:
        self._seen = seen
        self._saw = saw

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        metadata = [*(details.metadata or ()), (SEEN_TXID_KEY, str(self._seen()))]
        outcome = continuation(
            _CallDetails(
                details.method, details.timeout, metadata, details.credentials,
                details.wait_for_ready, details.compression,
            ),
            request,
        )
        for key, value in outcome.trailing_metadata() or ():
            if key == STATE_TXID_KEY:
                try:
                    self._saw(parse_txid(key, str(value)))
                except NamenodeError as exc:
                    log.warning("ignored a malformed state txid", error=str(exc))
        return outcome


def classify(err: grpc.RpcError) -> tuple[NamenodeError, bool]:
    """The ``NamenodeError`` a failed attempt stands for, and whether another NameNode (or
    the same one, later) may be asked.

    Retried: ``StandbyError``; ``EditLogError`` (that active lost its quorum or was fenced
    and is leaving the active state: whether the edit survived is the next active's to say,
    and the retry cache answers if it did); ``NamenodeUnavailableError`` with an UNAVAILABLE
    or DEADLINE_EXCEEDED status (unreachable, too slow, or the NameNode's own "try later").
    A failure with any other status and no error class (INTERNAL from a servicer bug,
    UNIMPLEMENTED) is a plain ``NamenodeError`` and is not retried.
    """
    error = from_rpc_error(err)
    if isinstance(error, StandbyError | EditLogError):
        return error, True
    if type(error) is NamenodeUnavailableError:
        code = err.code() if isinstance(err, grpc.Call) else None
        if code in _UNREACHABLE:
            return error, True
        return NamenodeError(str(error)), False
    return error, False


def _naming(error: NamenodeError, nn: NameNodeAddress, cause: str) -> NamenodeError:
    """``error`` (of its class) as one line naming the NameNode and why it did not answer
    (``conf.rpc_failures``): ``NameNode nn1 at 127.0.0.1:8020: connection refused``."""
    named = type(error)(f"{peer_name('NameNode', nn.nn_id, nn.address)}: {cause}")
    named.__dict__.update(error.__dict__)  # rpc_status, multi_index
    return named


class FailoverProxy:
    """Calls ClientProtocol on whichever NameNode is active: one of ``namenodes``, or of
    those ``resolver`` names as they change. Thread-safe; a context manager that closes its
    channels (and its resolver).

    ``client_id`` (default: 16 random bytes) names this client to the retry cache;
    ``channel_factory(address)`` replaces ``conf.rpc.make_channel`` (tests intercept calls
    with it); ``sleep`` and ``rng`` drive the backoff (tests make it instant and fixed).
    """

    def __init__(
        self,
        namenodes: Sequence[NameNodeAddress | str],
        policy: RetryPolicy | None = None,
        *,
        tls: TLSSettings | None = None,
        client_id: bytes | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        pinned: bool = False,
        observer_reads: bool = False,
        sessions: bool = True,
        resolver: NameNodeResolver | None = None,
    ) -> None:
        if not namenodes and resolver is None:
            raise ValueError("a failover proxy needs at least one NameNode address")
        self.namenodes = tuple(
            nn if isinstance(nn, NameNodeAddress) else NameNodeAddress(nn, nn)
            for nn in namenodes
        )
        """The NameNodes calls may go to: configured, or the resolver's latest."""
        self.policy = policy if policy is not None else RetryPolicy()
        if pinned and (len(self.namenodes) != 1 or resolver is not None):
            raise ValueError(f"a pinned proxy asks one NameNode, not {len(self.namenodes)}")
        self.pinned = pinned
        """Every call goes to the one NameNode, once: its answer (a StandbyError too) is
        the caller's, with no failover and no retry (``hafs --namenode``/``-fs``)."""
        self.client_id = client_id if client_id is not None else os.urandom(CLIENT_ID_BYTES)
        self._tls = tls
        self._custom_channels = channel_factory is not None
        self._channel_factory = channel_factory or (lambda a: make_channel(a, self._tls))
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._resolved_cond = threading.Condition(self._lock)
        self._call_ids = itertools.count(1)
        self._current: NameNodeAddress | None = self.namenodes[0] if self.namenodes else None
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self.sessions = sessions
        """Calls travel on one ``ClientSession`` per NameNode, shared by every thread
        (docs/protocol.md §13); False: one unary call each."""
        self._sessions: dict[str, ClientSession] = {}
        self._closed = False
        self.observer_reads = observer_reads and not pinned
        """Reads go to an observer first (HDFS's ObserverReadProxyProvider)."""
        self._seen_txid = 0
        self._msynced = False
        self._observers: tuple[NameNodeAddress, ...] = ()
        self._probed_at: float | None = None
        self._passed_over: dict[str, float] = {}  # by address: until when
        self._next_observer = self._rng.randrange(max(1, len(self.namenodes)))
        self._interceptor = _TxidInterceptor(lambda: self._seen_txid, self._saw)
        self._log = log.bind(client=self.client_id.hex()[:8])
        self.resolver = resolver
        """Follows the NameNodes (``dfs.client.failover.zookeeper.quorum``); None: the
        configured ``namenodes``."""
        self._resolution: Resolution | None = None
        if resolver is not None:
            resolver.start(self._resolved)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        policy: RetryPolicy | None = None,
        *,
        client_id: bytes | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
        sessions: bool | None = None,
    ) -> FailoverProxy:
        """The NameNodes of ``dfs.ha.namenodes.<ns>`` in configured order, or those the
        election znodes name when ``dfs.client.failover.zookeeper.quorum`` is set; the policy
        of ``dfs.client.*``, the channel TLS of ``hanamenode.rpc.tls.*``; ``sessions``
        overrides ``dfs.client.sessions.enabled``."""
        resolver: NameNodeResolver | None = None
        namenodes: list[NameNodeAddress] = []
        if settings.client.zookeeper_quorum:
            from hanamenode.client.zk_resolver import ZooKeeperResolver

            resolver = ZooKeeperResolver.from_settings(settings)
        elif not settings.namenode_ids:
            raise ConfigError(
                "no NameNodes configured (or set dfs.client.failover.zookeeper.quorum to "
                "find them in ZooKeeper)",
                source=str(settings.source),
                key=f"dfs.ha.namenodes.{settings.nameservice}",
            )
        else:
            namenodes = [
                NameNodeAddress(nn, connect_address(settings.namenode(nn).rpc_address))
                for nn in settings.namenode_ids
            ]
        if policy is None:
            policy = RetryPolicy.from_settings(settings.client)
        return cls(
            namenodes,
            policy,
            tls=settings.tls,
            client_id=client_id,
            channel_factory=channel_factory,
            observer_reads=settings.client.observer_reads,
            sessions=settings.client.sessions if sessions is None else sessions,
            resolver=resolver,
        )

    @classmethod
    def pinned_to(
        cls,
        address: NameNodeAddress | str,
        policy: RetryPolicy | None = None,
        *,
        tls: TLSSettings | None = None,
        client_id: bytes | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
    ) -> FailoverProxy:
        """A proxy that sends every call to ``address`` alone, once (see ``pinned``)."""
        return cls(
            [address],
            policy,
            tls=tls,
            client_id=client_id,
            channel_factory=channel_factory,
            pinned=True,
        )

    # -- state ---------------------------------------------------------------------------------

    @property
    def current(self) -> NameNodeAddress:
        """The NameNode the next call tries first: the one that answered last, or the
        active the resolver named last. ``NamenodeUnavailableError`` while none is known."""
        current = self._current
        if current is None:
            raise NamenodeUnavailableError(f"{self._where()} {self._nothing_resolved()}")
        return current

    @property
    def open_sessions(self) -> tuple[str, ...]:
        """The addresses this proxy holds an unbroken session to, sorted."""
        with self._lock:
            return tuple(sorted(a for a, s in self._sessions.items() if not s.broken))

    def next_call_id(self) -> int:
        """A fresh call id for a new logical call (thread-safe; starts at 1)."""
        with self._lock:
            return next(self._call_ids)

    @property
    def seen_txid(self) -> int:
        """The highest txid this client has seen in an answer (or from ``msync``)."""
        return self._seen_txid

    def _saw(self, txid: int) -> None:
        with self._lock:
            if txid > self._seen_txid:
                self._seen_txid = txid

    @property
    def _speaks_tls(self) -> bool | None:
        """Whether this proxy's channels speak TLS (None: a channel factory decides)."""
        if self._custom_channels:
            return None
        return self._tls is not None and self._tls.enabled

    def _stub(self, nn: NameNodeAddress) -> Any:
        """The ClientProtocol stub of ``nn``: over its session, or unary calls."""
        with self._lock:
            if self._closed:
                raise NamenodeError("the client is closed")
            stub = self._stubs.get(nn.address)
            if stub is None:
                channel = grpc.intercept_channel(
                    self._channel_factory(nn.address), self._interceptor
                )
                self._channels[nn.address] = channel
                if self.sessions:
                    stub = SessionStub(
                        lambda: self._session(nn), lambda: self._seen_txid, self._saw
                    )
                else:
                    stub = namenode_pb2_grpc.ClientProtocolStub(channel)
                self._stubs[nn.address] = stub
            return stub

    def _session(self, nn: NameNodeAddress) -> ClientSession:
        """The open session to ``nn``, a new one when there is none or it broke."""
        with self._lock:
            if self._closed:
                raise NamenodeError("the client is closed")
            session = self._sessions.get(nn.address)
            if session is None or session.broken:
                session = ClientSession(self._channels[nn.address], name=str(nn))
                self._sessions[nn.address] = session
            return session

    def _fail_over(self, nn: NameNodeAddress) -> NameNodeAddress | None:
        """Move past NameNode ``nn`` unless another thread (or the resolver) already moved;
        the NameNode the next attempt asks."""
        with self._lock:
            if self._current == nn and self.namenodes:
                at = self.namenodes.index(nn) if nn in self.namenodes else -1
                self._current = self.namenodes[(at + 1) % len(self.namenodes)]
            return self._current

    def _answered(self, nn: NameNodeAddress) -> None:
        with self._lock:
            self._current = nn

    def _hinted(self, err: grpc.RpcError) -> NameNodeAddress | None:
        """The NameNode a step-down named as the new active (the trailer ``hn-active`` of an
        ended session), made current; None without a usable hint."""
        trailers: Any = err.trailing_metadata() if isinstance(err, grpc.Call) else None
        for key, value in trailers or ():
            if key != ACTIVE_HINT_KEY:
                continue
            with self._lock:
                for nn in self.namenodes:
                    if nn.nn_id == value:
                        self._current = nn
                        return nn
        return None

    # -- resolution ----------------------------------------------------------------------------

    def _resolved(self, resolution: Resolution) -> None:
        """The resolver's new view (from its thread): the NameNodes, the active first."""
        abandoned: ClientSession | None = None
        with self._lock:
            if self._closed:
                return
            previous = self._resolution.active if self._resolution is not None else None
            self._resolution = resolution
            if set(resolution.namenodes) != set(self.namenodes):
                # Observers are found again among the new NameNodes at the next read; those
                # still named serve until then.
                self._observers = tuple(
                    nn for nn in self._observers if nn in resolution.namenodes
                )
                self._probed_at = None
            self.namenodes = resolution.namenodes
            if resolution.active is not None:
                self._current = resolution.active
            elif self._current not in self.namenodes:
                self._current = self.namenodes[0] if self.namenodes else None
            moved = (
                resolution.active is not None
                and previous is not None
                and previous.address != resolution.active.address
            )
            if moved and previous is not None:
                abandoned = self._sessions.pop(previous.address, None)
            self._resolved_cond.notify_all()
        if abandoned is not None:
            # Its unanswered calls fail as unreachable: each caller sends its call again,
            # same ids, to the new active (the retry cache answers one that did run).
            abandoned.abandon(f"the active moved to {resolution.active} ({self._where()})")
        if moved and self.sessions and resolution.active is not None:
            try:
                self._stub(resolution.active)
                self._session(resolution.active)
            except NamenodeError:
                return  # closed meanwhile
            self._log.info("session moved to the new active", active=str(resolution.active),
                           previous=str(previous))

    def _where(self) -> str:
        return self.resolver.describe() if self.resolver is not None else "configured"

    def _nothing_resolved(self) -> str:
        resolution = self._resolution
        problem = resolution.problem if resolution is not None else "no answer yet"
        return f"names no NameNode ({problem or 'none registered'})"

    def _await_namenode(self, timeout: float) -> NameNodeAddress | None:
        """The NameNode to ask: before the resolver's first view, waits up to ``timeout``
        for it; None when there is none (an attempt that failed: the policy's backoff
        follows, and the watches may name one meanwhile)."""
        with self._resolved_cond:
            self._resolved_cond.wait_for(
                lambda: self._current is not None or self._closed
                or self._resolution is not None,
                timeout,
            )
            return self._current

    # -- calls ---------------------------------------------------------------------------------

    def call(
        self,
        name: str,
        invoke: Invoke[T],
        *,
        call_id: int | None = None,
        allow_stale_read: bool = False,
        read: bool = False,
    ) -> T:
        """Run one logical call: ``invoke(stub, header, timeout)`` on the current NameNode,
        failing over as the policy allows. ``call_id`` pins the call id (a caller's own
        retry of a call it made before); ``name`` is for messages and logs. A ``read``
        goes to an observer first when the proxy has ``observer_reads``.

        Raises the NameNode's refusal as its ``NamenodeError`` class, or, when every attempt
        failed over, ``NamenodeUnavailableError`` naming each NameNode's last answer. A
        NameNode that did not answer (refused, TLS, timeout: ``conf.rpc_failures``) or refused
        the caller's role is named with that cause: ``NameNode nn1 at 127.0.0.1:8020:
        connection refused`` (pinned), ``nn1 (127.0.0.1:8020): connection refused`` (in the
        list of last answers).
        """
        header = namenode_pb2.RpcHeader(
            client_id=self.client_id,
            call_id=self.next_call_id() if call_id is None else call_id,
            allow_stale_read=allow_stale_read,
        )
        if read and self.observer_reads:
            answered, reply = self._call_observer(name, invoke, header)
            if answered:
                return cast(T, reply)
        policy = self.policy
        nn = self._current
        answers: dict[str, str] = {}
        last: NamenodeError | None = None
        for attempt in range(1, policy.max_attempts + 1):
            if nn is None:
                nn = self._await_namenode(policy.rpc_timeout)
            hinted: NameNodeAddress | None = None
            if nn is None:
                failed, reason = self._where(), self._nothing_resolved()
            else:
                try:
                    reply = invoke(self._stub(nn), header, policy.rpc_timeout)
                except grpc.RpcError as err:
                    error, retriable = classify(err)
                    cause = failure_cause(err, tls=self._speaks_tls)
                    if not retriable or self.pinned:
                        raise error if cause is None else _naming(error, nn, cause) from None
                    last = error
                    failed = nn.nn_id
                    reason = f"{type(error).__name__}: {error}" if cause is None else cause
                    hinted = self._hinted(err)
                else:
                    self._answered(nn)
                    return reply
            answers[failed if nn is None else str(nn)] = reason
            if attempt == policy.max_attempts:
                break
            if nn is not None:
                nn = self._fail_over(nn) if hinted is None else hinted
            delay = policy.sleep_before(attempt, self._rng.uniform(0.5, 1.5))
            self._log.info(
                "failing over",
                call=name,
                call_id=header.call_id,
                failed=failed,
                reason=reason,
                next=None if nn is None else nn.nn_id,
                sleep_ms=round(delay * 1000, 1),
            )
            if delay > 0:
                self._sleep(delay)
        summary = "; ".join(f"{where}: {answer}" for where, answer in answers.items())
        raise NamenodeUnavailableError(
            f"{name}: no active NameNode answered in {policy.max_attempts} attempt(s): {summary}"
        ) from last

    # -- observer reads ------------------------------------------------------------------------

    def msync(self) -> int:
        """Make the txid this client has seen the active's latest durable txid (HDFS-13688):
        its next read, on an observer too, sees every mutation acknowledged before this call
        began. Returns that txid."""
        reply = self.call(
            "msync",
            lambda stub, header, timeout: stub.Msync(
                namenode_pb2.MsyncRequest(header=header), timeout=timeout
            ),
        )
        self._saw(reply.txid)
        self._msynced = True
        return int(reply.txid)

    def _call_observer(
        self, name: str, invoke: Invoke[T], header: namenode_pb2.RpcHeader
    ) -> tuple[bool, T | None]:
        """One attempt of a read on an observer: ``(True, reply)``, or ``(False, None)`` when
        there is none or it could not answer (the caller goes to the active). A refusal that
        is the namespace's verdict (PathNotFoundError) is raised: it is the answer."""
        nn = self._pick_observer()
        if nn is None:
            return False, None
        if not self._msynced:
            self.msync()
        try:
            return True, invoke(self._stub(nn), header, self.policy.rpc_timeout)
        except grpc.RpcError as err:
            error, retriable = classify(err)
            if not retriable:
                raise error from None
        if not isinstance(error, ObserverBehindError):
            # Dead, paused, or no longer an observer: pass it over until the next probe.
            with self._lock:
                self._passed_over[nn.address] = time.monotonic() + OBSERVER_PROBE_PERIOD
        self._log.info(
            "observer could not answer; asking the active",
            call=name,
            observer=nn.nn_id,
            reason=f"{type(error).__name__}: {error}",
        )
        return False, None

    def _pick_observer(self) -> NameNodeAddress | None:
        """The next observer in turn that is not passed over (probing when due), or None."""
        now = time.monotonic()
        if self._probed_at is None or now - self._probed_at >= OBSERVER_PROBE_PERIOD:
            self._probe_observers()
        with self._lock:
            live = [
                nn for nn in self._observers if self._passed_over.get(nn.address, 0.0) <= now
            ]
            if not live:
                return None
            self._next_observer += 1
            return live[self._next_observer % len(live)]

    def _probe_observers(self) -> None:
        """Ask every NameNode its HA state; the observers are those that answer OBSERVER."""
        found: list[NameNodeAddress] = []
        timeout = min(self.policy.rpc_timeout, OBSERVER_PROBE_TIMEOUT)
        with self._lock:
            namenodes = self.namenodes
        for nn in namenodes:
            self._stub(nn)  # makes the channel
            channel = self._channels[nn.address]
            try:
                status = namenode_pb2_grpc.HAServiceProtocolStub(channel).GetServiceStatus(
                    namenode_pb2.HAEmpty(), timeout=timeout
                )
            except grpc.RpcError as err:
                self._log.debug("observer probe: no answer", nn=nn.nn_id, error=str(err.code()))
                continue
            if status.state == namenode_pb2.OBSERVER:
                found.append(nn)
        with self._lock:
            self._observers = tuple(nn for nn in found if nn in self.namenodes)
            self._passed_over.clear()
            if set(self.namenodes) == set(namenodes):
                self._probed_at = time.monotonic()
            # else the resolver changed them meanwhile: probe again at the next read
        self._log.debug("observers found", observers=[nn.nn_id for nn in found])

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            sessions = list(self._sessions.values())
            self._channels.clear()
            self._stubs.clear()
            self._sessions.clear()
            self._resolved_cond.notify_all()
        if self.resolver is not None:
            self.resolver.close()
        for session in sessions:
            session.close()
        for channel in channels:
            channel.close()

    def __enter__(self) -> FailoverProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
