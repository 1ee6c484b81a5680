"""The checks of a ``hachaos`` run once the nemesis has healed everything and the clients
have stopped, besides linearizability (``hachaos.checker``, which reads the history):

- **every acknowledged mutation is present:** each client's never-deleted directories
  (``/chaos-acks/...``) that were acknowledged are all listed by the active; and each key's
  final state, read once more from the active, goes into the history, so the checker holds
  every acknowledged mkdir, create and delete of a key against it;
- **no txid written twice:** the finalized segments on every JournalNode's disk, hashed with
  ``hapipe verify``'s code (``pipeline.verify``: ``list_dir_segments``, ``hash_segment``,
  ``group_findings``) without Spark: copies of one segment must be identical, and no two
  distinct finalized segments may share a txid; with the ZooKeeper journal, which has no
  JournalNode, the packed segments on every NameNode's disk instead (``check_packed``:
  each NameNode's read without a gap, and a txid packed by two NameNodes holding the same
  edit on both);
- **the standby's namespace is a prefix of the active's:** once the standby has applied the
  active's last txid, it must show the same namespace (read with ``allow_stale_read``).
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conf import Settings
from hachaos.history import History, outcome
from hachaos.workload import ACKS, ROOT, key_path
from hadev.namenodes import get_service_status
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.client.client import status_from_pb
from hanamenode.errors import NamenodeError
from hanamenode.namespace import StatInfo
from proto import namenode_pb2
from zkjournal.errors import ZKJournalError
from zkjournal.packed import PackedSegments

__all__ = [
    "FINAL_POLICY",
    "Finding",
    "check_acks",
    "check_packed",
    "check_standby_prefix",
    "check_txids",
    "final_reads",
]

FINAL_POLICY = RetryPolicy(max_attempts=60, sleep_base=0.05, sleep_max=0.5, rpc_timeout=5.0)
CATCH_UP_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Finding:
    """Something wrong at the end of a run: ``kind`` (acked-missing, txid-written-twice,
    segment-mismatch, segment-unreadable, standby-diverged, standby-behind,
    standby-unreadable) and what."""

    kind: str
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.detail}"


def final_reads(settings: Settings, history: History, keys: Sequence[str], process: int) -> None:
    """Read every key (``stat``) and the root (``ls``) from the active, into the history."""
    with HaFsClient(settings, policy=FINAL_POLICY) as fs:
        for key in keys:
            history.invoke(process, key, "stat", parents=False)
            try:
                result = outcome("stat", fs.stat(key_path(key)))
            except Exception as exc:
                result = outcome("stat", error=exc)
            history.complete(process, key, "stat", result)
        history.invoke(process, "", "ls", parents=False)
        try:
            result = outcome("ls", fs.list(ROOT))
        except Exception as exc:
            result = outcome("ls", error=exc)
        history.complete(process, "", "ls", result)


def check_acks(settings: Settings, acked: Sequence[str]) -> list[Finding]:
    """Every acknowledged never-deleted directory is listed by the active."""
    with HaFsClient(settings, policy=FINAL_POLICY) as fs:
        present = {status.path for status in fs.list(ACKS)}
    missing = sorted(set(acked) - present)
    return [
        Finding("acked-missing", f"{len(missing)} of {len(acked)}: {', '.join(missing[:20])}")
    ] * bool(missing)


def require_segment_check() -> str | None:
    """Why ``check_txids`` could not run here (its module, ``pipeline.verify``, needs the
    spark extra), or None when it can: asked before a run, not discovered at its end."""
    try:
        import pipeline.verify  # noqa: F401 - only whether it imports
    except ImportError as exc:
        return (
            f"the final check hashes segments with hapipe verify's code, which cannot be "
            f"imported ({exc}): pip install 'hanamenode[spark]'"
        )
    return None


def check_txids(edits_dirs: Sequence[str]) -> tuple[int, list[Finding]]:
    """Hash every finalized segment of every JournalNode (``pipeline.verify``'s code, run
    here without Spark): (segments, findings)."""
    # Imported here, not with the module: pipeline.verify imports pyspark (the spark extra),
    # and ``hachaos --help`` or ``check`` must work with the base install; ``run`` asks for
    # it before it starts (``require_segment_check``).
    from pipeline.verify import group_findings, hash_segment, list_dir_segments

    tasks = list_dir_segments(edits_dirs)
    rows = [dict(zip(_COLUMNS, hash_segment(task), strict=True)) for task in tasks]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["journal"], row["first_txid"])].append(row)
    findings: list[Finding] = []
    for (journal, first), held in sorted(groups.items()):
        versions = {(r["last_txid"], r["length"], r["md5"]) for r in held if r["md5"] is not None}
        group = {
            "journal": journal,
            "first_txid": first,
            "versions": len(versions),
            "held": held,
            "copies": len(held),
        }
        findings += [Finding(f.kind, f.line()) for f in group_findings(group)]
    # Two distinct finalized segments of one journal that overlap hold some txid twice.
    reach: dict[str, tuple[int, int]] = {}  # journal -> the segment reaching furthest
    for journal, first, last in sorted(
        {(r["journal"], r["first_txid"], r["last_txid"]) for r in rows}
    ):
        seen = reach.get(journal)
        if seen is not None and first <= seen[1] and (first, last) != seen:
            findings.append(
                Finding(
                    "txid-written-twice",
                    f"journal {journal}: segments {seen[0]}-{seen[1]} and {first}-{last} overlap",
                )
            )
        if seen is None or last > seen[1]:
            reach[journal] = (first, last)
    return len(groups), findings


_COLUMNS = ("journal", "first_txid", "last_txid", "node", "length", "md5", "error", "source")


def check_packed(packed_dirs: Mapping[str, Path]) -> tuple[int, list[Finding]]:
    """The ZooKeeper journal's packed segments (docs/architecture.md §9.3) of each NameNode
    (name -> its ``<name dir>/zkjournal``), read once every daemon has stopped: (segments,
    findings). Each NameNode's must read from its first txid to its last without a gap or a
    damaged record (segment-unreadable); a txid that two NameNodes packed must hold the same
    edit on both (txid-written-twice: the live log gave them different edits for it)."""
    findings: list[Finding] = []
    digests: dict[str, dict[int, bytes]] = {}
    segments = 0
    for name, directory in sorted(packed_dirs.items()):
        packed = PackedSegments(directory)
        held = packed.segments()
        segments += len(held)
        digests[name] = {}
        if not held:
            continue
        try:
            for op in packed.read(held[0][0]):
                digests[name][op.txid] = hashlib.md5(op.SerializeToString()).digest()
        except ZKJournalError as exc:
            findings.append(Finding("segment-unreadable", f"{name}: {exc}"))
    names = sorted(digests)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            differ = sorted(
                t for t in digests[a].keys() & digests[b].keys() if digests[a][t] != digests[b][t]
            )
            if differ:
                findings.append(
                    Finding(
                        "txid-written-twice",
                        f"{a} and {b} packed different edits at {len(differ)} txid(s), the "
                        f"first {differ[0]}",
                    )
                )
    return segments, findings


def _listing(address: str, settings: Settings, path: str, stale: bool) -> dict[str, bool]:
    """``path``'s children (name -> is a directory) as the NameNode at ``address`` alone
    answers (a standby only with ``stale``)."""
    request = namenode_pb2.GetListingRequest(path=path)

    def invoke(stub: Any, header: Any, timeout: float) -> Any:
        request.header.CopyFrom(header)
        return stub.GetListing(request, timeout=timeout)

    one = RetryPolicy(max_attempts=3, sleep_base=0.2, sleep_max=0.5, rpc_timeout=5.0)
    with HaFsClient([address], policy=one, tls=settings.tls) as fs:
        reply = fs.proxy.call("list", invoke, allow_stale_read=stale)
    entries: list[StatInfo] = [status_from_pb(e) for e in reply.entries]
    return {e.path.rsplit("/", 1)[-1]: e.is_dir for e in entries}


def _applied_txid(address: str, settings: Settings) -> tuple[int | None, NamenodeError | None]:
    """The NameNode's last applied txid, or (None, why) while it does not answer: one that a
    fault paused or cut off a moment ago may take a few seconds to answer again."""
    try:
        return get_service_status(address, settings.tls).last_applied_txid, None
    except NamenodeError as exc:
        return None, exc


def check_standby_prefix(
    settings: Settings, active: str, standbys: dict[str, str], active_address: str
) -> list[Finding]:
    """Once each standby (id -> address) has applied the active's last txid, it must show
    the active's namespace. Called when nothing changes the namespace any more (the later
    txids of log rolls change nothing in it)."""
    findings: list[Finding] = []
    target = get_service_status(active_address, settings.tls).last_applied_txid
    for nn, address in standbys.items():
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        applied, error = _applied_txid(address, settings)
        while (applied is None or applied < target) and time.monotonic() < deadline:
            time.sleep(0.1)
            applied, error = _applied_txid(address, settings)
        if applied is None:
            findings.append(
                Finding(
                    "standby-unreadable",
                    f"{nn} did not answer its status for {CATCH_UP_TIMEOUT:g}s: {error}",
                )
            )
            continue
        if applied < target:
            findings.append(
                Finding(
                    "standby-behind",
                    f"{nn} applied up to txid {applied}, {active} is at {target}, after "
                    f"{CATCH_UP_TIMEOUT:g}s",
                )
            )
            continue
        for path in (ROOT, ACKS):
            try:
                mine = _listing(active_address, settings, path, stale=False)
                theirs = _listing(address, settings, path, stale=True)
            except NamenodeError as exc:
                findings.append(Finding("standby-unreadable", f"{nn} {path}: {exc}"))
                continue
            if mine != theirs:
                only_active = sorted(set(mine.items()) - set(theirs.items()))[:10]
                only_standby = sorted(set(theirs.items()) - set(mine.items()))[:10]
                findings.append(
                    Finding(
                        "standby-diverged",
                        f"{path} once {nn} applied txid {target}: only on {active}: "
                        f"{only_active}; only on {nn}: {only_standby}",
                    )
                )
    return findings
