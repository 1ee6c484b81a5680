"""``hapipe verify`` reads ``$HANAMENODE_CONF`` like every other command (issue 28 item 6).

On a dev cluster (mutual TLS, a certificate per role) that has written and rolled a few
segments, ``hapipe verify`` with only ``HANAMENODE_CONF`` set verifies the configured
JournalNodes and journal over TLS, and finds every copy in agreement. An address that does
not speak TLS among them (a JournalNode's HTTP port) is named as a TLS mismatch, not as an
unreachable node. (tests/process/test_cli_errors.py has the cluster nobody can reach.)
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf import CONF_ENV, read_xml, write_xml
from conf.guard import Role
from conf.rpc_failures import TLS_NOT_SERVED
from hadev.devcluster import DevCluster
from hadev.pki import make_pki
from hanamenode.client import HaFsClient
from pipeline.cli import verify_sources
from pipeline.verify import format_report, list_rpc_segments, run_verify

pytestmark = pytest.mark.timeout(240)


def operator_conf(dev: DevCluster) -> Path:
    """The dev cluster's configuration with an operator's certificate (the admin role: a
    JournalNode lists its journal to admins and daemons only, docs/operations.md §9.2)."""
    pki = make_pki(dev.tls_dir, {"verify-admin": {Role.ADMIN}})
    props: dict[str, str] = {p.name: p.value for p in read_xml(dev.conf_path)}
    props["hanamenode.rpc.tls.cert-file"] = str(pki.cert("verify-admin"))
    props["hanamenode.rpc.tls.key-file"] = str(pki.key("verify-admin"))
    return write_xml(props, dev.base_dir / "conf" / "verify-admin.xml")


def verify(spark: SparkSession, monkeypatch: pytest.MonkeyPatch, conf: Path, *args: str) -> str:
    """What ``hapipe verify ARGS`` prints with ``HANAMENODE_CONF=conf``, run as its command
    runs it (``verify_sources``, the listing, ``run_verify``) on the suite's Spark session.
    (Its own process would start Spark again; tests/process/test_cli_errors.py runs the
    command as a process, on a cluster it cannot reach.)"""
    monkeypatch.setenv(CONF_ENV, str(conf))
    parsed = dict(zip(args[::2], args[1::2], strict=True))
    sources = verify_sources(
        None,
        journalnodes=tuple(parsed.get("--journalnodes", "").split(",")) if args else (),
        journal_ids=(parsed["--journal-id"],) if args else (),
        dirs=(),
        logtester_dirs=(),
        timeout=30.0,
    )
    listed = list_rpc_segments(
        sources.journalnodes, sources.journal_ids, sources.tls, sources.timeout,
        dict(sources.names),
    )
    return format_report(run_verify(spark, sources, listed=listed))


def test_verify_reads_the_configuration_and_names_a_tls_mismatch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DevCluster(tmp_path, session_timeout=1.0) as dev:
        dev.wait_active()
        with HaFsClient(dev.settings()) as fs:
            for i in range(20):
                fs.mkdirs(f"/v/{i}", parents=True)
        time.sleep(2.5)  # the active rolls its segment every second: finalized copies
        conf = operator_conf(dev)
        report = verify(spark, monkeypatch, conf)
        first, *_, last = report.splitlines()
        assert first.startswith("verify: 3 JournalNode(s), journals ns1: "), report
        assert " 0 finalized segments" not in first, report
        assert last == "OK: every copy agrees"

        http = dev.journalnodes[2].http_address
        listed = [jn.address for jn in dev.journalnodes[:2]] + [http]
        report = verify(
            spark, monkeypatch, conf, "--journalnodes", ",".join(listed), "--journal-id", "ns1"
        )
        assert report.splitlines()[-1] == "FAILED: 1 finding(s)", report
        assert f"    tls-mismatch: JournalNode at {http}: {TLS_NOT_SERVED}" in (
            report.splitlines()
        ), report
        assert "journalnode-unreachable" not in report
