"""``deploy/prometheus.yml`` against ``conf/examples/compose-site.xml`` (issue 28 item 7).

Prometheus does not run here, so this checks what would leave a daemon unscraped or
mislabelled: the example scrapes every NameNode and JournalNode of the compose cluster's
configuration at its configured HTTP address, on ``/metrics``, each with its configured id as
the label ``id`` the dashboard shows, and nothing else. (That the dashboard's metrics are
served is tests/process/test_dashboard_metrics.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conf import load_settings

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "hanamenode.json"
CONF = ROOT / "conf" / "examples" / "compose-site.xml"


def test_the_scrape_example_names_every_daemon_of_the_compose_cluster_by_id() -> None:
    settings = load_settings(CONF)
    expected = {nn: settings.namenode(nn).http_address for nn in settings.namenode_ids}
    expected |= {jn: settings.journalnode(jn).http_address for jn in settings.journalnode_ids}
    assert len(expected) == 5, expected

    config = yaml.safe_load(PROMETHEUS.read_text())
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics", job["job_name"]
        for group in job["static_configs"]:
            (target,) = group["targets"]
            node_id = group["labels"]["id"]
            assert node_id not in scraped, f"{node_id} scraped twice"
            scraped[node_id] = target
    assert scraped == expected


def test_the_dashboard_is_grafana_json_on_one_prometheus_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
        assert panel["description"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
