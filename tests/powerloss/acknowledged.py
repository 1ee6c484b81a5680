"""What the JournalNodes acknowledged, read after the fact, and whether a JournalNode's disk
still holds it after a power cut (issue 26, docs/protocol.md §14.3).

A JournalNode that answers ``NewEpoch(e)`` has promised never to accept a writer below ``e``;
one that answers ``AcceptRecovery`` has voted for a segment in Paxos phase 2 (HDFS-3077
§2.8). Both must be durable before the answer: a node that forgets either after a cut can
let two writers decide differently. The acknowledgements come from the logs, which live on
the test machine's own disk (never on a crash mount), read line by line from where the last
read stopped:

- each NameNode's ``started new epoch`` line: the QJM writer's record of the JournalNodes
  whose ``NewEpoch`` answered (the client side);
- each JournalNode's ``accepted recovery`` line: written after the paxos file was persisted
  and before the answer (the node's own acknowledgement log).

``forgotten`` compares them with a JournalNode's ``current/`` directory as the disk holds it
after the cut (the backing directory, before the node is powered on again): the promised
epoch file holds at least the highest acknowledged promise, and each acknowledged accepted
recovery of segment ``s`` in epoch ``e`` is still there (``paxos/s`` accepted in ``e`` or
later) or was legitimately superseded: ``s`` finalized (the finalized segment is the decision
and the paxos file is removed with it), a segment after ``s`` on the disk (``s`` was settled
before a writer went on; a purge may then remove its paxos file), or a writer newer than ``e``
that started ``s`` again (``last-writer-epoch`` above ``e``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from journalnode import meta_files
from journalnode.errors import StorageError

_NEW_EPOCH = re.compile(r"started new epoch\s.*?\bepoch=(\d+)\b.*?\bpromised_by=(\[[^\]]*\])")
_ACCEPTED = re.compile(r"\baccepted recovery\s.*?\bepoch=(\d+)\b.*?\bsegment='\[(\d+)-")
_SEGMENT = re.compile(r"edits_(?:inprogress_)?(\d{19})(?:-(\d{19}))?")


@dataclass
class JournalNodeAcks:
    """The highest promise one JournalNode acknowledged, and each segment's highest
    accepted-recovery epoch it acknowledged."""

    promised: int = 0
    accepted: dict[int, int] = field(default_factory=dict)

    def promise(self, epoch: int) -> None:
        self.promised = max(self.promised, epoch)

    def accept(self, segment: int, epoch: int) -> None:
        self.accepted[segment] = max(self.accepted.get(segment, 0), epoch)


class Acknowledgements:
    """The promises and accepted recoveries acknowledged so far, per JournalNode, from the
    logs named in ``namenode_logs`` and ``journalnode_logs`` (module docstring).
    ``addresses`` maps a JournalNode's RPC address (as a NameNode's line names it) to its
    id."""

    def __init__(
        self,
        namenode_logs: Iterable[Path],
        journalnode_logs: Mapping[str, Path],
        addresses: Mapping[str, str],
    ) -> None:
        self.addresses = dict(addresses)
        self.by_jn: dict[str, JournalNodeAcks] = {jn: JournalNodeAcks() for jn in journalnode_logs}
        self._logs: dict[Path, str | None] = {path: None for path in namenode_logs}
        self._logs.update({path: jn for jn, path in journalnode_logs.items()})
        self._offsets: dict[Path, int] = dict.fromkeys(self._logs, 0)
        self.promises_seen = 0
        self.accepts_seen = 0

    def read(self) -> None:
        """Take in every whole line the logs gained since the last read."""
        for path, jn in self._logs.items():
            try:
                with open(path, "rb") as log:
                    log.seek(self._offsets[path])
                    data = log.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            self._offsets[path] += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                self._line(line, jn)

    def _line(self, line: str, jn: str | None) -> None:
        if jn is None:
            match = _NEW_EPOCH.search(line)
            if match is None:
                return
            for address in ast.literal_eval(match.group(2)):
                node = self.addresses.get(address)
                if node is None:
                    raise AssertionError(f"a NameNode names an unknown JournalNode {address!r}")
                self.by_jn[node].promise(int(match.group(1)))
                self.promises_seen += 1
            return
        match = _ACCEPTED.search(line)
        if match is not None:
            self.by_jn[jn].accept(int(match.group(2)), int(match.group(1)))
            self.accepts_seen += 1

    def promise(self, jn: str, epoch: int) -> None:
        """An answer the test itself got (``GetJournalState``): a promise as well."""
        self.by_jn[jn].promise(epoch)

    def forget(self, jn: str) -> None:
        """JournalNode ``jn``'s disk was emptied on purpose (an operator's repair)."""
        self.by_jn[jn] = JournalNodeAcks()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def forgotten(jn: str, current: Path, acks: JournalNodeAcks) -> list[str]:
    """What JournalNode ``jn`` acknowledged and its ``current/`` directory no longer holds
    (module docstring), one line each naming the file; empty when it holds everything."""
    lost: list[str] = []
    try:
        promised = meta_files.parse_epoch(
            current / meta_files.LAST_PROMISED_EPOCH_FILE,
            _read(current / meta_files.LAST_PROMISED_EPOCH_FILE),
        )
        writer = meta_files.parse_epoch(
            current / meta_files.LAST_WRITER_EPOCH_FILE,
            _read(current / meta_files.LAST_WRITER_EPOCH_FILE),
        )
    except StorageError as exc:
        return [f"{jn}: {exc}"]
    if promised < acks.promised:
        lost.append(
            f"{jn} acknowledged a promise of epoch {acks.promised}, but "
            f"{current / meta_files.LAST_PROMISED_EPOCH_FILE} holds {promised}"
        )
    starts: list[int] = []
    finalized: set[int] = set()
    names = [p.name for p in current.iterdir()] if current.is_dir() else []
    for name in names:
        match = _SEGMENT.fullmatch(name)
        if match is not None:
            starts.append(int(match.group(1)))
            if match.group(2) is not None:
                finalized.add(int(match.group(1)))
    for segment, epoch in sorted(acks.accepted.items()):
        path = current / meta_files.PAXOS_DIR / str(segment)
        data = _read(path)
        if data is not None:
            try:
                held = meta_files.parse_accepted(path, data).accepted_in_epoch
            except StorageError as exc:
                lost.append(f"{jn}: {exc}")
                continue
            if held >= epoch:
                continue
            lost.append(f"{jn} acknowledged accepting segment {segment} in epoch {epoch}, but "
                        f"{path} holds epoch {held}")
            continue
        if segment in finalized or any(start > segment for start in starts) or writer > epoch:
            continue
        lost.append(
            f"{jn} acknowledged accepting segment {segment} in epoch {epoch}, but {path} is "
            f"gone and nothing superseded it (last-writer-epoch {writer}, segments "
            f"{sorted(starts)[-3:]})"
        )
    return lost
