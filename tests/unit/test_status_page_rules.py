"""The one decision of the NameNode's status page (docs/operations.md §13.1): how the journal
status table describes a JournalNode of the writer, and when it counts as out of contact."""

from __future__ import annotations

import pytest

from conf.web import esc, page, table
from hanamenode.status import contact_threshold, journal_contact


@pytest.mark.parametrize(
    ("out_of_sync", "age", "expected"),
    [
        (False, 0.1, "in sync"),
        (False, 2.0, "in sync"),  # at the threshold: still in contact
        (False, 2.01, "out of contact"),
        (False, None, "out of contact"),  # never answered
        (True, 0.1, "out of sync"),
        (True, 30.0, "out of contact"),  # silence says more than the writer's mark
    ],
)
def test_journal_contact(out_of_sync: bool, age: float | None, expected: str) -> None:
    assert journal_contact(out_of_sync, age, threshold=2.0) == expected


@pytest.mark.parametrize(("interval", "threshold"), [(0.25, 2.0), (1.0, 3.0), (5.0, 15.0)])
def test_contact_threshold(interval: float, threshold: float) -> None:
    assert contact_threshold(interval) == threshold


def test_names_are_escaped_and_the_page_refreshes_itself() -> None:
    html = page("NameNode <nn1>", table(["a"], [[esc("<script>x</script>")]], id_="t"))
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "NameNode &lt;nn1&gt;" in html
    assert "fetch('status?fragment=1'" in html and "setTimeout(refresh, 2000)" in html
