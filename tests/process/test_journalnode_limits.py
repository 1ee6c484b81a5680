"""A real JournalNode process under a lowered RLIMIT_NOFILE (issue 10 row 4): 20,000 Format
calls of new journal ids used to keep one lock fd each, until the JournalNode hit EMFILE and
could not even restart. Journals now hold no fd while idle, and their number is bounded by
``dfs.journalnode.max-journals``. The default run formats 2,000 journals, eight times the
256 descriptors the process may hold (one lock fd per journal ran out before the 256th);
``--soak`` formats the issue's 20,000.

The storage root is a tmpfs the test mounts (fsync is free there: the test is about file
descriptors, not disks) and unmounts at the end.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from conf.rpc import make_channel
from hadev.daemon import DaemonHost
from hadev.journalnodes import JournalNodeProcess
from proto import journal_pb2, journal_pb2_grpc
from proto.values import NamespaceInfo

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]

NS = NamespaceInfo("CID-limits", 4242)
NOFILE = 256


@pytest.fixture
def journals(request: pytest.FixtureRequest) -> int:
    return 20_000 if request.config.getoption("--soak") else 2_000


@pytest.fixture
def edits_dir(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "edits"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512m,nr_inodes=200k", "tmpfs", str(mount_point)],
        check=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_thousands_of_journal_ids_under_256_file_descriptors(
    tmp_path: Path, edits_dir: Path, journals: int
) -> None:
    host = DaemonHost("127.0.0.1", ("prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"))
    jn = JournalNodeProcess(
        "jn1",
        tmp_path,
        edits_dir=edits_dir,
        extra_conf={"dfs.journalnode.max-journals": journals},
        host=host,
    )
    with jn.start(timeout=60):
        limits = Path(f"/proc/{jn.pid}/limits").read_text()
        assert any(
            line.startswith("Max open files") and f" {NOFILE} " in line
            for line in limits.splitlines()
        ), limits
        channel = make_channel(jn.address, jn.harness_tls)
        stub = journal_pb2_grpc.QJournalServiceStub(channel)

        def format_one(i: int) -> None:
            stub.Format(
                journal_pb2.FormatRequest(journal_id=f"j{i:05d}", namespace_info=NS.to_pb()),
                timeout=60,
            )

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(format_one, range(journals)))
        assert open_fds(jn.pid) < NOFILE // 2
        # One more id is past dfs.journalnode.max-journals: a clear error, not EMFILE.
        with pytest.raises(grpc.RpcError) as info:
            format_one(journals)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"dfs.journalnode.max-journals ({journals})" in (info.value.details() or "")
        channel.close()

        jn.restart(timeout=300)  # loads every journal, under the same limit
        channel = make_channel(jn.address, jn.harness_tls)
        stub = journal_pb2_grpc.QJournalServiceStub(channel)
        for jid in ("j00000", f"j{journals - 1:05d}"):
            answer = stub.IsFormatted(journal_pb2.IsFormattedRequest(journal_id=jid), timeout=30)
            assert answer.is_formatted and answer.namespace_info.cluster_id == NS.cluster_id
        assert open_fds(jn.pid) < NOFILE // 2
        channel.close()
