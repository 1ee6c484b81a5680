"""The startup progress recorder and its one decision (``hanamenode.startup``,
docs/operations.md §13.3): when a startup is complete, and what a running replay counts."""

from __future__ import annotations

import pytest

from hanamenode.startup import (
    Phase,
    PhaseRecord,
    PhaseStatus,
    StartupProgress,
    describe,
    is_complete,
)
from hanamenode.status import phase_figures

R, C, F = PhaseStatus.RUNNING, PhaseStatus.COMPLETE, PhaseStatus.FAILED


def records(**statuses: PhaseStatus) -> list[PhaseRecord]:
    return [PhaseRecord(Phase(name), s, 0.0, 0.0) for name, s in statuses.items()]


@pytest.mark.parametrize(
    ("statuses", "complete", "why"),
    [
        ({}, False, "nothing begun"),
        ({"loading_fsimage": R}, False, "loading the image"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": R}, False,
         "standby waiting for its first tailer round"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": C}, True,
         "standby with the edits loaded"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": C,
          "becoming_active": R}, False, "replayed in the transition, segment not open yet"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": C,
          "becoming_active": C}, True, "the first election's winner"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": C,
          "becoming_active": F}, True, "the transition failed after the replay: standby"),
        ({"loading_fsimage": C, "becoming_standby": C, "loading_edits": R,
          "becoming_active": F}, False, "the transition failed before the replay ended"),
    ],
)
def test_is_complete(statuses: dict[str, PhaseStatus], complete: bool, why: str) -> None:
    assert is_complete(records(**statuses)) is complete, why


def test_a_running_replay_counts_from_the_namespace_and_times_grow() -> None:
    progress = StartupProgress()
    progress.begin(Phase.LOADING_EDITS, from_txid=101, by="tailer")
    (record,) = progress.records()
    view = describe(progress.records(), now=record.started + 2.5, last_applied_txid=150)
    (edits,) = view["phases"]
    assert edits["status"] == "running" and edits["elapsed_seconds"] == 2.5
    assert edits["details"] == {
        "from_txid": 101, "target_txid": None, "last_txid": 150, "applied": 50, "by": "tailer",
    }
    assert view["complete"] is False and view["elapsed_seconds"] == 2.5


def test_a_phase_begins_once_and_ends_once() -> None:
    progress = StartupProgress()
    assert progress.begin(Phase.LOADING_EDITS, from_txid=1)
    assert not progress.begin(Phase.LOADING_EDITS, from_txid=7)
    assert progress.end(Phase.LOADING_EDITS, last_txid=10, applied=10)
    # The tailer's later rounds report too: they change nothing.
    assert not progress.end(Phase.LOADING_EDITS, last_txid=99, applied=99)
    progress.update(Phase.LOADING_EDITS, target_txid=99)
    (record,) = progress.records()
    assert record.status is C and record.details["last_txid"] == 10
    assert "target_txid" not in record.details
    assert not progress.end(Phase.BECOMING_ACTIVE)  # never begun
    assert not progress.fail(Phase.BECOMING_ACTIVE, "x")
    # A failed phase may begin again (a first transition to active tried again).
    assert progress.begin(Phase.BECOMING_ACTIVE)
    assert progress.fail(Phase.BECOMING_ACTIVE, "no quorum")
    assert progress.status(Phase.BECOMING_ACTIVE) is F
    assert progress.begin(Phase.BECOMING_ACTIVE, epoch=2)
    assert progress.status(Phase.BECOMING_ACTIVE) is R
    assert dict(progress.records()[-1].details) == {"epoch": 2}
    assert progress.records()[-1].error is None


def test_an_unknown_detail_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"loading_fsimage: unknown details \['txids'\]"):
        StartupProgress().begin(Phase.LOADING_FSIMAGE, txids=3)


@pytest.mark.parametrize(
    ("name", "details", "words"),
    [
        ("loading_fsimage", {"image": "fsimage_7.db", "txid": 7, "inodes": 1200},
         "fsimage_7.db: txid 7, 1,200 inodes"),
        ("loading_edits", {"from_txid": 8, "target_txid": 5000, "last_txid": 2100,
                           "applied": 2093, "by": "tailer"},
         "txid 8 to 2,100 (log end 5,000): 2,093 edits applied, by the tailer"),
        ("loading_edits", {"from_txid": 1, "target_txid": None, "last_txid": 0, "applied": 0,
                           "by": "transition to active"},
         "no edits after txid 0: 0 edits applied, by the transition to active"),
        ("loading_edits (running)", {"from_txid": 8, "target_txid": 5000, "last_txid": 2100,
                                     "applied": 2093, "by": "tailer"},
         "from txid 8 (log end 5,000): 2,093 edits applied so far, by the tailer"),
        ("becoming_active", {"epoch": 3, "recovered_txid": 99, "first_txid": 100},
         "epoch 3, log recovered to txid 99, new segment at txid 100"),
        ("becoming_active", {"epoch": 1, "recovered_txid": None, "first_txid": 1},
         "epoch 1, an empty log, new segment at txid 1"),
    ],
)
def test_what_the_page_says_of_a_phase(name: str, details: dict[str, object], words: str) -> None:
    running = name.endswith(" (running)")
    assert phase_figures(name.removesuffix(" (running)"), details, running=running) == words
