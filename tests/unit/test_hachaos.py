"""The pure parts of hachaos: the nemesis schedule (seeded, replayable), the fault names, how
a client's answer or error becomes a history entry, the replay command, ``hachaos check``."""

from __future__ import annotations

import itertools
import json
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner

from hachaos import final, runner
from hachaos.cli import cli
from hachaos.final import Finding
from hachaos.history import outcome
from hachaos.nemesis import (
    JOURNALNODE_FAULTS,
    Fault,
    Nemesis,
    Step,
    applicable_faults,
    parse_faults,
    schedule,
)
from hachaos.runner import RunOptions, replay_command
from hanamenode.errors import (
    InvalidPathError,
    NamenodeUnavailableError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import StatInfo
from proto import edits_pb2, records
from zkjournal.packed import PackedSegments


def test_schedule_is_a_function_of_the_seed() -> None:
    a = schedule(7, list(Fault), 120.0, 1.0)
    assert a == schedule(7, list(Fault), 120.0, 1.0)
    assert a != schedule(8, list(Fault), 120.0, 1.0)
    assert {s.fault for s in a} <= set(Fault)


@pytest.mark.parametrize("seed", range(10))
def test_schedule_keeps_faults_apart_and_inside_the_run(seed: int) -> None:
    steps = schedule(seed, list(Fault), 60.0, 1.0, warmup=2.0)
    assert steps, "a minute always has room for a fault"
    assert steps[0].at >= 3.0  # warm-up plus the shortest quiet spell
    for before, after in itertools.pairwise(steps):
        assert after.at >= before.at + before.duration + 1.0
    assert steps[-1].at + steps[-1].duration <= 60.0
    for step in steps:
        if step.fault is Fault.PAUSE:
            assert step.duration > 1.0  # longer than the session timeout


def test_schedule_uses_only_the_selected_faults() -> None:
    steps = schedule(3, [Fault.KILL_JN, Fault.DISK_FULL], 200.0, 1.0)
    assert {s.fault for s in steps} == {Fault.KILL_JN, Fault.DISK_FULL}
    assert schedule(3, [], 200.0, 1.0) == ()


class ElectingCluster:
    """A cluster whose active NameNode appears ``elected_after`` calls of ``active()`` from
    now (an election after a partition): what the nemesis sees of ``hachaos.cluster``."""

    namenode_ids = ["nn1", "nn2"]
    journalnode_ids = ["jn1", "jn2", "jn3"]
    disk_jn = None

    def __init__(self, elected_after: int | None) -> None:
        self.asked = 0
        self.elected_after = elected_after
        self.partitions: list[list[list[str]]] = []
        self.signals: list[tuple[str, int]] = []

    def active(self) -> str | None:
        self.asked += 1
        if self.elected_after is None or self.asked <= self.elected_after:
            return None
        return "nn2"

    def kill(self, name: str, sig: int) -> None:
        self.signals.append((name, sig))

    def restart(self, name: str) -> None:
        raise AssertionError("no restart in this test")

    def running(self, name: str) -> bool:
        return True

    def partition(self, groups: object) -> None:
        self.partitions.append([list(g) for g in groups])  # type: ignore[attr-defined]

    def heal_network(self) -> None:
        pass

    def fill_disk(self, jn_id: str) -> None:
        raise AssertionError("no disk in this test")

    def free_disk(self, jn_id: str) -> None:
        raise AssertionError("no disk in this test")


def run_nemesis(cluster: ElectingCluster, step: Step, seconds: float) -> list[dict]:
    events: list[dict] = []
    with Nemesis(cluster, [step], events.append, time.monotonic()):
        time.sleep(seconds)
    return events


def test_a_fault_aimed_at_the_active_waits_for_the_election() -> None:
    # CI once skipped partition-active: it came 1.9 s after partition-halves was healed, while
    # the NameNodes were still electing, and the run had no partition-active at all.
    cluster = ElectingCluster(elected_after=5)  # about half a second of polling
    step = Step(0.0, Fault.PARTITION_ACTIVE, 0.2, 1)
    events = run_nemesis(cluster, step, 1.5)
    phases = [(e["phase"], e["target"]) for e in events if e["type"] == "nemesis"]
    assert phases[0] == ("start", "nn2 | zk,jn1,jn2,jn3,nn1"), events
    assert ("heal", "nn2 | zk,jn1,jn2,jn3,nn1") in phases
    assert cluster.partitions == [[["nn2"], ["zk", "jn1", "jn2", "jn3", "nn1"]]]


def test_a_fault_aimed_at_the_active_is_skipped_when_the_run_stops_first() -> None:
    cluster = ElectingCluster(elected_after=None)
    events = run_nemesis(cluster, Step(0.0, Fault.KILL, 0.2, 1), 0.5)
    assert [e["phase"] for e in events if e["fault"] == "kill"] == ["skip"]
    assert cluster.asked >= 2 and not cluster.partitions
    assert signal.SIGKILL not in {sig for _, sig in cluster.signals}  # only stop's SIGCONTs


@pytest.mark.parametrize(
    ("text", "faults"),
    [
        ("all", tuple(Fault)),
        ("none", ()),
        ("kill", (Fault.KILL,)),
        ("partition-zk, kill", (Fault.KILL, Fault.PARTITION_ZK)),
    ],
)
def test_parse_faults(text: str, faults: tuple[Fault, ...]) -> None:
    assert parse_faults(text) == faults


def test_parse_faults_names_the_unknown_one() -> None:
    with pytest.raises(ValueError, match="unknown nemesis partition-nn; known: all, none, kill"):
        parse_faults("kill,partition-nn")


def test_all_with_the_zookeeper_journal_leaves_out_the_journalnode_faults() -> None:
    faults = parse_faults("all", "zookeeper")
    assert faults == applicable_faults("zookeeper")
    assert set(faults) == {
        Fault.KILL,
        Fault.KILL_STANDBY,
        Fault.PAUSE,
        Fault.PARTITION_ZK,
        Fault.PARTITION_ACTIVE,
        Fault.PARTITION_HALVES,
    }
    assert parse_faults("kill,partition-zk", "zookeeper") == (Fault.KILL, Fault.PARTITION_ZK)


REFUSED = sorted(f.value for f in (*JOURNALNODE_FAULTS, Fault.POWER_CUT))


@pytest.mark.parametrize("fault", REFUSED)
def test_a_fault_that_does_not_apply_to_the_journal_is_refused_by_name(fault: str) -> None:
    refusal = f"nemesis {fault} does not apply to the zookeeper journal"
    with pytest.raises(ValueError, match=refusal):
        parse_faults(f"kill,{fault}", "zookeeper")
    assert Fault(fault) in parse_faults(f"kill,{fault}", "qjm")


def test_an_unknown_journal_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown journal 'bookkeeper'; known: qjm, zookeeper"):
        parse_faults("all", "bookkeeper")


def test_run_refuses_a_journalnode_fault_with_the_zookeeper_journal() -> None:
    result = CliRunner().invoke(
        cli, ["run", "--journal", "zookeeper", "--nemesis", "partition-jn", "--time", "1"]
    )
    assert result.exit_code == 2, result.output
    assert "nemesis partition-jn does not apply to the zookeeper journal" in result.output


class JournalNodelessCluster(ElectingCluster):
    """A cluster on the ZooKeeper journal: no JournalNode to aim at."""

    journalnode_ids: list[str] = []


def test_without_journalnodes_a_partition_of_the_active_cuts_it_from_zookeeper_and_nn() -> None:
    cluster = JournalNodelessCluster(elected_after=0)
    events = run_nemesis(cluster, Step(0.0, Fault.PARTITION_ACTIVE, 0.2, 1), 0.6)
    assert cluster.partitions == [[["nn2"], ["zk", "nn1"]]], events


@pytest.mark.parametrize("fault", [f for f in Fault if f in JOURNALNODE_FAULTS])
def test_without_journalnodes_a_journalnode_fault_is_skipped(fault: Fault) -> None:
    cluster = JournalNodelessCluster(elected_after=0)
    events = run_nemesis(cluster, Step(0.0, fault, 0.2, 1), 0.3)
    assert [(e["phase"], e["target"]) for e in events if e["fault"] == fault.value] == [
        ("skip", "no JournalNode (the ZooKeeper journal)")
    ]
    assert not cluster.partitions
    assert {sig for _, sig in cluster.signals} == {signal.SIGCONT}  # only stop's SIGCONTs


def _stat(is_dir: bool, path: str = "/chaos/k1") -> StatInfo:
    return StatInfo(path, is_dir, 0, 0, 0o755, "u", "g", 0, 0)


@pytest.mark.parametrize(
    ("f", "result", "error", "expected"),
    [
        ("mkdir", True, None, ("ok", "created")),
        ("mkdir", False, None, ("ok", "noop")),
        ("mkdir", None, PathExistsError("x"), ("ok", "exists")),
        ("create", _stat(False), None, ("ok", "created")),
        ("create", None, PathExistsError("x"), ("ok", "exists")),
        ("create", None, PathIsDirectoryError("x"), ("ok", "is-dir")),
        ("delete", True, None, ("ok", "deleted")),
        ("delete", False, None, ("ok", "not-found")),
        ("delete", None, PathNotFoundError("x"), ("ok", "not-found")),
        ("stat", _stat(True), None, ("ok", "dir")),
        ("stat", _stat(False), None, ("ok", "file")),
        ("stat", None, PathNotFoundError("x"), ("ok", "absent")),
        (
            "ls",
            [_stat(True, "/chaos/k1"), _stat(False, "/chaos/k2")],
            None,
            ("ok", {"k1": "dir", "k2": "file"}),
        ),
        # No NameNode answered, or an answer we do not expect: it may have been applied.
        ("mkdir", None, NamenodeUnavailableError("x"), ("info", None)),
        ("delete", None, InvalidPathError("x"), ("info", None)),
        ("stat", None, TimeoutError("x"), ("info", None)),
    ],
)
def test_outcome(f: str, result: object, error: Exception | None, expected: tuple) -> None:
    kind, value, text = outcome(f, result, error)
    assert (kind, value) == expected
    assert (text is None) == (error is None)


def test_outcome_raises_what_is_not_a_call_failure() -> None:
    with pytest.raises(KeyError):
        outcome("stat", error=KeyError("a bug in the harness"))


def test_replay_command_names_everything_that_shapes_the_run() -> None:
    options = RunOptions(time=30, faults=(Fault.KILL, Fault.PAUSE), seed=42, clients=4, keys=3,
                         mutants=("x-y",))  # fmt: skip
    assert replay_command(options) == (
        "hachaos run --time 30 --nemesis kill,pause --seed 42 --clients 4 --keys 3 "
        "--pinned-readers 2 --session-timeout 1 --mutants x-y"
    )


def test_replay_command_says_all_for_every_fault() -> None:
    assert "--nemesis all " in replay_command(RunOptions(faults=tuple(Fault), seed=1))
    assert "--nemesis none " in replay_command(RunOptions(faults=(), seed=1))


def test_replay_command_names_the_zookeeper_journal() -> None:
    options = RunOptions(faults=applicable_faults("zookeeper"), seed=1, journal="zookeeper")
    assert "--nemesis all " in replay_command(options)
    assert replay_command(options).endswith(" --journal zookeeper")
    assert "--journal" not in replay_command(RunOptions(faults=(Fault.KILL,), seed=1))


def _write(path: Path, records: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_check_command_exit_status_and_report(tmp_path: Path) -> None:
    good = [
        {"type": "invoke", "process": 0, "key": "k0", "f": "mkdir", "time": 0.0},
        {"type": "ok", "process": 0, "key": "k0", "f": "mkdir", "value": "created", "time": 1.0},
        {"type": "invoke", "process": 1, "key": "k0", "f": "stat", "time": 2.0},
        {"type": "ok", "process": 1, "key": "k0", "f": "stat", "value": "dir", "time": 3.0},
    ]
    runner = CliRunner()
    result = runner.invoke(cli, ["check", _write(tmp_path / "good.jsonl", good)])
    assert result.exit_code == 0 and result.output.strip().endswith("OK")
    bad = [*good[:2], {**good[2]}, {**good[3], "value": "absent"}]
    result = runner.invoke(cli, ["check", _write(tmp_path / "bad.jsonl", bad)])
    assert result.exit_code == 1
    assert "key k0 is not linearizable" in result.output
    assert "stat k0 -> absent" in result.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "invoke"\n')
    result = runner.invoke(cli, ["check", str(broken)])
    assert result.exit_code == 2 and "line 1: not JSON" in result.output


class _SettlingDev:
    """A dev cluster whose active moves once, as an election settling after the last fault."""

    def __init__(self, actives: list[str]) -> None:
        self.actives = actives
        self.namenode_ids = ["nn1", "nn2"]

    def wait_active(self, timeout: float) -> str:
        return self.actives.pop(0) if len(self.actives) > 1 else self.actives[0]

    def namenode(self, nn: str) -> Any:
        return SimpleNamespace(address=f"{nn}:8020", running=True)


def test_the_standby_check_is_made_again_when_the_active_moved_during_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[tuple[str, list[str]]] = []

    def check(settings: Any, active: str, standbys: dict[str, str], address: str) -> list[Any]:
        checked.append((active, sorted(standbys)))
        # Read while nn1 was stepping down: its "active" reads met a standby.
        return [Finding("standby-unreadable", "nn2 /chaos: StandbyError")] * (active == "nn1")

    monkeypatch.setattr(runner, "check_standby_prefix", check)
    # nn1 looked active, then nn2 was by the end of the check, and stayed so.
    dev = cast(Any, _SettlingDev(["nn1", "nn2", "nn2"]))
    findings = runner._standby_prefix(dev, cast(Any, None))
    assert findings == [] and checked == [("nn1", ["nn2"]), ("nn2", ["nn1"])]


def test_the_standby_check_waits_for_a_standby_that_does_not_answer_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A standby that a fault paused a moment ago may not answer its status for a few seconds
    (a fresh-clone run: "connection attempt timed out before receiving SETTINGS frame"); the
    check asks again until CATCH_UP_TIMEOUT, and names one that never answers."""
    silent = {"nn2:8020": 3}

    def status(address: str, tls: Any = None, timeout: float = 5.0) -> Any:
        if silent.get(address, 0) > 0:
            silent[address] -= 1
            raise NamenodeUnavailableError("UNAVAILABLE: connection attempt timed out")
        return SimpleNamespace(last_applied_txid=42)

    monkeypatch.setattr(final, "get_service_status", status)
    monkeypatch.setattr(final, "_listing", lambda *_args, **_kw: {"k0": True})
    settings = cast(Any, SimpleNamespace(tls=None))
    assert final.check_standby_prefix(settings, "nn1", {"nn2": "nn2:8020"}, "nn1:8020") == []
    assert silent["nn2:8020"] == 0

    silent["nn2:8020"] = 10**6
    monkeypatch.setattr(final, "CATCH_UP_TIMEOUT", 0.3)
    findings = final.check_standby_prefix(settings, "nn1", {"nn2": "nn2:8020"}, "nn1:8020")
    assert [f.kind for f in findings] == ["standby-unreadable"]
    assert "did not answer its status" in findings[0].detail


def _framed(first: int, count: int, name: str = "d") -> bytes:
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, mkdir=edits_pb2.MkdirOp(path=f"/{name}{t}"))
        for t in range(first, first + count)
    )


def test_check_packed_passes_equal_edits_cut_and_purged_differently(tmp_path: Path) -> None:
    one, two = PackedSegments(tmp_path / "nn1"), PackedSegments(tmp_path / "nn2")
    one.write(1, 10, _framed(1, 10))
    one.write(11, 20, _framed(11, 10))
    two.write(6, 12, _framed(6, 7))  # purged below 6; packed at other instants
    two.write(13, 25, _framed(13, 13))
    assert final.check_packed({"nn1": one.directory, "nn2": two.directory}) == (4, [])


def test_check_packed_finds_a_txid_with_two_edits(tmp_path: Path) -> None:
    one, two = PackedSegments(tmp_path / "nn1"), PackedSegments(tmp_path / "nn2")
    one.write(1, 20, _framed(1, 20))
    two.write(1, 11, _framed(1, 11))
    two.write(12, 14, _framed(12, 3, name="other"))  # a deposed writer's edits
    _, findings = final.check_packed({"nn1": one.directory, "nn2": two.directory})
    assert findings == [
        Finding("txid-written-twice", "nn1 and nn2 packed different edits at 3 txid(s), "
                "the first 12")
    ]  # fmt: skip


def test_check_packed_finds_a_gap(tmp_path: Path) -> None:
    one = PackedSegments(tmp_path / "nn1")
    one.write(1, 5, _framed(1, 5))
    gap = one.directory / f"edits_{7:019d}-{8:019d}"
    gap.write_bytes(records.SEGMENT_HEADER + _framed(7, 2))
    segments, findings = final.check_packed({"nn1": one.directory, "nn2": tmp_path / "none"})
    assert segments == 2
    assert [f.kind for f in findings] == ["segment-unreadable"]
    assert "nn1: " in findings[0].detail and "txid 7 where 6 was next" in findings[0].detail
