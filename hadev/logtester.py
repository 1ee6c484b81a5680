"""LogTester (HDFS-3077 §7.4.1): a writer that takes over the journal and logs what was acked.

    python -m hadev.logtester --journalnodes 127.0.0.1:8485,... --journal-id lt \\
        --cluster-id CID-lt --namespace-id 1 --name lt1 --out /tmp/lt1.acked --seed 7

It fences any previous writer (new epoch, recovery), then loops: a few random OP_MKDIR-like
transactions, ``flush`` to a quorum, and only when that succeeds appends ``txid md5`` lines for
those transactions to its local file (fsync'd). Any failure (being fenced by another
LogTester, losing the quorum) aborts the process with a non-zero status, as a NameNode would.
Several LogTesters started and killed in turn against the same JournalNodes fence each other
again and again; ``verify_logtesters`` then checks HDFS-3077's two properties.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import click
import structlog

from conf import TLSSettings, load_settings
from conf.logging import LOG_FORMAT_OPTION, setup_logging
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager

log = structlog.get_logger(__name__)


def op_digest(op: edits_pb2.EditOp) -> str:
    return hashlib.md5(op.SerializeToString()).hexdigest()


def run_logtester(
    addresses: list[str],
    journal_id: str,
    ns: NamespaceInfo,
    name: str,
    out: Path,
    seed: int,
    *,
    max_seconds: float | None = None,
    roll_every: int = 50,
    tls: TLSSettings | None = None,
) -> int:
    """Take over and write until an error (returns 1) or ``max_seconds`` (returns 0);
    ``tls``: mutual TLS with a certificate carrying the namenode role."""
    rng = random.Random(seed)
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    qjm = QuorumJournalManager.connect(addresses, journal_id, ns, tls=tls)
    try:
        end = qjm.recover_unfinalized_segments()
        txid = (end or 0) + 1
        log.info("logtester took over", name=name, epoch=qjm.epoch, next_txid=txid)
        while deadline is None or time.monotonic() < deadline:
            stream = qjm.start_log_segment(txid)
            for _ in range(roll_every):
                batch = []
                for _ in range(rng.randint(1, 5)):
                    path = f"/{name}/e{qjm.epoch}/d{rng.randrange(1 << 30)}"
                    op = edits_pb2.EditOp(
                        txid=txid, mkdir=edits_pb2.MkdirOp(path=path, mtime_ms=txid)
                    )
                    stream.write(op)
                    batch.append(op)
                    txid += 1
                stream.flush()
                lines = "".join(f"{op.txid} {op_digest(op)}\n" for op in batch)
                os.write(fd, lines.encode())
                os.fsync(fd)
            qjm.finalize_log_segment(stream.segment_txid, txid - 1)
        return 0
    except Exception as exc:
        log.warning(
            "logtester aborting", name=name, epoch=qjm.epoch, error=f"{type(exc).__name__}: {exc}"
        )
        return 1
    finally:
        os.close(fd)
        qjm.close()


@dataclass(frozen=True)
class LogTesterReport:
    acked: int
    duplicates: dict[int, list[str]]
    missing_or_different: list[str]
    finalized_mismatches: list[str]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing_or_different or self.finalized_mismatches)


def read_acked(path: Path) -> dict[int, str]:
    acked: dict[int, str] = {}
    for line in path.read_text().splitlines():
        txid, digest = line.split()
        acked[int(txid)] = digest
    return acked


def verify_logtesters(
    acked_files: Mapping[str, Path],
    log_ops: Iterable[edits_pb2.EditOp],
    finalized_md5s: Mapping[str, Mapping[str, str]],
) -> LogTesterReport:
    """HDFS-3077's checks: no txid acked to two LogTesters; finalized segment files of the
    same name are identical on every JN. Also every acked txid is in the log with its bytes.

    ``finalized_md5s`` maps JN name -> {segment file name -> md5}.
    """
    owners: dict[int, list[str]] = {}
    digests: dict[int, str] = {}
    for name, path in acked_files.items():
        for txid, digest in read_acked(path).items():
            owners.setdefault(txid, []).append(name)
            digests[txid] = digest
    duplicates = {txid: names for txid, names in owners.items() if len(names) > 1}
    in_log = {op.txid: op_digest(op) for op in log_ops}
    missing = []
    for txid, digest in sorted(digests.items()):
        if in_log.get(txid) != digest:
            how = "missing from" if txid not in in_log else "different in"
            missing.append(f"txid {txid} acked to {owners[txid][0]} is {how} the log")
    by_name: dict[str, dict[str, str]] = {}
    for jn, files in finalized_md5s.items():
        for fname, md5 in files.items():
            by_name.setdefault(fname, {})[jn] = md5
    mismatches = [
        f"{fname}: {copies}"
        for fname, copies in sorted(by_name.items())
        if len(set(copies.values())) > 1
    ]
    return LogTesterReport(len(digests), duplicates, missing, mismatches)


@click.command()
@click.option(
    "--journalnodes", required=True, help="Comma-separated host:port of every JournalNode."
)
@click.option("--journal-id", required=True)
@click.option("--cluster-id", required=True)
@click.option("--namespace-id", type=int, default=1, show_default=True)
@click.option("--name", required=True, help="This LogTester's name (used in its paths).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="File the acknowledged txids are appended to.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--max-seconds",
    type=float,
    default=None,
    help="Stop after this long (default: run until fenced).",
)
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A configuration file whose TLS keys (the generic certificate, with the namenode "
    "role) it connects with; without it, plaintext.",
)
@LOG_FORMAT_OPTION
def main(
    journalnodes: str,
    journal_id: str,
    cluster_id: str,
    namespace_id: int,
    name: str,
    out: Path,
    seed: int,
    max_seconds: float | None,
    conf_path: Path | None,
    log_format: str,
) -> None:
    """Run one LogTester until it is fenced or fails."""
    setup_logging(log_format)
    addresses = [a.strip() for a in journalnodes.split(",") if a.strip()]
    ns = NamespaceInfo(cluster_id, namespace_id)
    tls = load_settings(conf_path).tls if conf_path is not None else None
    sys.exit(
        run_logtester(addresses, journal_id, ns, name, out, seed, max_seconds=max_seconds, tls=tls)
    )


if __name__ == "__main__":
    main()
