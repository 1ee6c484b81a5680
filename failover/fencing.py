"""Fencing methods (docs/architecture.md §6.3; HDFS ``NodeFencer`` and ``ShellCommandFencer``).

``dfs.ha.fencing.methods`` lists methods one per line, tried in order until one succeeds,
after the graceful fence (asking the old active to step down over RPC) has failed. The one
method is ``shell(command)``: ``/bin/sh -c command`` with the target in its environment, a
success when it exits 0. ``shell(/bin/true)`` is the documented default because the real
fence is the QJM epoch: the new active's ``newEpoch`` makes every JournalNode refuse the old
writer, whatever the old process still believes::

    fencer = NodeFencer.from_settings(settings)          # ConfigError for a bad method
    target = FenceTarget("ns1", "nn1", "10.0.0.1:8020")
    result = fencer.fence(target)
    result.succeeded, result.method                      # True, "shell(/bin/true)"

The command sees ``HANAMENODE_TARGET_ID``, ``HANAMENODE_TARGET_HOST``,
``HANAMENODE_TARGET_PORT``, ``HANAMENODE_TARGET_ADDRESS``, ``HANAMENODE_NAMESERVICE`` and
Hadoop's names for the same (``target_namenodeid``, ``target_host``, ``target_port``,
``target_address``, ``target_nameserviceid``), so HDFS fencing scripts run unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from conf import ConfigError, Settings

__all__ = [
    "FENCING_KEY",
    "FenceAttempt",
    "FenceMethod",
    "FenceResult",
    "FenceTarget",
    "NodeFencer",
    "parse_fence_method",
]

log = structlog.get_logger(__name__)

FENCING_KEY = "dfs.ha.fencing.methods"
SHELL_TIMEOUT = 60.0
"""Longest a ``shell(...)`` command may run before it is killed and counted as a failure."""

_METHOD_RE = re.compile(r"(?P<name>[A-Za-z][\w.-]*)(?:\((?P<arg>.*)\))?", re.DOTALL)
_OUTPUT_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class FenceTarget:
    """The NameNode to fence: who it is and where its RPC server listens."""

    nameservice: str
    namenode_id: str
    address: str

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> str:
        return self.address.rpartition(":")[2]

    def environment(self) -> dict[str, str]:
        """The variables a ``shell(...)`` command sees, ours and Hadoop's."""
        return {
            "HANAMENODE_TARGET_ID": self.namenode_id,
            "HANAMENODE_TARGET_HOST": self.host,
            "HANAMENODE_TARGET_PORT": self.port,
            "HANAMENODE_TARGET_ADDRESS": self.address,
            "HANAMENODE_NAMESERVICE": self.nameservice,
            "target_namenodeid": self.namenode_id,
            "target_host": self.host,
            "target_port": self.port,
            "target_address": self.address,
            "target_nameserviceid": self.nameservice,
        }

    def __str__(self) -> str:
        return f"{self.namenode_id} ({self.address})"


@dataclass(frozen=True, slots=True)
class FenceMethod:
    """One configured method: its name and the text in its parentheses."""

    name: str
    arg: str

    def __str__(self) -> str:
        return f"{self.name}({self.arg})"


def parse_fence_method(text: str) -> FenceMethod:
    """``shell(/path/to/script args)`` -> ``FenceMethod("shell", "/path/to/script args")``;
    ConfigError for an unknown method or a shell without a command."""
    match = _METHOD_RE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"expected a fencing method like shell(command), got {text!r}",
                          key=FENCING_KEY)
    name, arg = match.group("name"), (match.group("arg") or "").strip()
    if name != "shell":
        raise ConfigError(
            f"unknown fencing method {name!r} in {text!r} (supported: shell(command))",
            key=FENCING_KEY,
        )
    if not arg:
        raise ConfigError(f"shell fencing needs a command, e.g. shell(/bin/true), got {text!r}",
                          key=FENCING_KEY)
    return FenceMethod(name, arg)


@dataclass(frozen=True, slots=True)
class FenceAttempt:
    method: str
    succeeded: bool
    detail: str
    seconds: float


@dataclass(frozen=True, slots=True)
class FenceResult:
    """What ``NodeFencer.fence`` did: every attempt, and the method that succeeded (if any)."""

    target: FenceTarget
    attempts: tuple[FenceAttempt, ...] = field(default_factory=tuple)

    @property
    def succeeded(self) -> bool:
        return any(a.succeeded for a in self.attempts)

    @property
    def method(self) -> str | None:
        return next((a.method for a in self.attempts if a.succeeded), None)

    def describe(self) -> str:
        return "; ".join(f"{a.method}: {a.detail}" for a in self.attempts) or "no methods"


class NodeFencer:
    """The configured methods, run in order until one succeeds."""

    def __init__(self, methods: Sequence[FenceMethod], *, shell_timeout: float = SHELL_TIMEOUT):
        if not methods:
            raise ConfigError("no fencing method configured, e.g. shell(/bin/true)",
                              key=FENCING_KEY)
        self.methods = tuple(methods)
        self.shell_timeout = shell_timeout

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeFencer:
        return cls([parse_fence_method(m) for m in settings.ha.fencing_methods])

    def fence(self, target: FenceTarget) -> FenceResult:
        """Try each method on ``target``; never raises for a failing method (it is logged and
        the next one is tried)."""
        attempts: list[FenceAttempt] = []
        for method in self.methods:
            started = time.monotonic()
            succeeded, detail = self._shell(method, target)
            attempt = FenceAttempt(str(method), succeeded, detail, time.monotonic() - started)
            attempts.append(attempt)
            if succeeded:
                log.info("fenced", target=str(target), method=str(method), detail=detail)
                break
            log.warning(
                "fencing method failed", target=str(target), method=str(method), detail=detail
            )
        result = FenceResult(target, tuple(attempts))
        if not result.succeeded:
            log.error("every fencing method failed", target=str(target), tried=result.describe())
        return result

    def _shell(self, method: FenceMethod, target: FenceTarget) -> tuple[bool, str]:
        env = {**os.environ, **target.environment()}
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", method.arg],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.shell_timeout,
            )
        except subprocess.TimeoutExpired:
            return False, f"did not exit within {self.shell_timeout:g}s (killed)"
        except OSError as exc:
            return False, f"could not run /bin/sh: {exc}"
        output = (proc.stdout + proc.stderr).strip()
        if output:
            log.info(
                "fencing command output",
                target=str(target),
                method=str(method),
                output=output[-_OUTPUT_LIMIT:],
            )
        last = output.splitlines()[-1] if output else ""
        detail = f"exit status {proc.returncode}" + (f" ({last})" if last else "")
        return proc.returncode == 0, detail
