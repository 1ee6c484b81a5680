"""``bench.journal_backends``'s result shape (docs/benchmarks.md §2.9): every figure once per
backend with its suffix, the ZooKeeper journal's ratio to the QJM's where both measured one,
and a table row per measure with '-' for what a backend lacks."""

from __future__ import annotations

import math

from bench.journal_backends import ROWS, combine, table_rows


def test_each_key_gets_both_suffixes_and_a_ratio_only_where_it_means_something() -> None:
    result = combine({
        "qjm": {"sync_p50_us": 1000.0, "daemons": 6, "zk_log_znodes": 0, "lag": math.nan},
        "zk": {"sync_p50_us": 1500.0, "daemons": 3, "zk_log_znodes": 40, "lag": 2.0,
               "zk_only": 1.0},
    })
    assert result == {
        "sync_p50_us_qjm": 1000.0, "sync_p50_us_zk": 1500.0, "sync_p50_us_zk_to_qjm": 1.5,
        "daemons_qjm": 6, "daemons_zk": 3, "daemons_zk_to_qjm": 0.5,
        "zk_log_znodes_qjm": 0, "zk_log_znodes_zk": 40,  # no ratio to a zero
        "lag_qjm": result["lag_qjm"], "lag_zk": 2.0,  # no ratio to a NaN
        "zk_only_zk": 1.0,
    }
    assert math.isnan(result["lag_qjm"])


def test_the_table_has_a_row_per_measure_with_both_columns_and_the_ratio() -> None:
    per = {key: 200.0 for key, _ in ROWS}
    rows = table_rows(combine({"qjm": per, "zk": {**per, "sync_p50_us": 100.0}}))
    assert len(rows) == len(ROWS)
    assert rows[0][1:] == ["200", "100", "0.5"]
    assert table_rows({})[0][1:] == ["-", "-", "-"]
