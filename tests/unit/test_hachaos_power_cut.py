"""The ``power-cut`` nemesis of ``hachaos`` (issue 26) against a recording stand-in of the
cluster: which daemons a step's choice cuts, that the heal powers the same ones on, and that
a cluster without crash filesystems gets a skip, not a cut."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from hachaos.nemesis import Fault, Nemesis, PowerControl, Step
from tests.unit.test_hachaos import ElectingCluster


class PoweredCluster(ElectingCluster):
    """``tests/unit/test_hachaos.py``'s stand-in with an active NameNode elected at once,
    recording the power cuts and power-ons the nemesis asks for; ``crash_mounted`` says which
    daemons have a crash filesystem (jn2 stands for the small tmpfs disk of ``disk-full``)."""

    def __init__(self, crash_mounted: list[str]) -> None:
        super().__init__(elected_after=0)
        self.crash_mounted = crash_mounted
        self.cuts: list[tuple[list[str], bool, int]] = []
        self.powered_on: list[list[str]] = []

    def power_cut(self, names: Sequence[str], *, torn: bool, seed: int) -> str:
        self.cuts.append((list(names), torn, seed))
        return f"{','.join(names)}: cut"

    def power_on(self, names: Sequence[str]) -> None:
        self.powered_on.append(list(names))


def run_step(cluster: PoweredCluster, choice: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with Nemesis(cluster, [Step(0.0, Fault.POWER_CUT, 0.05, choice)], events.append,
                 time.monotonic()):
        time.sleep(0.3)
    return events


MOUNTED = ["jn1", "jn3", "nn1", "nn2"]


@pytest.mark.parametrize(
    ("choice", "names", "torn"),
    [
        (0, ["jn1"], False),  # 0 % 3: one JournalNode, 0 // 3 % 2 of the mounted ones
        (3, ["jn3"], False),
        (1, ["nn2"], False),  # 1 % 3: the active
        (2, ["jn1", "jn3", "nn1", "nn2"], False),  # 2 % 3: the rack (all that is mounted)
        (0x100 + 3, ["nn2"], True),  # 259 % 3 == 1, and bit 8: a torn write
    ],
)
def test_the_choice_picks_who_loses_power_and_the_heal_powers_them_on(
    choice: int, names: list[str], torn: bool
) -> None:
    cluster = PoweredCluster(MOUNTED)
    assert isinstance(cluster, PowerControl)
    events = run_step(cluster, choice)
    assert cluster.cuts == [(names, torn, choice)]
    assert cluster.powered_on == [names]
    phases = [e["phase"] for e in events if e.get("fault") == "power-cut"]
    assert phases == ["start", "heal"], events


def test_a_cluster_without_crash_filesystems_skips_the_power_cut() -> None:
    cluster = PoweredCluster([])
    events = run_step(cluster, 2)
    assert not cluster.cuts
    skipped = [e for e in events if e.get("fault") == "power-cut"]
    assert [(e["phase"], e["target"]) for e in skipped] == [
        ("skip", "no daemon on a crash filesystem")
    ]
