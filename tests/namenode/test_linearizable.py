"""Issue 11 in one process, on real JournalNodes and a real NameNode: answers that log nothing
(a read, a ``mkdir -p`` of an existing directory, a refused ``create``, a retry answered
from the retry cache) wait until the edits
they observed are durable, so a client is never told about a state that never reached the
log; and a read-index round confirms the epoch for every read waiting at once.

The writer's sends are held at a gate (the real QuorumJournalManager, whose ``asend_edits`` waits
for the test) so that an edit is applied and not yet durable for as long as the test needs.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from conf.mutants import Mutant, planted
from hanamenode.errors import EditLogError, PathExistsError, StandbyError, from_rpc_error
from hanamenode.ha import HAState
from proto import namenode_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager, connect_from_settings
from tests.namenode.cluster import NameNodeCluster, header, wait_for

pytestmark = pytest.mark.timeout(60)


class SendGate:
    """Holds the NameNode's journal writes while closed."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()

    def factory(self, settings: Any) -> Callable[[NamespaceInfo], QuorumJournalManager]:
        def make(ns_info: NamespaceInfo) -> QuorumJournalManager:
            qjm = connect_from_settings(settings, ns_info)
            send = qjm.asend_edits

            async def held(*args: Any) -> None:
                if not self.open.is_set():
                    self.entered.set()
                    # Off the QJM's event loop: its other calls (read-index rounds) go on.
                    assert await asyncio.to_thread(self.open.wait, 30)
                await send(*args)

            qjm.asend_edits = held  # type: ignore[method-assign]
            return qjm

        return make


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[NameNodeCluster, SendGate]]:
    gate = SendGate()
    with NameNodeCluster(tmp_path, namenodes=1) as c:
        c.stop_nn("nn1")
        assert c.settings is not None
        c.start_nn("nn1", qjm_factory=gate.factory(c.settings))
        c.transition_to_active("nn1")
        yield c, gate


def outcome(call: Callable[[], object]) -> object:
    """What the call answered, or the NamenodeError it was refused with."""
    try:
        return call()
    except grpc.RpcError as err:
        return from_rpc_error(err)


@pytest.mark.parametrize("plant", [None, Mutant.RETRY_ANSWER_BEFORE_DURABLE])
def test_answers_that_observed_a_lost_edit_are_never_given(
    gated: tuple[NameNodeCluster, SendGate], plant: Mutant | None
) -> None:
    # Planted, the retry rule's bug must show here, and only in the retry's answer: this
    # test is what holds that rule (issue 10's fifth survivor).
    with planted(*([plant] if plant else [])):
        lost_edit_answers(gated, plant)


def lost_edit_answers(gated: tuple[NameNodeCluster, SendGate], plant: Mutant | None) -> None:
    c, gate = gated
    nn1 = c.client("nn1")
    c.mkdir("nn1", "/base")
    gate.open.clear()
    lost_header = header()
    lost_call = namenode_pb2.MkdirsRequest(header=lost_header, path="/base/x")
    lost = threading.Thread(target=lambda: outcome(lambda: nn1.Mkdirs(lost_call, timeout=20)))
    lost.start()
    assert gate.entered.wait(10)  # /base/x is applied; its sync is held at the gate
    assert c.fsn("nn1").namespace.stat("/base/x").is_dir
    # The sync will fail: a majority of JournalNodes goes away before it is sent.
    c.journal.stop(0)
    c.journal.stop(1)

    answers: dict[str, object] = {}
    calls: dict[str, Callable[[], object]] = {
        "mkdir -p": lambda: nn1.Mkdirs(
            namenode_pb2.MkdirsRequest(header=header(), path="/base/x", create_parent=True),
            timeout=20,
        ).created,
        "create": lambda: nn1.Create(
            namenode_pb2.CreateRequest(header=header(), path="/base/x"), timeout=20
        ),
        # The same call again (client id and call id): the retry cache must not answer it
        # from the entry of an edit that is not durable (issue 10's fifth survivor).
        "retry": lambda: nn1.Mkdirs(
            namenode_pb2.MkdirsRequest(
                header=header(lost_header.client_id, lost_header.call_id), path="/base/x"
            ),
            timeout=20,
        ).created,
        "stat": lambda: nn1.GetFileInfo(
            namenode_pb2.GetFileInfoRequest(header=header(), path="/base/x"), timeout=20
        ).status.is_dir,
    }
    threads = [
        threading.Thread(target=lambda k=k, f=f: answers.__setitem__(k, outcome(f)), name=k)
        for k, f in calls.items()
    ]
    for t in threads:
        t.start()
    # Each of them observed /base/x; none may answer before it is durable.
    for t in threads:
        t.join(0.5)
    if plant is Mutant.RETRY_ANSWER_BEFORE_DURABLE:
        assert answers == {"retry": True}, answers
        gate.open.set()
        return
    assert answers == {}, f"answered before /base/x was durable: {answers}"
    gate.open.set()
    for t in threads:
        t.join(20)
    lost.join(20)
    for name, answer in answers.items():
        # Refused as by a NameNode that is not (or no longer) the active: not an answer
        # about /base/x, which never reached the log.
        assert isinstance(answer, StandbyError | EditLogError), f"{name} answered {answer!r}"
    wait_for(lambda: c.fsn("nn1").state is HAState.STANDBY, what="nn1 to leave ACTIVE")


def test_an_answer_a_deposed_active_could_not_confirm_is_not_kept_for_the_retry(
    tmp_path: Path,
) -> None:
    """A ``mkdir -p`` of an existing directory logs nothing; its answer (a no-op) holds only
    once a JournalNode quorum confirmed the epoch. On a deposed active that round fails, so
    the client is refused, and the answer must not stay in that NameNode's retry cache: made
    active again after the namespace moved on, it would answer the retry "no-op" about a
    path that is now a file (a linearizability violation nnsim found at seed 6 with
    e93b37d's loop hops; the retry cache recorded the answer before the confirmation)."""
    client_id = os.urandom(16)
    # No idle heartbeats: one from nn1 after nn2's new epoch would tell nn1 that it is fenced
    # (at 200 ms, a busy fresh-clone run's 310 ms transition of nn2 left time for one).
    quiet = {"dfs.qjournal.heartbeat.interval.ms": "600000"}
    with NameNodeCluster(tmp_path, conf=quiet) as c:
        c.transition_to_active("nn1")
        made = c.mkdir("nn1", "/d")
        c.wait_caught_up("nn2", made.txid)
        c.transition_to_active("nn2")  # its new epoch fences nn1, which is not told
        assert c.fsn("nn1").state is HAState.ACTIVE

        def mkdir_p(nn: str) -> object:
            request = namenode_pb2.MkdirsRequest(
                header=header(client_id, 5), path="/d", create_parent=True
            )
            return outcome(lambda: c.client(nn).Mkdirs(request, timeout=20).created)

        refused = mkdir_p("nn1")
        assert isinstance(refused, StandbyError), refused
        assert c.fsn("nn1").retry_cache.lookup(client_id, 5, "mkdir") is None

        # The namespace moves on: /d becomes a file. Then nn1 is the active again.
        nn2 = c.client("nn2")
        nn2.Delete(namenode_pb2.DeleteRequest(header=header(), path="/d"), timeout=20)
        nn2.Create(namenode_pb2.CreateRequest(header=header(), path="/d"), timeout=20)
        c.transition_to_standby("nn2")
        if c.fsn("nn1").state is not HAState.STANDBY:
            c.transition_to_standby("nn1")
        c.transition_to_active("nn1")
        assert c.fsn("nn1").namespace.stat("/d").is_dir is False

        retried = mkdir_p("nn1")  # the same call again: run now, on today's namespace
        assert isinstance(retried, PathExistsError), retried
