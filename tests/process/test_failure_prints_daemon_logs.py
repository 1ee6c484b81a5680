"""A process test that fails prints the end of its daemons' logs (issue 25 item 8,
``tests/daemon_logs.py``): before, a NameNode that exited 1 on SIGTERM left nothing in the
failing test's output but the exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hadev.daemon import CODE_ROOT, child_environment

pytestmark = pytest.mark.timeout(120)

FAILING = '''
from hadev.journalnodes import start_journalnode

def test_fails_with_a_daemon_running(tmp_path):
    with start_journalnode(tmp_path, "jn7"):
        assert False, "this test fails on purpose"

def test_passes_with_a_daemon_running(tmp_path):
    with start_journalnode(tmp_path, "jn8"):
        pass
'''


def test_a_failing_test_shows_the_tail_of_each_daemon_log(tmp_path: Path) -> None:
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(FAILING)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.daemon_logs", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(test_file)],
        cwd=CODE_ROOT, env=child_environment(), capture_output=True, text=True, timeout=100,
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "1 failed, 1 passed" in out, out
    assert "daemon logs (last lines)" in out, out
    assert "journalnode jn7 (exited with 0), last 40 lines of" in out, out
    assert "journalnode started" in out, out  # a line of its log
    assert "jn8" not in out.split("daemon logs (last lines)")[1], out  # not the passing one's
