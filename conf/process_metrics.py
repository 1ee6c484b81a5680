"""What every daemon's ``/metrics`` says about its process and its build (issue 28 item 7;
docs/operations.md §5): prometheus-client's ``process_*`` (CPU seconds, resident and virtual
memory, open and maximum descriptors, start time) and ``python_info``, and
``<daemon>_build_info`` (always 1) whose labels are the installed version, the git commit of
the source tree it runs from (``unknown`` outside a checkout) and the Python version::

    install_process_metrics(registry, "journalnode")
    # journalnode_build_info{commit="c97990c...",python="3.11.2",version="0.1.0"} 1.0

A daemon that reports a different commit than its peers runs other code: what an operator
checks first after an upgrade, and what the dashboard in ``deploy/`` shows.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector

__all__ = ["BuildInfo", "build_info", "install_process_metrics"]

log = structlog.get_logger(__name__)

DISTRIBUTION = "hanamenode"
"""The installed distribution whose version is reported (pyproject.toml's name)."""
SOURCE_ROOT = Path(__file__).resolve().parents[1]
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """The version and git commit of the code this process runs."""

    version: str
    commit: str


@functools.cache
def build_info(root: Path = SOURCE_ROOT) -> BuildInfo:
    """This process's ``BuildInfo``, read once: the distribution's version, and the commit
    ``git rev-parse HEAD`` gives in ``root`` (``unknown`` when it is no checkout, git is
    missing, or it fails)."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = UNKNOWN
    return BuildInfo(version, _git_commit(root))


def _git_commit(root: Path) -> str:
    if not (root / ".git").exists():
        return UNKNOWN
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("cannot read the git commit of the source tree", root=str(root),
                    error=str(exc))
        return UNKNOWN
    commit = done.stdout.strip()
    if done.returncode != 0 or not commit:
        log.warning("cannot read the git commit of the source tree", root=str(root),
                    error=done.stderr.strip())
        return UNKNOWN
    return commit


def install_process_metrics(registry: CollectorRegistry, daemon: str) -> None:
    """Register ``process_*``, ``python_info`` and ``<daemon>_build_info`` in ``registry``."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    info = build_info()
    Gauge(
        f"{daemon}_build_info",
        "Always 1: the version, git commit and Python version of the code this process runs",
        ["version", "commit", "python"],
        registry=registry,
    ).labels(info.version, info.commit, platform.python_version()).set(1)
