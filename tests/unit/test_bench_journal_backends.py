"""``bench.journal_backends``'s pure parts (docs/benchmarks.md §2.9): every figure once per
backend with its suffix, the ZooKeeper journal's ratio to the QJM's where both measured one,
a table row per measure with '-' for what a backend lacks, the clusters' ABBA order and the
mean over a backend's clusters."""

from __future__ import annotations

import math

from bench.journal_backends import ROWS, combine, mean_of, schedule, table_rows


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


def test_the_clusters_run_abba_and_a_backends_repeats_are_averaged() -> None:
    assert schedule("qjm", 1) == ["qjm", "zk"]
    assert schedule("zk", 3) == ["zk", "qjm", "qjm", "zk", "zk", "qjm"]
    mean = mean_of([
        {"creates_per_s_32": 1000.0, "failover_max_s": 1.0, "failover_acknowledged_lost": 0,
         "lag": math.nan},
        {"creates_per_s_32": 2000.0, "failover_max_s": 1.5, "failover_acknowledged_lost": 2,
         "lag": math.nan},
    ])
    assert {k: v for k, v in mean.items() if k != "lag"} == {
        "creates_per_s_32": 1500.0, "failover_max_s": 1.5, "failover_acknowledged_lost": 2,
    }
    assert math.isnan(mean["lag"])
