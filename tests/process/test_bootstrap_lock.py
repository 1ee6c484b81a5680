"""``scripts/bootstrap.sh`` runs once at a time per checkout (issue 28 item 8): two concurrent
runs once both ran pip into one ``.venv`` and crashed it. The script is run for real, in a
copy of the checkout's layout whose ``.venv`` is up to date (so it installs nothing) and with
``HANAMENODE_SKIP_APT=1``, while the test holds the lock a first run would hold.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checkout(tmp_path: Path) -> Path:
    """A directory that bootstrap.sh finds up to date: its script, a pyproject.toml, and a
    .venv whose stamp matches them."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "bootstrap.sh"
    shutil.copy2(ROOT / "scripts" / "bootstrap.sh", script)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[project]\nname = 'x'\n")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to("/bin/true")
    digest = hashlib.sha256(pyproject.read_bytes()).hexdigest()
    (tmp_path / ".venv" / ".bootstrap-stamp").write_text(f"{digest} extras=test,spark\n")
    return script


def test_a_second_run_waits_for_the_first(tmp_path: Path) -> None:
    script = checkout(tmp_path)
    env = {**os.environ, "HANAMENODE_SKIP_APT": "1"}
    env.pop("HANAMENODE_EXTRAS", None)
    with script.open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a first run holds
        second = subprocess.Popen(
            ["bash", str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            time.sleep(1.0)
            assert second.poll() is None, "the second run did not wait for the lock"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        out, err = second.communicate(timeout=60)
    assert (second.returncode, err) == (0, ""), (out, err)
    lines = out.splitlines()
    assert lines[0] == "bootstrap: another bootstrap of this checkout is running; waiting for it"
    assert lines[1] == "bootstrap: .venv is up to date with pyproject.toml"


def test_a_lone_run_does_not_wait(tmp_path: Path) -> None:
    script = checkout(tmp_path)
    env = {**os.environ, "HANAMENODE_SKIP_APT": "1"}
    env.pop("HANAMENODE_EXTRAS", None)
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert (result.returncode, result.stderr) == (0, ""), result
    assert result.stdout.splitlines()[0] == "bootstrap: .venv is up to date with pyproject.toml"
