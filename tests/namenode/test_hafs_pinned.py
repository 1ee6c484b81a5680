"""``hafs --namenode NN_ID``, ``hafs -fs host:port`` and ``hafs --stale-ok`` against two real
NameNodes (nn1 active, nn2 standby) on real JournalNodes: a pinned shell asks that NameNode
alone and reports its answer, a refusal included, instead of failing over (issue 11)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conf import write_xml
from hanamenode.client.shell import main
from tests.namenode.cluster import NameNodeCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NameNodeCluster, Path]]:
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        conf = write_xml(c.mapping, tmp_path / "hdfs-site.xml")
        yield c, conf


def hafs(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout (the answer), and stdout with stderr (refusals are error lines).
    The NameNodes run in this process and log to stderr meanwhile, so an answer is read
    from stdout alone."""
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.output


def test_a_pinned_shell_reports_the_standbys_refusal(
    cluster: tuple[NameNodeCluster, Path],
) -> None:
    c, conf = cluster
    reply = c.mkdir("nn1", "/a")
    # Unpinned: the shell fails over from wherever it starts to the active.
    code, answer, out = hafs("--conf", str(conf), "stat", "%F", "/a")
    assert (code, answer.strip()) == (0, "directory"), out
    # Pinned to the standby: its refusal, no failover.
    code, _, out = hafs("--conf", str(conf), "--namenode", "nn2", "stat", "%F", "/a")
    assert code == 1 and "standby" in out, out
    code, _, out = hafs("--conf", str(conf), "-fs", c.server("nn2").address, "mkdir", "/b")
    assert code == 1 and "standby" in out, out
    # Pinned to the active: answered there.
    code, _, out = hafs("--conf", str(conf), "-fs", c.server("nn1").address, "mkdir", "/b")
    assert code == 0, out
    # A stale read is asked for explicitly, and the standby may then answer.
    c.wait_caught_up("nn2", reply.txid)
    code, answer, out = hafs(
        "--conf", str(conf), "--namenode", "nn2", "--stale-ok", "stat", "%F", "/a"
    )
    assert (code, answer.strip()) == (0, "directory"), out


def test_pinning_options_are_checked(cluster: tuple[NameNodeCluster, Path]) -> None:
    _, conf = cluster
    code, _, out = hafs("--conf", str(conf), "--namenode", "nn9", "stat", "/")
    assert code == 2 and "no NameNode 'nn9'" in out and "nn1, nn2" in out, out
    code, _, out = hafs("--conf", str(conf), "-fs", "nohost", "stat", "/")
    assert code == 2 and "not host:port" in out, out
    code, _, out = hafs("--conf", str(conf), "--namenode", "nn1", "-fs", "h:1", "stat", "/")
    assert code == 2 and "not both" in out, out
