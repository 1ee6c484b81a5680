"""Issue 10's surviving rule changes, planted one at a time (``conf.mutants``): the test
written for each must fail with it on, and pass with it off."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conf.mutants import Mutant, planted
from journalnode.file_storage import FileJournalStorage
from journalnode.segment_names import finalized_name
from tests.storage import test_file_storage as storage_tests
from tests.storage import test_segment_stream as name_tests
from tests.unit import test_journal as journal_tests
from tests.unit import test_journaled_edits as reader_tests

E = reader_tests.E
NOTHING = reader_tests.NOTHING


def checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[Mutant, list[Callable[[], None]]]:
    def fdatasync_check() -> None:
        with FileJournalStorage(tmp_path, f"j{len(list(tmp_path.iterdir()))}") as st:
            st.format(storage_tests.NS)
            with monkeypatch.context() as m:
                storage_tests.test_append_is_fdatasynced_after_its_write(st, m)

    def purge_on_disk() -> None:
        with FileJournalStorage(tmp_path, f"p{len(list(tmp_path.iterdir()))}") as st:
            st.format(storage_tests.NS)
            storage_tests.test_purge_keeps_what_holds_the_first_txid_to_keep(st)

    return {
        Mutant.PURGE_INCLUSIVE: [
            lambda: name_tests.test_purgeable(finalized_name(1, 10), 10, False),
            purge_on_disk,
            journal_tests.test_purge_keeps_a_segment_ending_at_the_first_txid_to_keep,
        ],
        Mutant.RESTART_TWO_TXN_SEGMENT: [
            lambda: journal_tests.test_start_log_segment_refuses_an_in_progress_segment_with_data(
                2
            ),
        ],
        Mutant.APPEND_WITHOUT_FDATASYNC: [fdatasync_check],
        Mutant.TAIL_MAJORITY_OF_ANSWERS: [
            lambda: reader_tests.test_reader_applies_only_what_a_majority_holds_in_one_epoch(
                {"jn1": E(4, 7, b""), "jn2": E(4, 7, b""), "jn3": NOTHING}, 5, None
            ),
        ],
    }


SURVIVORS = [
    Mutant.PURGE_INCLUSIVE,
    Mutant.RESTART_TWO_TXN_SEGMENT,
    Mutant.APPEND_WITHOUT_FDATASYNC,
    Mutant.TAIL_MAJORITY_OF_ANSWERS,
]


@pytest.mark.parametrize("mutant", SURVIVORS, ids=lambda m: m.switch)
def test_each_survivor_is_caught(
    mutant: Mutant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for check in checks(tmp_path, monkeypatch)[mutant]:
        check()
        # A failed assert, or pytest's "DID NOT RAISE" for a refusal that did not happen.
        with planted(mutant), pytest.raises((AssertionError, pytest.fail.Exception)):
            check()
