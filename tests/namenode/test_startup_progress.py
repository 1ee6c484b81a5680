"""Startup progress (docs/operations.md §13.3, ``hanamenode.startup``) of real NameNodes in
this process over real JournalNodes: the phases each records, with their figures, in
``/status.json``'s ``startup``, on the page and in the metrics.

- A standby whose tailer has not run yet shows ``loading_edits`` running, and is not
  complete.
- A first transition to active without a JournalNode quorum fails: ``becoming_active``
  says why, and the edits are still to load, by the tailer.
- The NameNode made active replays the log inside its transition: ``becoming_active`` with
  its epoch and new segment, and ``loading_edits`` done "by the transition to active".
- A standby restarted over a log of a few hundred edits replays them all in its tailer's
  first round: ``loading_edits`` from txid 1 up to the active's last txid, with the count.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from conf import Settings
from hanamenode.status import collect, render
from tests.namenode.cluster import NameNodeCluster, wait_for
from tests.status_schema import schema_problems

pytestmark = pytest.mark.timeout(120)


def phases(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in status["startup"]["phases"]}


def test_startup_phases_of_a_standby_an_active_and_a_restarted_standby(tmp_path: Path) -> None:
    # No tailer round for an hour: nn2 stays in loading_edits, nn1 replays on becoming active.
    with NameNodeCluster(tmp_path, conf={"dfs.ha.tail-edits.period": "3600"}) as c:
        waiting = collect(c.server("nn2"))
        seen = phases(waiting)
        assert list(seen) == ["loading_fsimage", "becoming_standby", "loading_edits"], seen
        image = seen["loading_fsimage"]
        assert image["status"] == "complete", image
        assert image["details"] == {"image": f"fsimage_{0:019d}.db", "txid": 0, "inodes": 1}
        assert seen["becoming_standby"]["status"] == "complete"
        assert seen["loading_edits"]["status"] == "running", seen
        assert seen["loading_edits"]["details"]["from_txid"] == 1
        assert waiting["startup"]["complete"] is False
        assert waiting["tailer"]["lag_txns"] is None, waiting["tailer"]  # not known yet
        assert "Startup in progress" in render(waiting)
        assert c.server("nn2").metrics.value("hanamenode_startup_complete") == 0.0

        c.journal.stop(1)
        c.journal.stop(2)
        with pytest.raises(grpc.RpcError, match="cannot become active"):
            c.transition_to_active("nn1")
        seen = phases(collect(c.server("nn1")))
        failed = seen["becoming_active"]
        assert failed["status"] == "failed", failed
        assert failed["error"].startswith("fencing earlier writers"), failed
        assert seen["loading_edits"]["status"] == "running", seen
        assert seen["loading_edits"]["details"]["by"] == "tailer", seen
        c.journal.start(1)
        c.journal.start(2)

        c.transition_to_active("nn1")
        active = collect(c.server("nn1"))
        seen = phases(active)
        assert list(seen) == [
            "loading_fsimage", "becoming_standby", "loading_edits", "becoming_active"
        ], seen
        assert all(p["status"] == "complete" for p in seen.values()), seen
        assert seen["loading_edits"]["details"]["by"] == "transition to active"
        became = seen["becoming_active"]["details"]
        assert became["epoch"] == active["edit_log"]["writer_epoch"], became
        assert became["first_txid"] == active["edit_log"]["current_segment_txid"], became
        assert active["startup"]["complete"] is True
        # Served, the keys of becoming_active's figures are those documented too.
        url = f"http://127.0.0.1:{c.server('nn1').metrics_port}/status.json"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert schema_problems("NameNode", [json.load(response)]) == []

        last = 0
        for i in range(300):
            last = c.mkdir("nn1", f"/startup/d{i}", create_parent=True).txid
        c.roll("nn1")  # the standby's tailer reads finalized segments here

        # nn2 again, with a tailer that runs: its first round replays the whole log.
        c.stop_nn("nn2")
        c.settings = Settings.from_mapping({**c.mapping, "dfs.ha.tail-edits.period": "0.05"})
        restarted = c.start_nn("nn2")
        wait_for(
            lambda: collect(restarted)["startup"]["complete"], 30, "nn2's startup to complete"
        )
        status = collect(restarted)
        edits = phases(status)["loading_edits"]
        assert edits["status"] == "complete" and edits["details"]["by"] == "tailer", edits
        assert edits["details"]["from_txid"] == 1, edits
        assert edits["details"]["last_txid"] >= last, (edits, last)
        assert edits["details"]["applied"] == edits["details"]["last_txid"], edits
        assert edits["details"]["target_txid"] >= edits["details"]["last_txid"], edits
        assert "becoming_active" not in phases(status)
        assert isinstance(status["tailer"]["lag_txns"], int), status["tailer"]
        html = render(status)
        assert "Startup complete" in html and f"{edits['details']['applied']:,} edits" in html

        # The same figures in the metrics, scraped over HTTP.
        url = f"http://127.0.0.1:{restarted.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert "hanamenode_startup_complete 1.0" in text, text
        applied = float(edits["details"]["applied"])
        assert f'hanamenode_startup_phase_count{{phase="loading_edits"}} {applied}' in text
        assert 'hanamenode_startup_phase_complete{phase="loading_fsimage"} 1.0' in text
