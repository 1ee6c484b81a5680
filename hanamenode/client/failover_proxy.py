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

    proxy = FailoverProxy.from_settings(settings)
    reply = proxy.call(
        "Mkdirs",
        lambda stub, header, timeout: stub.Mkdirs(
            namenode_pb2.MkdirsRequest(header=header, path="/a"), timeout=timeout
        ),
    )
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import grpc
import structlog

from conf import ConfigError, Settings, TLSSettings
from conf.rpc import make_channel
from conf.settings import ClientSettings
from hanamenode.errors import (
    EditLogError,
    NamenodeError,
    NamenodeUnavailableError,
    StandbyError,
    from_rpc_error,
)
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

Invoke = Callable[[namenode_pb2_grpc.ClientProtocolStub, namenode_pb2.RpcHeader, float], T]
"""One attempt of a call: ``(stub, header, timeout) -> reply``; it must put ``header`` in
its request unchanged and pass ``timeout`` to the stub."""


@dataclass(frozen=True, slots=True)
class NameNodeAddress:
    """One configured NameNode: its id (for messages) and the ``host:port`` to dial."""

    nn_id: str
    address: str

    def __str__(self) -> str:
        return self.address if self.nn_id == self.address else f"{self.nn_id} ({self.address})"


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


class FailoverProxy:
    """Calls ClientProtocol on whichever configured NameNode is active. Thread-safe; a
    context manager that closes its channels.

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
    ) -> None:
        if not namenodes:
            raise ValueError("a failover proxy needs at least one NameNode address")
        self.namenodes = tuple(
            nn if isinstance(nn, NameNodeAddress) else NameNodeAddress(nn, nn)
            for nn in namenodes
        )
        self.policy = policy if policy is not None else RetryPolicy()
        if pinned and len(self.namenodes) != 1:
            raise ValueError(f"a pinned proxy asks one NameNode, not {len(self.namenodes)}")
        self.pinned = pinned
        """Every call goes to the one NameNode, once: its answer (a StandbyError too) is
        the caller's, with no failover and no retry (``hafs --namenode``/``-fs``)."""
        self.client_id = client_id if client_id is not None else os.urandom(CLIENT_ID_BYTES)
        self._tls = tls
        self._channel_factory = channel_factory or (lambda a: make_channel(a, self._tls))
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._call_ids = itertools.count(1)
        self._current = 0
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, namenode_pb2_grpc.ClientProtocolStub] = {}
        self._closed = False
        self._log = log.bind(client=self.client_id.hex()[:8])

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        policy: RetryPolicy | None = None,
        *,
        client_id: bytes | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
    ) -> FailoverProxy:
        """The NameNodes of ``dfs.ha.namenodes.<ns>`` in configured order, the policy of
        ``dfs.client.*``, the channel TLS of ``hanamenode.rpc.tls.*``."""
        if not settings.namenode_ids:
            raise ConfigError(
                "no NameNodes configured",
                source=str(settings.source),
                key=f"dfs.ha.namenodes.{settings.nameservice}",
            )
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
        """The NameNode the next call tries first: the one that answered last."""
        return self.namenodes[self._current]

    def next_call_id(self) -> int:
        """A fresh call id for a new logical call (thread-safe; starts at 1)."""
        with self._lock:
            return next(self._call_ids)

    def _stub(self, nn: NameNodeAddress) -> namenode_pb2_grpc.ClientProtocolStub:
        with self._lock:
            if self._closed:
                raise NamenodeError("the client is closed")
            stub = self._stubs.get(nn.address)
            if stub is None:
                channel = self._channel_factory(nn.address)
                self._channels[nn.address] = channel
                stub = namenode_pb2_grpc.ClientProtocolStub(channel)
                self._stubs[nn.address] = stub
            return stub

    def _fail_over(self, index: int) -> int:
        """Move past NameNode ``index`` unless another thread already moved; the index the
        next attempt uses."""
        with self._lock:
            if self._current == index:
                self._current = (index + 1) % len(self.namenodes)
            return self._current

    def _answered(self, index: int) -> None:
        with self._lock:
            self._current = index

    # -- calls ---------------------------------------------------------------------------------

    def call(
        self,
        name: str,
        invoke: Invoke[T],
        *,
        call_id: int | None = None,
        allow_stale_read: bool = False,
    ) -> T:
        """Run one logical call: ``invoke(stub, header, timeout)`` on the current NameNode,
        failing over as the policy allows. ``call_id`` pins the call id (a caller's own
        retry of a call it made before); ``name`` is for messages and logs.

        Raises the NameNode's refusal as its ``NamenodeError`` class, or, when every attempt
        failed over, ``NamenodeUnavailableError`` naming each NameNode's last answer.
        """
        header = namenode_pb2.RpcHeader(
            client_id=self.client_id,
            call_id=self.next_call_id() if call_id is None else call_id,
            allow_stale_read=allow_stale_read,
        )
        policy = self.policy
        index = self._current
        answers: dict[NameNodeAddress, str] = {}
        last: NamenodeError | None = None
        for attempt in range(1, policy.max_attempts + 1):
            nn = self.namenodes[index]
            try:
                reply = invoke(self._stub(nn), header, policy.rpc_timeout)
            except grpc.RpcError as err:
                error, retriable = classify(err)
                if not retriable or self.pinned:
                    raise error from None
                last = error
                answers[nn] = f"{type(error).__name__}: {error}"
            else:
                self._answered(index)
                return reply
            if attempt == policy.max_attempts:
                break
            index = self._fail_over(index)
            delay = policy.sleep_before(attempt, self._rng.uniform(0.5, 1.5))
            self._log.info(
                "failing over",
                call=name,
                call_id=header.call_id,
                failed=nn.nn_id,
                reason=answers[nn],
                next=self.namenodes[index].nn_id,
                sleep_ms=round(delay * 1000, 1),
            )
            if delay > 0:
                self._sleep(delay)
        summary = "; ".join(f"{nn}: {answer}" for nn, answer in answers.items())
        raise NamenodeUnavailableError(
            f"{name}: no active NameNode answered in {policy.max_attempts} attempt(s): {summary}"
        ) from last

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
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
