"""The check that no JournalNode forgets a promise or an accepted recovery it acknowledged
(``tests/powerloss/acknowledged.py``), on journal directories laid out by hand: the power-cut
series relies on it failing when a disk lost what was acknowledged, and on it passing when
the node legitimately moved past a recovery."""

from __future__ import annotations

from pathlib import Path

from journalnode import meta_files
from journalnode.storage import AcceptedRecovery
from proto.values import SegmentState
from tests.powerloss.acknowledged import Acknowledgements, JournalNodeAcks, forgotten


def journal(
    tmp_path: Path, *, promised: int | None, writer: int = 0, paxos: dict[int, int] | None = None,
    segments: tuple[str, ...] = (),
) -> Path:
    current = tmp_path / "current"
    (current / "paxos").mkdir(parents=True)
    if promised is not None:
        (current / meta_files.LAST_PROMISED_EPOCH_FILE).write_bytes(
            meta_files.epoch_bytes(promised))
    if writer:
        (current / meta_files.LAST_WRITER_EPOCH_FILE).write_bytes(meta_files.epoch_bytes(writer))
    for segment, epoch in (paxos or {}).items():
        accepted = AcceptedRecovery(SegmentState(segment, segment + 9, True), epoch)
        (current / "paxos" / str(segment)).write_bytes(meta_files.accepted_bytes(accepted))
    for name in segments:
        (current / name).write_bytes(b"")
    return current


def acks(promised: int = 0, **accepted: int) -> JournalNodeAcks:
    return JournalNodeAcks(promised, {int(k[1:]): v for k, v in accepted.items()})


def test_a_promise_on_disk_below_the_acknowledged_one_is_forgotten(tmp_path: Path) -> None:
    current = journal(tmp_path, promised=4)
    assert forgotten("jn1", current, acks(4)) == []
    [line] = forgotten("jn1", current, acks(5))
    assert "epoch 5" in line and "last-promised-epoch holds 4" in line


def test_a_missing_or_malformed_epoch_file_is_reported(tmp_path: Path) -> None:
    current = journal(tmp_path, promised=None)
    assert "holds 0" in forgotten("jn1", current, acks(1))[0]
    (current / meta_files.LAST_PROMISED_EPOCH_FILE).write_bytes(b"\0\0")
    assert "malformed epoch file" in forgotten("jn1", current, acks(0))[0]


def test_an_accepted_recovery_must_stay_in_its_paxos_file(tmp_path: Path) -> None:
    segment = "edits_inprogress_" + "0" * 18 + "7"
    current = journal(tmp_path, promised=3, writer=2, paxos={7: 3}, segments=(segment,))
    assert forgotten("jn1", current, acks(3, s7=3)) == []
    assert "holds epoch 3" in forgotten("jn1", current, acks(3, s7=4))[0]
    (current / "paxos" / "7").unlink()
    [line] = forgotten("jn1", current, acks(3, s7=3))
    assert "paxos/7 is gone and nothing superseded it" in line


def test_a_finalized_or_later_segment_or_a_newer_writer_supersedes_it(tmp_path: Path) -> None:
    first = "0" * 18 + "7"
    cases = {
        "finalized": dict(segments=(f"edits_{first}-{'0' * 17}20",)),
        "later": dict(segments=(f"edits_inprogress_{'0' * 17}21",)),
        "newer writer": dict(writer=4, segments=(f"edits_inprogress_{first}",)),
    }
    for name, layout in cases.items():
        current = journal(tmp_path / name.replace(" ", "-"), promised=4, **layout)  # type: ignore[arg-type]
        assert forgotten("jn1", current, acks(3, s7=3)) == [], name


def test_acknowledgements_are_read_from_the_logs_line_by_line(tmp_path: Path) -> None:
    nn_log, jn_log = tmp_path / "nn1.log", tmp_path / "jn2.log"
    nn_log.write_text(
        "2026-11-28T07:02:45Z [info     ] started new epoch    [qjm.journal_manager] epoch=3 "
        "journal=ns1 promised_by=['127.0.0.1:1001', '127.0.0.1:1002']\n"
    )
    jn_log.write_text(
        "2026-11-28T07:02:46Z [info     ] accepted recovery    [journalnode.journal] epoch=3 "
        "journal=ns1 segment='[205-348 inprogress]'\n2026-11-28T07:02:46Z [info     ] accepted"
    )
    reader = Acknowledgements(
        [nn_log], {"jn1": tmp_path / "jn1.log", "jn2": jn_log},
        {"127.0.0.1:1001": "jn1", "127.0.0.1:1002": "jn2"},
    )
    reader.read()
    assert reader.by_jn["jn1"] == JournalNodeAcks(3, {})
    assert reader.by_jn["jn2"] == JournalNodeAcks(3, {205: 3})
    with open(jn_log, "a") as log:  # the half-written line, finished later
        log.write(" recovery [journalnode.journal] epoch=5 journal=ns1 segment='[349-360 "
                  "inprogress]'\n")
    reader.read()
    assert reader.by_jn["jn2"].accepted == {205: 3, 349: 5}
    reader.forget("jn2")
    assert reader.by_jn["jn2"] == JournalNodeAcks()
