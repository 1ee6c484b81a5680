"""``hanamenode format``, ``bootstrap-standby`` and ``run``: what they do, what they refuse, and
the one-line errors they exit with."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conf import Settings, write_xml
from hadev.minicluster import MiniJournalCluster
from hanamenode.bootstrap import bootstrap_standby
from hanamenode.errors import NamenodeUnavailableError
from hanamenode.server import NameNodeServer
from hanamenode.storage import NameDirectory
from namenoded.cli import main
from tests.namenode.cluster import namenode_conf

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path / "journal") as cluster:
        yield cluster


@pytest.fixture
def conf(tmp_path: Path, journal: MiniJournalCluster) -> tuple[Path, dict[str, object]]:
    mapping = namenode_conf(tmp_path, journal.addresses, ["nn1", "nn2"])
    mapping["hanamenode.rpc.tls.enabled"] = False  # plaintext, asked for
    return write_xml(mapping, tmp_path / "hdfs-site.xml"), mapping


def invoke(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=input)
    return result.exit_code, result.output


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, output
    return lines[0]


def test_format_refuses_existing_data_unless_forced_or_confirmed(
    conf: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    path, _ = conf
    code, output = invoke("format", "--conf", str(path), "--id", "nn1", "--non-interactive")
    assert code == 0, output
    name_dir = NameDirectory(tmp_path / "nn1")
    first = name_dir.read_version()
    assert name_dir.newest_image_txid() == 0

    code, output = invoke("format", "--conf", str(path), "--id", "nn1", "--non-interactive")
    assert code == 1
    line = error_line(output)
    assert "existing data in JournalNode" in line and "use --force" in line
    assert name_dir.read_version() == first

    code, output = invoke("format", "--conf", str(path), "--id", "nn1", input="n\n")
    assert code == 1 and "not erased" in error_line(output)
    assert name_dir.read_version() == first

    code, output = invoke("format", "--conf", str(path), "--id", "nn1", input="y\n")
    assert code == 0, output
    second = name_dir.read_version()
    assert second.cluster_id != first.cluster_id

    code, output = invoke(
        "format", "--conf", str(path), "--id", "nn1", "--force", "--cluster-id", "CID-mine"
    )
    assert code == 0, output
    assert name_dir.read_version().cluster_id == "CID-mine"


def test_bootstrap_standby_copies_the_other_namenode(
    conf: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    path, mapping = conf
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0
    with NameNodeServer(Settings.from_mapping(mapping), "nn1"):
        code, output = invoke("bootstrap-standby", "--conf", str(path), "--id", "nn2")
        assert code == 0, output
        assert "image at txid 0" in output
        code, output = invoke(
            "bootstrap-standby", "--conf", str(path), "--id", "nn2", "--non-interactive"
        )
        assert code == 1 and "already holds data" in error_line(output)
    nn1 = NameDirectory(tmp_path / "nn1")
    nn2 = NameDirectory(tmp_path / "nn2")
    assert nn2.read_version() == nn1.read_version()
    assert nn2.newest_image_txid() == 0


def test_bootstrap_standby_waits_for_the_namenode_it_copies_from(
    conf: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """Run while nn1 is still starting (it refuses connections), bootstrap-standby asks
    again until nn1 answers, instead of failing at the first refused connection."""
    path, mapping = conf
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0
    up, done = threading.Event(), threading.Event()

    def start_nn1_late() -> None:
        time.sleep(1.5)
        with NameNodeServer(Settings.from_mapping(mapping), "nn1"):
            up.set()
            done.wait(30)

    late = threading.Thread(target=start_nn1_late)
    late.start()
    try:
        code, output = invoke("bootstrap-standby", "--conf", str(path), "--id", "nn2")
    finally:
        done.set()
        late.join()
    assert up.is_set() and code == 0, output
    assert NameDirectory(tmp_path / "nn2").read_version() == (
        NameDirectory(tmp_path / "nn1").read_version()
    )


def test_bootstrap_standby_gives_up_naming_the_namenodes_it_could_not_reach(
    conf: tuple[Path, dict[str, object]],
) -> None:
    path, mapping = conf
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0
    with pytest.raises(NamenodeUnavailableError) as err:
        bootstrap_standby(Settings.from_mapping(mapping), "nn2", reach_timeout=0.5)
    assert "no other NameNode answered: nn1 (" in str(err.value)


def test_run_refuses_an_unformatted_name_dir(conf: tuple[Path, dict[str, object]]) -> None:
    path, _ = conf
    code, output = invoke("run", "--conf", str(path), "--id", "nn1")
    assert code == 1
    line = error_line(output)
    assert "is not formatted" in line and "hanamenode format" in line


def test_run_refuses_a_busy_port(conf: tuple[Path, dict[str, object]]) -> None:
    path, mapping = conf
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0
    host, port = str(mapping["dfs.namenode.rpc-address.ns1.nn1"]).rsplit(":", 1)
    with socket.socket() as busy:
        busy.bind((host, int(port)))
        busy.listen()
        code, output = invoke("run", "--conf", str(path), "--id", "nn1")
    assert code == 1
    assert "address already in use" in error_line(output)


def test_run_refuses_plaintext_it_was_not_asked_for(
    conf: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    _, mapping = conf
    unasked = {k: v for k, v in mapping.items() if k != "hanamenode.rpc.tls.enabled"}
    path = write_xml(unasked, tmp_path / "no-tls.xml")
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0  # a tool, not a daemon
    code, output = invoke("run", "--conf", str(path), "--id", "nn1")
    assert code == 1
    line = error_line(output)
    assert "hanamenode.rpc.tls.enabled: mutual TLS is not configured" in line, line
    assert "set this key to false to serve plaintext" in line


def test_run_reports_a_bad_configuration(tmp_path: Path) -> None:
    path = write_xml({"dfs.nameservices": "ns1", "dfs.namenode.nmae.dir": "/x"}, tmp_path / "c.xml")
    code, output = invoke("run", "--conf", str(path), "--id", "nn1")
    assert code == 1
    assert "bad configuration" in error_line(output)


def test_run_serves_until_sigterm(conf: tuple[Path, dict[str, object]]) -> None:
    path, _ = conf
    assert invoke("format", "--conf", str(path), "--id", "nn1")[0] == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "namenoded", "run", "--conf", str(path), "--id", "nn1",
         "--log-format", "json"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:
            seen.append(line)
            if "serving on" in line:
                assert "as standby" in line
                break
        else:
            pytest.fail("the NameNode exited before serving")
        # Plaintext was asked for: one warning at start says what it allows.
        warnings = [line for line in seen if "serving plaintext RPC" in line]
        assert len(warnings) == 1 and '"level": "warning"' in warnings[0], seen
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)  # drains stderr so the child never blocks on it
        # On failure, the NameNode's own words: its last log lines (issue 25 item 8).
        tail = "".join([*seen, rest]).splitlines()[-40:]
        assert proc.returncode == 0, "NameNode log tail:\n" + "\n".join(tail)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
