"""``verify_logtesters`` can fail: planted duplicates and mismatches are each reported.

The LogTester system test (tests/process/test_logtester.py) passes only if this check finds
nothing, so here each kind of violation is planted in small inputs and must be named. The
acknowledged-txid files are the LogTesters' own format (``txid md5`` lines, ``read_acked``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hadev.logtester import LogTesterReport, op_digest, verify_logtesters
from proto import edits_pb2


def mkdir(txid: int, writer: str = "lt1") -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, mkdir=edits_pb2.MkdirOp(path=f"/{writer}/d{txid}"))


def acked_file(path: Path, ops: list[edits_pb2.EditOp]) -> Path:
    path.write_text("".join(f"{op.txid} {op_digest(op)}\n" for op in ops))
    return path


LOG = [mkdir(t, "lt1") for t in range(1, 6)] + [mkdir(t, "lt2") for t in range(6, 11)]
SAME_MD5S = {"jn1": {"edits_1-10": "aa"}, "jn2": {"edits_1-10": "aa"}, "jn3": {}}


def verify(
    tmp_path: Path,
    acked: dict[str, list[edits_pb2.EditOp]],
    md5s: Mapping[str, Mapping[str, str]] = SAME_MD5S,
) -> LogTesterReport:
    """``verify_logtesters`` over LOG, with each LogTester run's acked ops written to a file."""
    files = {name: acked_file(tmp_path / f"{name}.acked", ops) for name, ops in acked.items()}
    return verify_logtesters(files, LOG, md5s)


def test_a_clean_run_passes(tmp_path: Path) -> None:
    report = verify(tmp_path, {"lt1-1": LOG[:5], "lt2-1": LOG[5:8]})
    assert report.ok
    assert report.acked == 8
    assert (report.duplicates, report.missing_or_different, report.finalized_mismatches) == (
        {},
        [],
        [],
    )


def test_a_txid_acked_to_two_logtesters_is_a_duplicate(tmp_path: Path) -> None:
    # lt2's second run believes it wrote txid 5 too (same bytes, so only the claim is wrong).
    report = verify(tmp_path, {"lt1-1": LOG[:5], "lt2-2": [LOG[4], *LOG[5:7]]})
    assert not report.ok
    assert report.duplicates == {5: ["lt1-1", "lt2-2"]}
    assert report.missing_or_different == []


def test_an_acked_txid_with_other_bytes_in_the_log_is_reported(tmp_path: Path) -> None:
    planted = mkdir(3, "lt9")  # acknowledged as lt9's mkdir, but the log holds lt1's
    report = verify(tmp_path, {"lt9-1": [planted]})
    assert not report.ok
    assert report.missing_or_different == ["txid 3 acked to lt9-1 is different in the log"]
    assert report.duplicates == {}


def test_an_acked_txid_missing_from_the_log_is_reported(tmp_path: Path) -> None:
    report = verify(tmp_path, {"lt1-1": [*LOG[:2], mkdir(11)]})
    assert not report.ok
    assert report.missing_or_different == ["txid 11 acked to lt1-1 is missing from the log"]


def test_finalized_copies_that_differ_between_journalnodes_are_reported(tmp_path: Path) -> None:
    md5s = {
        "jn1": {"edits_1-5": "aa", "edits_6-10": "bb"},
        "jn2": {"edits_1-5": "aa", "edits_6-10": "cc"},
        "jn3": {"edits_6-10": "bb"},  # a copy on one JN only is not a mismatch by itself
    }
    report = verify(tmp_path, {"lt1-1": LOG[:5]}, md5s=md5s)
    assert not report.ok
    assert report.finalized_mismatches == ["edits_6-10: {'jn1': 'bb', 'jn2': 'cc', 'jn3': 'bb'}"]
