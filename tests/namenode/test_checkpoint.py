"""Checkpoints and purges: an image plus the edits after it is the live namespace; a NameNode
restarts from its image and tails the rest; a purge never removes an edit that the newest
image of some NameNode does not cover."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from hanamenode import fsimage
from hanamenode.bootstrap import EditsUnavailableError, bootstrap_standby, check_edits_available
from hanamenode.checkpointer import CheckpointResult
from hanamenode.namespace import Namespace
from hanamenode.tailer import load_edits
from proto import edits_pb2, namenode_pb2
from qjm.journal_manager import QuorumJournalManager
from tests.namenode.cluster import JOURNAL_ID, NameNodeCluster, header, wait_for

pytestmark = pytest.mark.timeout(60)


@contextmanager
def reader(c: NameNodeCluster) -> Iterator[QuorumJournalManager]:
    with c.journal.qjm(JOURNAL_ID, c.fsn("nn1").ns_info) as qjm:
        yield qjm


def workload(c: NameNodeCluster, nn: str, rounds: int, tag: str) -> None:
    """Every kind of mutation, with a roll now and then so that several segments exist."""
    client = c.client(nn)
    for i in range(rounds):
        c.mkdir(nn, f"/{tag}/d{i}/e", create_parent=True)
        client.Create(
            namenode_pb2.CreateRequest(header=header(), path=f"/{tag}/d{i}/f", length=i),
            timeout=10,
        )
        if i % 3 == 0:
            client.Rename(
                namenode_pb2.RenameRequest(
                    header=header(), src=f"/{tag}/d{i}/f", dst=f"/{tag}/d{i}/g"
                ),
                timeout=10,
            )
        if i % 4 == 1:
            client.Delete(
                namenode_pb2.DeleteRequest(header=header(), path=f"/{tag}/d{i}/e"), timeout=10
            )
        if i % 10 == 9:
            c.roll(nn)


def quiesce(c: NameNodeCluster, active: str, standbys: tuple[str, ...]) -> int:
    """Roll and wait until every standby has applied the finalized log; its last txid."""
    end = c.roll(active) - 1
    for nn in standbys:
        c.wait_caught_up(nn, end)
    return end


def checkpoint(c: NameNodeCluster, nn: str) -> CheckpointResult | None:
    checkpointer = c.fsn(nn).checkpointer
    assert checkpointer is not None
    return checkpointer.do_checkpoint()


def replay(image: Path, qjm: QuorumJournalManager, up_to: int) -> Namespace:
    namespace, txid, _ = fsimage.load_image(image)

    def apply(op: edits_pb2.EditOp) -> bool:
        namespace.apply(op)
        return True

    load_edits(qjm, txid + 1, apply, up_to=up_to)
    assert namespace.last_applied_txid == up_to
    return namespace


def test_image_plus_edits_is_the_live_namespace(tmp_path: Path) -> None:
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        workload(c, "nn1", 20, "a")
        quiesce(c, "nn1", ("nn2",))
        result = checkpoint(c, "nn2")
        assert result is not None and result.uploaded_to == "nn1"
        # The active received the image: both NameNodes' newest image is the checkpoint.
        assert c.fsn("nn1").name_dir.newest_image_txid() == result.txid
        workload(c, "nn1", 15, "b")
        end = quiesce(c, "nn1", ("nn2",))
        live = c.fsn("nn1").namespace.snapshot()
        with reader(c) as qjm:
            assert replay(result.image, qjm, end).snapshot() == live
        assert c.server("nn2").metrics.value("hanamenode_checkpoints_total") == 1

        # A restarted standby loads its newest image and tails the rest.
        c.stop_nn("nn2")
        c.start_nn("nn2")
        assert c.fsn("nn2").last_applied_txid == result.txid
        c.wait_caught_up("nn2", end)
        assert c.fsn("nn2").namespace.snapshot() == live
        # And it can take over with all of it.
        c.transition_to_standby("nn1")
        c.transition_to_active("nn2")
        assert c.fsn("nn2").namespace.snapshot() == live


def test_checkpointer_thread_checkpoints_every_n_txns(tmp_path: Path) -> None:
    conf = {"dfs.namenode.checkpoint.txns": "30"}
    with NameNodeCluster(tmp_path, conf=conf) as c:
        c.transition_to_active("nn1")
        workload(c, "nn1", 12, "a")
        wait_for(
            lambda: (c.fsn("nn2").name_dir.newest_image_txid() or 0) >= 30,
            timeout=15,
            what="a checkpoint on nn2",
        )
        cp = c.fsn("nn2").checkpointer
        assert cp is not None
        wait_for(lambda: cp.last_result is not None, what="the checkpoint's upload")
        assert cp.last_result is not None and cp.last_result.uploaded_to == "nn1"
        # Never more images than retained.
        checkpoints = c.server("nn2").metrics
        for phase, count in (("b", 2), ("c", 3)):
            workload(c, "nn1", 12, phase)
            wait_for(
                lambda count=count: checkpoints.value("hanamenode_checkpoints_total") >= count,
                timeout=15,
                what=f"checkpoint {count}",
            )
        # The metric counts a save; the upload to nn1 (install, then prune) follows it.
        # Wait until the checkpointer has finished the third one before counting files.
        third = c.fsn("nn2").name_dir.newest_image_txid()
        wait_for(
            lambda: cp.last_result is not None and cp.last_result.txid >= (third or 0),
            timeout=15,
            what="the third checkpoint's upload and purge",
        )
        assert cp.last_result is not None and cp.last_result.uploaded_to == "nn1"
        assert c.fsn("nn1").name_dir.newest_image_txid() == cp.last_result.txid
        assert len(c.fsn("nn2").name_dir.images()) <= 2
        assert len(c.fsn("nn1").name_dir.images()) <= 2


def test_purge_keeps_what_the_newest_images_do_not_cover(tmp_path: Path) -> None:
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        workload(c, "nn1", 20, "a")
        quiesce(c, "nn1", ("nn2",))
        # Asked to purge everything, the active keeps what its own newest image (txid 0)
        # does not cover: nothing goes.
        c.namenode("nn1").PurgeLogs(namenode_pb2.PurgeRequest(min_txid_to_keep=10**9), timeout=10)
        with reader(c) as qjm:
            check_edits_available(qjm, 1)

        result = checkpoint(c, "nn2")
        assert result is not None and result.purged_before == result.txid + 1
        workload(c, "nn1", 5, "b")
        end = quiesce(c, "nn1", ("nn2",))
        with reader(c) as qjm:
            # Every edit after the newest images is still there, the older segments are not.
            check_edits_available(qjm, result.txid + 1)
            with pytest.raises(EditsUnavailableError):
                check_edits_available(qjm, 1)
            assert replay(result.image, qjm, end).snapshot() == (
                c.fsn("nn1").namespace.snapshot()
            )

        # A new standby bootstraps from the active's newest image and catches up.
        c.stop_nn("nn2")
        settings = c.settings
        assert settings is not None
        shutil.rmtree(settings.namenode("nn2").name_dir)
        copied = bootstrap_standby(settings, "nn2")
        assert copied.image_txid == result.txid and copied.source.nn_id == "nn1"
        c.start_nn("nn2")
        c.wait_caught_up("nn2", end)
        assert c.fsn("nn2").namespace.snapshot() == c.fsn("nn1").namespace.snapshot()


def test_no_purge_while_a_namenode_newest_image_is_unknown(tmp_path: Path) -> None:
    with NameNodeCluster(tmp_path, namenodes=3) as c:
        c.transition_to_active("nn1")
        c.stop_nn("nn3")  # its newest image is txid 0, but nobody can ask it
        workload(c, "nn1", 20, "a")
        quiesce(c, "nn1", ("nn2",))
        result = checkpoint(c, "nn2")
        assert result is not None and result.uploaded_to == "nn1"
        assert result.purged_before is None
        end = quiesce(c, "nn1", ("nn2",))
        with reader(c) as qjm:
            check_edits_available(qjm, 1)
        # nn3 comes back from its image at txid 0 and needs every edit since txid 1.
        c.start_nn("nn3")
        c.wait_caught_up("nn3", end)
        assert c.fsn("nn3").namespace.snapshot() == c.fsn("nn1").namespace.snapshot()
        # With every NameNode answering, the bound is nn3's newest image (0): still no purge
        # beyond it.
        again = checkpoint(c, "nn2")
        assert again is None or again.purged_before == 1
        with reader(c) as qjm:
            check_edits_available(qjm, 1)


def test_a_retry_of_a_call_logged_before_the_image_is_answered_after_a_restart(
    tmp_path: Path,
) -> None:
    # Issue 11: the retry cache's answers to logged calls are kept in the image, so a
    # NameNode that restarts from it still answers a retry instead of running it again.
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        client = c.client("nn1")
        mkdir_call = header()
        made = client.Mkdirs(namenode_pb2.MkdirsRequest(header=mkdir_call, path="/a"), timeout=10)
        create_call = header()
        created = client.Create(
            namenode_pb2.CreateRequest(header=create_call, path="/a/f", length=7), timeout=10
        )
        quiesce(c, "nn1", ("nn2",))
        result = checkpoint(c, "nn2")
        assert result is not None and result.txid >= created.txid
        assert c.fsn("nn1").name_dir.newest_image_txid() == result.txid
        # Both NameNodes restart: what they know of the calls comes from the image alone.
        c.transition_to_standby("nn1")
        c.stop_nn("nn1")
        c.stop_nn("nn2")
        c.start_nn("nn2")
        assert c.fsn("nn2").last_applied_txid == result.txid
        assert len(c.fsn("nn2").retry_cache) >= 2
        c.transition_to_active("nn2")
        nn2 = c.client("nn2")
        again = nn2.Mkdirs(namenode_pb2.MkdirsRequest(header=mkdir_call, path="/a"), timeout=10)
        assert (again.created, again.txid) == (True, made.txid)
        recreated = nn2.Create(
            namenode_pb2.CreateRequest(header=create_call, path="/a/f", length=7), timeout=10
        )
        assert recreated == created
        # A new call for the same path is still refused: the answers above came from the cache.
        with pytest.raises(grpc.RpcError, match="exists"):
            nn2.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/a"), timeout=10)


def slow_child_sections(
    monkeypatch: pytest.MonkeyPatch, started: Path, seconds: float
) -> None:
    """Make the checkpoint's child (``fsimage.fork_save_image``) mark ``started`` and wait
    ``seconds`` before it reads the tree: the parent is not slowed, only its copy."""
    sections = fsimage._sections

    def slowly(*args: Any) -> Iterator[dict[str, Any]]:
        started.touch()
        time.sleep(seconds)
        yield from sections(*args)

    monkeypatch.setattr(fsimage, "_sections", slowly)


def test_a_standby_answers_and_follows_the_active_while_it_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint is written by a forked child from its copy of the tree (issue 27): while
    the child writes, the standby answers reads and applies the edits pushed to it, and the
    image is the tree at the fork. Before, the standby read its tree on its loop with tailing
    held: an edit pushed meanwhile waited for the whole read."""
    conf = {
        "dfs.ha.tail-edits.in-progress": "true",
        "dfs.ha.tail-edits.push": "true",
        "dfs.ha.log-roll.period": "3600",
    }
    started = tmp_path / "child-started"
    with NameNodeCluster(tmp_path / "cluster", conf=conf) as c:
        c.transition_to_active("nn1")
        tailer = c.fsn("nn2").tailer
        assert tailer is not None
        wait_for(lambda: tailer.subscriptions == 3, what="nn2 subscribed to every JournalNode")
        last = 0
        for i in range(400):
            last = c.mkdir("nn1", f"/d{i}").txid
        c.wait_caught_up("nn2", last)
        slow_child_sections(monkeypatch, started, 2.0)

        done = threading.Event()
        result: list[CheckpointResult | None] = []

        def run_checkpoint() -> None:
            try:
                result.append(checkpoint(c, "nn2"))
            finally:
                done.set()

        threading.Thread(target=run_checkpoint, name="test-checkpoint").start()
        wait_for(started.exists, what="the checkpoint's child to start")
        during = c.mkdir("nn1", "/during").txid  # pushed to nn2 while its child writes
        stale = namenode_pb2.GetFileInfoRequest(
            header=namenode_pb2.RpcHeader(allow_stale_read=True), path="/d7"
        )
        answered = 0
        applied_while_writing = False
        while not done.is_set():
            c.client("nn2").GetFileInfo(stale, timeout=10)
            answered += 1
            if c.fsn("nn2").last_applied_txid >= during:
                applied_while_writing = not done.is_set()
                break
        assert applied_while_writing, "the pushed edit waited for the checkpoint to end"
        assert answered >= 1
        assert done.wait(30)
        [saved] = result
        assert saved is not None and saved.txid == last  # the tree as it was at the fork
        loaded, _, _ = fsimage.load_image(saved.image)
        assert loaded.exists("/d399") and not loaded.exists("/during")
        assert c.fsn("nn2").namespace.exists("/during")


def test_a_take_over_cancels_a_checkpoint_that_is_reading_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standby's checkpointer starts on its own (every 100 txns) and its child is writing
    the image when the operator fails over to it: the child is killed, its temp file
    removed, and nn2 becomes active with every edit; no image is left half written."""
    conf = {
        "dfs.namenode.checkpoint.txns": "100",
        "dfs.ha.tail-edits.in-progress": "true",
        "dfs.ha.log-roll.period": "3600",
    }
    started = tmp_path / "child-started"
    with NameNodeCluster(tmp_path / "cluster", conf=conf) as c:
        c.transition_to_active("nn1")
        slow_child_sections(monkeypatch, started, 60.0)
        end = 0
        for i in range(150):
            end = c.mkdir("nn1", f"/d{i}").txid
        wait_for(started.exists, timeout=15, what="the checkpointer's child to start")
        c.transition_to_standby("nn1")
        c.transition_to_active("nn2")
        fsn = c.fsn("nn2")
        assert fsn.last_applied_txid >= end and fsn.namespace.exists("/d149")
        assert c.mkdir("nn2", "/after").txid > end
        assert fsn.name_dir.newest_image_txid() in (None, 0)
        assert not list(fsn.name_dir.path.glob("*.tmp"))
