"""The other NameNodes of the nameservice, as the standby's tailer and checkpointer and
``bootstrap-standby`` reach them (NamenodeProtocol and HAServiceProtocol over gRPC).

Which of them is active is found by asking (``GetServiceStatus``), remembering the answer and
asking again when the remembered one says it is standby or does not answer::

    peers = NameNodePeers.from_settings(settings, "nn2")
    peer = peers.find_active()
    peers.namenode(peer).RollEditLog(HAEmpty(), timeout=peers.timeout)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc

from conf import Settings, TLSSettings, clock
from conf.rpc import make_channel
from hanamenode.errors import NamenodeUnavailableError, StandbyError, from_rpc_error
from proto import namenode_pb2, namenode_pb2_grpc

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0

RETRY_SECONDS = 0.1
"""How soon ``until_reached`` asks again a NameNode it could not reach."""


def until_reached(call: Callable[[float], T], timeout: float) -> T:
    """``call(timeout_left)``, made again every ``RETRY_SECONDS`` while it raises
    ``NamenodeUnavailableError``, until ``timeout`` seconds have passed. A NameNode that is
    starting refuses connections, and on a loaded machine a fresh channel's connection or TLS
    handshake can fail at once: neither is an answer. Only for reads, which are safe to send
    twice. Any other error, or the last one at the deadline, is raised."""
    deadline = clock.monotonic() + timeout
    while True:
        try:
            return call(max(0.05, deadline - clock.monotonic()))
        except NamenodeUnavailableError:
            if clock.monotonic() + RETRY_SECONDS >= deadline:
                raise
            time.sleep(RETRY_SECONDS)


@dataclass(frozen=True, slots=True)
class Peer:
    nn_id: str
    address: str

    def __str__(self) -> str:
        return f"{self.nn_id} ({self.address})"


def connect_address(address: str) -> str:
    """The address to connect to for a configured listen address (0.0.0.0 -> loopback)."""
    host, _, port = address.rpartition(":")
    if host in ("0.0.0.0", "", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


class NameNodePeers:
    """Channels to the other NameNodes (made on first use, closed by ``close``)."""

    def __init__(
        self, peers: Sequence[Peer], tls: TLSSettings | None = None, timeout: float = 5.0
    ) -> None:
        self.peers = list(peers)
        self.tls = tls
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._last_active: Peer | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, nn_id: str, timeout: float = DEFAULT_TIMEOUT
    ) -> NameNodePeers:
        peers = [
            Peer(other, connect_address(settings.namenode(other).rpc_address))
            for other in settings.namenode_ids
            if other != nn_id
        ]
        return cls(peers, settings.tls, timeout)

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    def __enter__(self) -> NameNodePeers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _channel(self, peer: Peer) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(peer.address)
            if channel is None:
                channel = make_channel(peer.address, self.tls)
                self._channels[peer.address] = channel
            return channel

    def namenode(self, peer: Peer) -> namenode_pb2_grpc.NamenodeProtocolStub:
        return namenode_pb2_grpc.NamenodeProtocolStub(self._channel(peer))

    def ha(self, peer: Peer) -> namenode_pb2_grpc.HAServiceProtocolStub:
        return namenode_pb2_grpc.HAServiceProtocolStub(self._channel(peer))

    def find(self, nn_id: str) -> Peer:
        for peer in self.peers:
            if peer.nn_id == nn_id:
                return peer
        known = ", ".join(p.nn_id for p in self.peers) or "none"
        raise NamenodeUnavailableError(f"no other NameNode with id {nn_id!r} (others: {known})")

    def _ordered(self) -> list[Peer]:
        last = self._last_active
        return ([last] if last else []) + [p for p in self.peers if p != last]

    def call_active(self, what: str, fn: Callable[[Peer], T]) -> T:
        """Run ``fn(peer)`` on the active NameNode: the one remembered first, then the others;
        a StandbyError or an unreachable NameNode moves on to the next. Raises
        NamenodeUnavailableError naming every NameNode's answer when none is active."""
        answers: list[str] = []
        for peer in self._ordered():
            try:
                result = fn(peer)
            except grpc.RpcError as err:
                error = from_rpc_error(err)
                if isinstance(error, StandbyError | NamenodeUnavailableError):
                    answers.append(f"{peer}: {error}")
                    continue
                raise error from None
            self._last_active = peer
            return result
        self._last_active = None
        raise NamenodeUnavailableError(
            f"{what}: no active NameNode found: " + ("; ".join(answers) or "no other NameNodes")
        )

    def find_active(self) -> Peer:
        """The other NameNode that reports itself ACTIVE."""

        def status(peer: Peer) -> Peer:
            reply = self.ha(peer).GetServiceStatus(namenode_pb2.HAEmpty(), timeout=self.timeout)
            if reply.state != namenode_pb2.ACTIVE:
                state = namenode_pb2.HAState.Name(reply.state).lower()
                raise _NotActive(f"state is {state}")
            return peer

        answers: list[str] = []
        for peer in self._ordered():
            try:
                found = status(peer)
            except _NotActive as exc:
                answers.append(f"{peer}: {exc}")
                continue
            except grpc.RpcError as err:
                answers.append(f"{peer}: {from_rpc_error(err)}")
                continue
            self._last_active = found
            return found
        raise NamenodeUnavailableError(
            "no active NameNode found: " + ("; ".join(answers) or "no other NameNodes")
        )


class _NotActive(Exception):
    pass
