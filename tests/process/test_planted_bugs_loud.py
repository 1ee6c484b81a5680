"""Planted bugs are loud (issue 25 item 7): a NameNode and JournalNodes started as real
processes with ``HANAMENODE_MUTANTS`` set each log a warning at start naming every mutant,
show them on the status page and in ``/status.json`` (``planted_bugs``, docs/operations.md
§13.2), and export ``hanamenode_planted_bugs`` / ``journalnode_planted_bugs`` with one sample
of value 1 per mutant. A daemon started without the variable shows none of it.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf.mutants import MUTANTS_ENV, Mutant, mutant_env
from hadev.namenodes import NameNodeProcessCluster
from tests.status_schema import schema_problems

pytestmark = pytest.mark.timeout(180)

# Harmless in a test that writes nothing: one JournalNode purge rule, one roll rule.
PLANTED = (Mutant.PURGE_INCLUSIVE, Mutant.ROLL_GATE_IN_TASK)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _planted_samples(metrics_url: str, name: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(_get(metrics_url)):
        for s in family.samples:
            if s.name == name:
                found[s.labels["mutant"]] = s.value
    return found


def _status_base(metrics_url: str) -> str:
    return metrics_url.removesuffix("/metrics")


def test_planted_bugs_are_logged_shown_and_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switches = sorted(m.switch for m in PLANTED)
    # The launchers hand the children this process's environment (child_environment).
    monkeypatch.setenv(MUTANTS_ENV, mutant_env(*PLANTED)[MUTANTS_ENV])
    with NameNodeProcessCluster(tmp_path / "on", namenodes=1, journal_nodes=1) as c:
        nn = c["nn1"]
        jn = c.journal.nodes[0]
        assert nn.metrics_url is not None
        daemons = [
            ("NameNode", nn.metrics_url, "hanamenode_planted_bugs", nn.log_path),
            ("JournalNode", jn.metrics_url, "journalnode_planted_bugs", jn.log_path),
        ]
        for kind, metrics_url, metric, log_path in daemons:
            log_text = log_path.read_text()
            warnings = [line for line in log_text.splitlines() if "planted bugs are ON" in line]
            assert len(warnings) == 1, (kind, log_text[-3000:])
            for switch in switches:
                assert switch in warnings[0], (kind, warnings[0])
            assert _planted_samples(metrics_url, metric) == {s: 1.0 for s in switches}, kind
            base = _status_base(metrics_url)
            served = json.loads(_get(f"{base}/status.json"))
            assert [b["switch"] for b in served["planted_bugs"]] == switches, kind
            assert all(b["description"] for b in served["planted_bugs"])
            assert not schema_problems(kind, [served])
            html = _get(f"{base}/status")
            assert "id='planted-bugs'" in html, kind
            for switch in switches:
                assert switch in html, (kind, switch)

    monkeypatch.delenv(MUTANTS_ENV)
    with NameNodeProcessCluster(tmp_path / "off", namenodes=1, journal_nodes=1) as c:
        nn = c["nn1"]
        jn = c.journal.nodes[0]
        assert nn.metrics_url is not None
        for metrics_url, metric, log_path in (
            (nn.metrics_url, "hanamenode_planted_bugs", nn.log_path),
            (jn.metrics_url, "journalnode_planted_bugs", jn.log_path),
        ):
            assert "planted bugs are ON" not in log_path.read_text()
            assert _planted_samples(metrics_url, metric) == {}
            # The family is exported even when empty, so a dashboard can alert on any sample.
            assert f"# TYPE {metric} gauge" in _get(metrics_url)
            base = _status_base(metrics_url)
            assert json.loads(_get(f"{base}/status.json"))["planted_bugs"] == []
            assert "planted-bugs" not in _get(f"{base}/status")
