"""The mutation soak's verdict and chart say which part failed (issue 28 item 10 of "Why"):
the verdict names the mutants no seed caught and the clean code's violations, by invariant
and seed; the chart shows the seed count, each value, the 5% line, and the clean code apart
from the mutants, green when clean and never drawn like an uncaught mutant. Pure: rows as
the soak's Spark tasks return them, no Spark."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.mutants import (
    MASKED,
    WEAK_FRACTION,
    MutationSoakConfig,
    MutationSoakSummary,
    format_mutation_summary,
    mutation_verdict,
    report_from_rows,
    score_figure,
    score_rows,
)
from qjm.sim.mutants import SIMULATED

SEEDS = 20
CAUGHT, WEAK, MISSED = (m.switch for m in SIMULATED[:3])


def soak_rows(clean_violations: dict[int, str]) -> tuple[MutationSoakConfig, list[Any]]:
    """A soak of three mutants over ``SEEDS`` seeds: CAUGHT in seeds 0..9, WEAK in seed 3 only
    (5% of 20 is one seed: at the line), MISSED never (masked in seed 4); the clean code
    breaks the given invariants at the given seeds."""
    config = MutationSoakConfig(first_seed=0, seeds=SEEDS, steps=80, mutants=(CAUGHT, WEAK, MISSED))
    rows: list[Any] = []
    for seed in range(SEEDS):
        rows.append(run(CAUGHT, seed, seed < 10, "epochs-unique"))
        rows.append(run(WEAK, seed, seed == 3, "acked-durable"))
        rows.append((MISSED, seed, 80, MASKED if seed == 4 else "ok", None, 0.1))
        rows.append(run("clean", seed, seed in clean_violations, clean_violations.get(seed, "")))
    return config, rows


def run(mutant: str, seed: int, caught: bool, invariant: str) -> tuple[Any, ...]:
    """One run's row (``pipeline.mutants.RUN_COLUMNS``)."""
    verdict = "violation" if caught else "ok"
    return (mutant, seed, 80, verdict, invariant if caught else None, 0.1)


def test_the_verdict_names_the_uncaught_mutant_and_the_clean_codes_violations() -> None:
    config, rows = soak_rows({7: "epochs-unique", 12: "acked-durable"})
    report = report_from_rows(rows, config)
    assert mutation_verdict(report) == (
        f"FAILED: the clean code broke acked-durable, epochs-unique in 2 of {SEEDS} seeds "
        f"(seeds 7, 12); 1 mutant(s) never caught in {SEEDS} seeds: {MISSED}"
    )
    config, rows = soak_rows({})
    report = report_from_rows(rows, config)
    assert mutation_verdict(report) == (
        f"FAILED: 1 mutant(s) never caught in {SEEDS} seeds: {MISSED}"
    )
    caught_everywhere = [r for r in rows if r[0] != MISSED]
    config = MutationSoakConfig(first_seed=0, seeds=SEEDS, steps=80, mutants=(CAUGHT, WEAK))
    assert mutation_verdict(report_from_rows(caught_everywhere, config)) == "PASSED"
    many = {seed: "epochs-unique" for seed in range(12)}
    config, rows = soak_rows(many)
    assert mutation_verdict(report_from_rows(rows, config)).startswith(
        f"FAILED: the clean code broke epochs-unique in 12 of {SEEDS} seeds "
        "(seeds 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more); "
    )


def test_the_printed_summary_ends_with_the_verdict_before_the_table() -> None:
    config, rows = soak_rows({})
    report = report_from_rows(rows, config)
    summary = MutationSoakSummary(
        config=config, table="TABLE", summary_json="{}", min_caught_fraction=0.0,
        clean_violations=0, errors=0, elapsed_seconds=1.0, out="out", chart=None,
        chart_note=None, verdict=mutation_verdict(report),
    )
    assert format_mutation_summary(summary).splitlines()[-2:] == [
        f"FAILED: 1 mutant(s) never caught in {SEEDS} seeds: {MISSED}", "TABLE"
    ]


def texts(fig: Any) -> dict[str, str]:
    """Every text drawn on the chart's axes, with its colour."""
    from matplotlib.colors import to_hex

    (ax,) = fig.axes
    return {t.get_text(): to_hex(t.get_color()) for t in ax.texts}


def test_the_chart_shows_seeds_values_the_line_and_the_clean_code_apart() -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    from matplotlib.colors import to_hex

    config, rows = soak_rows({})
    fig = score_figure(score_rows(report_from_rows(rows, config)), steps=80)
    try:
        (ax,) = fig.axes
        assert ax.get_title() == f"simulator mutation score: {SEEDS} seeds, 80 steps each"
        drawn = texts(fig)
        red, green = to_hex("tab:red"), to_hex("tab:green")
        assert drawn[f"10/{SEEDS} (50.0%)"] != red
        assert drawn[f"1/{SEEDS} (5.0%)"] == to_hex("black")  # at the line: not weak
        assert drawn[f"NOT CAUGHT: 0/{SEEDS} (0.0%)"] == red
        assert drawn[f"clean: 0 violations in {SEEDS} seeds, as it should"] == green
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            CAUGHT, WEAK, MISSED, "clean code"
        ]
        assert any(list(line.get_xdata()) == [WEAK_FRACTION] * 2 for line in ax.lines)
        (legend,) = fig.legends
        assert "5% of seeds" in legend.get_texts()[0].get_text()
    finally:
        plt.close(fig)

    config, rows = soak_rows({7: "epochs-unique"})
    fig = score_figure(score_rows(report_from_rows(rows, config)))
    try:
        assert texts(fig)[f"clean: 1/{SEEDS} seeds VIOLATED an invariant"] == to_hex("tab:red")
        assert fig.axes[0].get_title() == f"simulator mutation score: {SEEDS} seeds"
    finally:
        plt.close(fig)
