"""Every console script's ``--help``, and every subcommand's, works with only the base install
(issue 28 item 8): ``hachaos --help`` once failed with a traceback because ``hachaos.final``
imported ``pipeline.verify``, which imports pyspark.

Each script runs in a subprocess where every package of the optional extras (``test``,
``spark``, ``fast``... of pyproject.toml) is unimportable: a ``sitecustomize`` on the child's
``PYTHONPATH`` puts None in ``sys.modules`` for each, which is what Python does for a package
that is not there (``import`` raises ModuleNotFoundError, ``importlib.util.find_spec`` says
None).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPTS: dict[str, str] = PYPROJECT["scripts"]
BIN = Path(sys.executable).parent


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def extras_only_modules() -> list[str]:
    """The importable top-level names that only the optional extras install."""
    base = {_distribution(r) for r in PYPROJECT["dependencies"]}
    extras = {
        _distribution(r) for reqs in PYPROJECT["optional-dependencies"].values() for r in reqs
    } - base
    return sorted(
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if module.isidentifier()
        and all(_distribution(d) in extras for d in dists)
    )


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    blocked = extras_only_modules()
    assert "pyspark" in blocked and "uvloop" in blocked, blocked
    site = tmp_path_factory.mktemp("base-install")
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    env.pop("HANAMENODE_CONF", None)
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False
    )


def test_the_extras_are_unimportable_in_the_child(base_env: dict[str, str]) -> None:
    probe = run(
        [sys.executable, "-c", "import importlib.util, pyspark"], base_env
    )
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr, probe.stderr


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_of_every_console_script(script: str, base_env: dict[str, str]) -> None:
    result = run([str(BIN / script), "--help"], base_env)
    assert (result.returncode, result.stderr) == (0, ""), (script, result.stderr)
    assert result.stdout.startswith("Usage: "), result.stdout


# Loads the entry point as the console script does and asks each subcommand for --help, in
# one process per script (a process per subcommand would cost a Python start-up each).
SUBCOMMANDS = """
import importlib, sys, click
script, entry = sys.argv[1], sys.argv[2]
module_name, _, attr = entry.partition(":")
module = importlib.import_module(module_name)
group = getattr(module, attr)
if not isinstance(group, click.Group):
    group = getattr(module, "cli")
for name in sorted(group.commands):
    try:
        group.main([name, "--help"], prog_name=script, standalone_mode=False)
    except Exception as exc:
        print(f"{script} {name} --help: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {name}")
"""


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_of_every_subcommand(script: str, base_env: dict[str, str]) -> None:
    result = run([sys.executable, "-c", SUBCOMMANDS, script, SCRIPTS[script]], base_env)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert "ok " in result.stdout


def test_hachaos_run_says_what_it_lacks_before_it_starts(base_env: dict[str, str]) -> None:
    """Its final check hashes segments with hapipe verify's code (pyspark): a run without
    the spark extra stops at once with one line, not after the run with a traceback."""
    result = run([str(BIN / "hachaos"), "run", "--time", "1"], base_env)
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "pip install 'hanamenode[spark]'" in result.stderr, result.stderr
