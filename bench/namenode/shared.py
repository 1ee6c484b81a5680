"""What every NameNode series of ``bench.namenode_ops`` shares: the clusters' settings
(``cluster_conf``, ``--conf`` in ``EXTRA_CONF``), the client retry policy, and what is read
of the processes while a series runs: CPU seconds and run-queue wait by role (``/proc``), the
active's group-commit counters and any NameNode's samples (``/metrics``).
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import RetryPolicy

CREATE_PATH = "/bench-create"
POLICY = RetryPolicy(max_attempts=3, rpc_timeout=30.0)


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds used so far by process ``pid`` (None: this one), from
    ``/proc/<pid>/stat`` (Linux)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def role_pids(cluster: NameNodeProcessCluster) -> dict[str, list[int | None]]:
    """The processes of each role: the measuring client (this one), nn1 (active), nn2
    (standby), the NameNodes after them (``observers``: nn3 and nn4 of the observers'
    cluster; none elsewhere) and the JournalNodes."""
    return {
        "client": [None],
        "active": [cluster["nn1"].pid],
        "standby": [cluster["nn2"].pid],
        "observers": [cluster[nn].pid for nn in cluster.ids[2:]],
        "journalnodes": [jn.pid for jn in cluster.journal],
    }


ROLES = ("active", "standby", "journalnodes")
"""The daemons' roles of ``role_pids`` (without the measuring client), in table order."""


def cpu_by_role(pids: dict[str, list[int | None]]) -> dict[str, float]:
    return {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}


def run_queue_wait_seconds(pid: int | None = None) -> float:
    """Seconds the threads of process ``pid`` (None: this one) alive now have spent so far
    runnable but waiting for a CPU, from the second field of each
    ``/proc/<pid>/task/<tid>/schedstat`` (Linux; nanoseconds). A thread that ended in between
    takes its share with it, so a difference of two readings is a lower bound."""
    tasks = Path(f"/proc/{'self' if pid is None else pid}/task")
    waited = 0
    for task in tasks.iterdir():
        try:
            waited += int((task / "schedstat").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read (either errno)
    return waited / 1e9


@dataclass(frozen=True)
class RoleTimes:
    """Per role, seconds per second of a measurement: running on a CPU (``cpu``, from
    ``/proc/<pid>/stat``) and runnable but waiting in a run queue for one (``wait``, from
    ``/proc/<pid>/task/*/schedstat``). A ``wait`` well above ``cpu`` says the role's wake-ups
    queue behind other processes for the cores: the tail of a latency measured meanwhile is
    set by the machine's cores, not by the role's own work."""

    cpu: dict[str, float]
    wait: dict[str, float]

    @staticmethod
    def read(pids: dict[str, list[int | None]]) -> RoleTimes:
        """Seconds used and waited so far, by role."""
        return RoleTimes(
            cpu_by_role(pids),
            {
                role: sum(run_queue_wait_seconds(pid) for pid in group)
                for role, group in pids.items()
            },
        )

    def per_second_since(self, before: RoleTimes, elapsed: float) -> RoleTimes:
        """What was used and waited between ``before`` and this reading, per second of
        ``elapsed``."""
        return RoleTimes(
            {role: (used - before.cpu[role]) / elapsed for role, used in self.cpu.items()},
            {role: (waited - before.wait[role]) / elapsed for role, waited in self.wait.items()},
        )


SYNC_SAMPLES = (
    "hanamenode_edit_log_syncs_total",
    "hanamenode_edit_log_txns_synced_total",
    "hanamenode_edit_log_sync_seconds_sum",
)


def sync_counters(cluster: NameNodeProcessCluster) -> dict[str, float]:
    """The active's group-commit counters from its ``/metrics``."""
    url = cluster["nn1"].metrics_url
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = dict.fromkeys(SYNC_SAMPLES, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values:
                values[sample.name] = float(sample.value)
    return values


def nn_samples(url: str) -> dict[str, float]:
    """A NameNode's samples by name (``name:method`` for per-method ones), buckets left out."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "le" in sample.labels:
                continue
            method = sample.labels.get("method")
            out[f"{sample.name}:{method}" if method else sample.name] = float(sample.value)
    return out


def settled(read: Callable[[], float], quiet: float = 0.3, limit: float = 10.0) -> float:
    """``read()`` once it stopped changing for ``quiet`` seconds: calls h2load gave up on at
    the end of its window may still be served."""
    value, deadline = read(), time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(quiet)
        again = read()
        if again == value:
            break
        value = again
    return value


EXTRA_CONF: dict[str, str] = {}
"""Settings every cluster of this run gets on top of ``cluster_conf`` (``--conf KEY=VALUE``)."""


def cluster_conf(
    tail_period: float, roll_period: float, in_progress: bool, handlers: int
) -> dict[str, str | int | float | bool]:
    """The settings of the bench's clusters."""
    return {
        "dfs.ha.tail-edits.period": f"{tail_period}s",
        "dfs.ha.log-roll.period": f"{roll_period}s",
        "dfs.ha.tail-edits.in-progress": in_progress,
        "hanamenode.rpc.handler.count": handlers,
        "dfs.namenode.checkpoint.txns": 10_000_000,
        **EXTRA_CONF,
    }
