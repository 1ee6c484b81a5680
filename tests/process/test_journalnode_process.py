"""The JournalNode as a real process: kill -9 durability, start-up errors, signals, metrics.

Every JournalNode here is ``python -m journalnode run --conf C --id jnX`` on free loopback
ports (``hadev.journalnodes``), writing with real fsyncs to a real directory, talked to
over gRPC by ``GrpcJournalChannel``.

``JournalNodeProcessCluster`` (three processes, one configuration) is checked at the end.

The kill -9 test is randomized from one seed, printed at the start; replay a failure with
``JN_KILL_SEED=<seed> pytest tests/process -k kill``.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf import load_settings, write_xml
from hadev.daemon import free_ports
from hadev.journalnodes import (
    JournalNodeProcess,
    JournalNodeProcessCluster,
    journalnode_config,
    run_journalnode,
    start_journalnode,
)
from journalnode.errors import (
    EpochError,
    JournalError,
    JournalNotFormattedError,
    JournalUnavailableError,
    NamespaceMismatchError,
)
from journalnode.file_storage import finalized_name, in_progress_name
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RemoteEditLog, RequestInfo
from qjm.channel import GrpcJournalChannel
from qjm.journal_manager import QuorumJournalManager

JID = "ns1"
NS = NamespaceInfo("CID-process", 4242)
RPC_TIMEOUT = 10.0
KILL_ROUNDS = 5


def edit(txid: int, rng: random.Random, segment_txid: int) -> edits_pb2.EditOp:
    """One edit: the segment's first txid is OP_START_LOG_SEGMENT, the rest carry random bytes."""
    if txid == segment_txid:
        return edits_pb2.EditOp(txid=txid, start_log_segment=edits_pb2.StartLogSegmentOp())
    payload = rng.randbytes(rng.randint(1, 200))
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp(payload=payload))


def framed_batch(first: int, count: int, rng: random.Random, segment_txid: int) -> bytes:
    return records.frame_ops(edit(t, rng, segment_txid) for t in range(first, first + count))


@dataclass
class Writer:
    """One writer's view of one journal over gRPC: its epoch, IPC serials, open segment."""

    channel: GrpcJournalChannel
    journal_id: str = JID
    ns: NamespaceInfo = NS
    epoch: int = 0
    serial: int = 0
    segment_txid: int = 0
    next_txid: int = 1

    def req(self) -> RequestInfo:
        self.serial += 1
        return RequestInfo(self.journal_id, self.ns.cluster_id, self.epoch, self.serial)

    def new_epoch(self, epoch: int) -> int | None:
        last = self.channel.new_epoch(self.journal_id, self.ns, epoch, RPC_TIMEOUT)
        self.epoch, self.serial = epoch, 0
        return last

    def start_segment(self, txid: int) -> None:
        self.channel.start_log_segment(self.req(), txid, RPC_TIMEOUT)
        self.segment_txid = self.next_txid = txid

    def journal(self, framed: bytes, count: int) -> None:
        first = self.next_txid
        self.channel.journal(self.req(), self.segment_txid, first, count, framed, RPC_TIMEOUT)
        self.next_txid = first + count

    def finalize(self, end: int, md5: bytes = b"") -> None:
        self.channel.finalize_log_segment(self.req(), self.segment_txid, end, RPC_TIMEOUT, md5)

    def segment_bytes(self, start: int, end: int | None) -> bytes:
        chunks = self.channel.get_segment(self.journal_id, self.ns.cluster_id, start, end, 30.0)
        return b"".join(chunks)


@pytest.fixture
def jn(tmp_path: Path) -> Iterator[JournalNodeProcess]:
    with start_journalnode(tmp_path, "jn1", probe_journal=JID) as proc:
        yield proc


@pytest.fixture
def channel(jn: JournalNodeProcess) -> Iterator[GrpcJournalChannel]:
    ch = GrpcJournalChannel(jn.address, jn.harness_tls)
    try:
        yield ch
    finally:
        ch.close()


def scrape(jn: JournalNodeProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(jn.metrics_url, timeout=RPC_TIMEOUT) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


# ---------------------------------------------------------------------------------------------
# (a) kill -9 in the middle of a stream of Journal RPCs
# ---------------------------------------------------------------------------------------------


@dataclass
class Round:
    """What the writer knows about one kill round: acknowledged bytes and the in-flight batch."""

    segment_txid: int
    acked: list[bytes] = field(default_factory=list)
    last_acked: int = 0
    in_flight: bytes = b""
    last_sent: int = 0


def write_until_killed(
    writer: Writer, jn: JournalNodeProcess, rng: random.Random, kill_after: float
) -> Round:
    """Send batches until the JournalNode, SIGKILLed by another thread, stops answering."""
    this = Round(writer.segment_txid, last_acked=writer.next_txid - 1)
    this.last_sent = this.last_acked
    killer = threading.Timer(kill_after, jn.kill)
    killer.name = "jn-killer"
    killer.start()
    deadline = time.monotonic() + kill_after + 10
    try:
        while time.monotonic() < deadline:
            count = rng.randint(1, 40)
            first = writer.next_txid
            framed = framed_batch(first, count, rng, writer.segment_txid)
            this.in_flight, this.last_sent = framed, first + count - 1
            try:
                writer.journal(framed, count)
            except JournalUnavailableError:
                return this
            this.acked.append(framed)
            this.last_acked = writer.next_txid - 1
            this.in_flight = b""
        raise AssertionError(f"the JournalNode kept answering {kill_after + 10:.1f}s after kill")
    finally:
        killer.join()


def check_recovered_segment(
    writer: Writer, jn: JournalNodeProcess, this: Round, seed: int
) -> tuple[int, bytes]:
    """Every acknowledged byte is there, followed by at most whole records of the in-flight
    batch and nothing else. Returns the segment's last txid (start - 1 when it is empty) and
    its bytes."""
    start = this.segment_txid
    where = f"seed={seed}, segment {start}, acked through {this.last_acked}, sent {this.last_sent}"
    prepared = writer.channel.prepare_recovery(writer.req(), start, RPC_TIMEOUT)
    state = prepared.segment_state
    if state is None:
        assert this.last_acked < start, f"{where}: acknowledged segment vanished"
        return start - 1, b""
    end = state.end_txid
    assert state.is_in_progress, where
    assert this.last_acked <= end <= this.last_sent, f"{where}: recovered end {end}"

    logs, _ = writer.channel.get_edit_log_manifest(JID, NS.cluster_id, start, True, RPC_TIMEOUT)
    assert RemoteEditLog(start, end, True) in logs, f"{where}: manifest {logs}"

    data = writer.segment_bytes(start, end)
    assert data[: records.HEADER_LEN] == records.SEGMENT_HEADER, where
    body = data[records.HEADER_LEN :]
    acked = b"".join(this.acked)
    assert body[: len(acked)] == acked, f"{where}: acknowledged bytes differ"
    tail = body[len(acked) :]
    assert this.in_flight.startswith(tail), f"{where}: bytes after the last ack were never sent"
    scanned = records.scan(body, start)
    assert scanned.error is None, f"{where}: {scanned.error}"
    assert (scanned.count, scanned.last_txid) == (end - start + 1, end), where

    # Nothing after the last whole record on disk either (a torn tail was cut at start-up).
    on_disk = jn.edits_dir / JID / "current" / in_progress_name(start)
    assert on_disk.stat().st_size == len(data), f"{where}: {on_disk} holds bytes past txid {end}"
    return end, data


def test_kill_9_mid_stream_loses_no_acknowledged_edit(tmp_path: Path) -> None:
    seed = int(os.environ.get("JN_KILL_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} (replay: JN_KILL_SEED={seed} pytest tests/process -k kill)")
    rng = random.Random(seed)
    finalized: dict[int, bytes] = {}
    with start_journalnode(tmp_path, "jn1", probe_journal=JID) as jn:
        writer = Writer(GrpcJournalChannel(jn.address, jn.harness_tls))
        writer.channel.format(JID, NS, False, RPC_TIMEOUT)
        writer.new_epoch(1)
        writer.start_segment(1)
        for round_no in range(KILL_ROUNDS):
            this = write_until_killed(writer, jn, rng, kill_after=rng.uniform(0.05, 0.4))
            writer.channel.close()
            assert jn.returncode == -9

            jn.restart()
            writer.channel = GrpcJournalChannel(jn.address, jn.harness_tls)
            newest = writer.new_epoch(writer.epoch + 1)
            end, recovered = check_recovered_segment(writer, jn, this, seed)
            print(
                f"round {round_no}: segment {this.segment_txid}: acked through "
                f"{this.last_acked}, sent through {this.last_sent}, recovered through {end}"
            )
            if end >= this.segment_txid:
                assert newest == this.segment_txid, f"seed={seed}"
                # As recovery does: vouch for the recovered records by their md5.
                writer.finalize(end, hashlib.md5(recovered[records.HEADER_LEN :]).digest())
                finalized[this.segment_txid] = recovered
                assert writer.segment_bytes(this.segment_txid, None) == recovered
            # Segments finalized in earlier rounds are unchanged, byte for byte.
            for start, content in finalized.items():
                assert writer.segment_bytes(start, None) == content, f"seed={seed} round {round_no}"
            writer.next_txid = end + 1
            writer.start_segment(end + 1)

        names = {p.name for p in (jn.edits_dir / JID / "current").iterdir()}
        for start, content in finalized.items():
            end = start + records.scan(content[records.HEADER_LEN :], start).count - 1
            assert finalized_name(start, end) in names
        writer.channel.close()
        assert jn.stop() == 0


# ---------------------------------------------------------------------------------------------
# (b)-(e) start-up: a locked directory, a busy port, a bad configuration, $HANAMENODE_CONF
# ---------------------------------------------------------------------------------------------


def write_conf(path: Path, edits_dir: Path, **overrides: str) -> Path:
    """A one-JournalNode configuration on fresh ports, with ``overrides`` (key: value) on top."""
    rpc, http = free_ports(2)
    return write_xml({**journalnode_config(rpc, http, edits_dir), **overrides}, path)


def test_second_journalnode_on_the_same_directory_exits_naming_it(
    jn: JournalNodeProcess, tmp_path: Path
) -> None:
    conf = write_conf(tmp_path / "second.xml", jn.edits_dir)
    result = run_journalnode(["run", "--conf", str(conf), "--id", "jn2"])
    assert result.returncode != 0
    assert str(jn.edits_dir) in result.stderr
    assert "in use" in result.stderr
    assert f"pid {jn.pid}" in result.stderr
    # The first one is unharmed.
    assert jn.proc is not None and jn.proc.poll() is None


@pytest.mark.parametrize("which", ["rpc", "http"])
def test_busy_port_exits_naming_the_address(tmp_path: Path, which: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = f"127.0.0.1:{holder.getsockname()[1]}"
        conf = write_conf(
            tmp_path / "busy.xml", tmp_path / "edits", **{f"dfs.journalnode.{which}-address": busy}
        )
        result = run_journalnode(["run", "--conf", str(conf), "--id", "jn1"])
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == f"Error: cannot listen on {busy}: address already in use"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("dfs.journalnode.rpc-address", "nonsense", "expected host:port, got 'nonsense'"),
        ("dfs.journalnode.edits.dir", "relative/dir", "absolute"),
        ("dfs.journalnode.rpc-adress", "127.0.0.1:0", "did you mean 'dfs.journalnode.rpc-address'"),
    ],
    ids=["malformed-address", "relative-dir", "unknown-key"],
)
def test_bad_configuration_is_one_line_naming_file_and_key(
    tmp_path: Path, key: str, value: str, problem: str
) -> None:
    conf = write_xml({key: value}, tmp_path / "bad-site.xml")
    result = run_journalnode(["run", "--conf", str(conf), "--id", "jn1"])
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(conf) in lines[0] and key in lines[0] and problem in lines[0], lines[0]


def test_missing_configuration_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere-site.xml"
    result = run_journalnode(["run", "--conf", str(missing), "--id", "jn1"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"Error: bad configuration: {missing}: no such file"
    ]


def test_no_configuration_at_all_names_the_environment_variable() -> None:
    result = run_journalnode(["run", "--id", "jn1"])
    assert result.returncode != 0
    assert "HANAMENODE_CONF" in result.stderr and "--conf" in result.stderr


def test_hanamenode_conf_is_used_without_conf_option(tmp_path: Path) -> None:
    with start_journalnode(tmp_path, "jn1", probe_journal=JID, conf_via_env=True) as jn:
        channel = GrpcJournalChannel(jn.address, jn.harness_tls)
        try:
            channel.format(JID, NS, False, RPC_TIMEOUT)
            assert channel.is_formatted(JID, RPC_TIMEOUT) == (True, NS)
        finally:
            channel.close()
        # It runs with the configured directory, which only the file named in the env gives.
        assert (jn.edits_dir / JID / "current" / "VERSION").is_file()
        assert jn.stop() == 0


# ---------------------------------------------------------------------------------------------
# (f) metrics, (g) SIGTERM, (h) two journals in one process
# ---------------------------------------------------------------------------------------------


def test_metrics_endpoint_reports_the_journal(
    jn: JournalNodeProcess, channel: GrpcJournalChannel
) -> None:
    rng = random.Random(7)
    writer = Writer(channel)
    channel.format(JID, NS, False, RPC_TIMEOUT)
    writer.new_epoch(3)
    writer.start_segment(1)
    sizes = [1, 5, 20, 100, 7]
    for count in sizes:
        writer.journal(framed_batch(writer.next_txid, count, rng, 1), count)
    written = sum(sizes)
    tailed = channel.get_journaled_edits(JID, NS.cluster_id, written - 9, 100, RPC_TIMEOUT)
    assert (tailed.epoch, tailed.count) == (3, 10)

    samples = scrape(jn)
    label = (("journal", JID),)
    assert samples[("journalnode_journaled_edits_served_txns_total", label)] == 10
    assert samples[("journalnode_journaled_edits_cache_misses_total", label)] == 0
    assert samples[("journalnode_edit_cache_bytes", label)] > 0
    assert samples[("journalnode_txns_written_total", label)] == written
    assert samples[("journalnode_batches_written_total", label)] == len(sizes)
    assert samples[("journalnode_last_written_txid", label)] == written
    assert samples[("journalnode_last_promised_epoch", label)] == 3
    assert samples[("journalnode_last_writer_epoch", label)] == 3
    inf = (("journal", JID), ("le", "+Inf"))
    assert samples[("journalnode_sync_seconds_bucket", inf)] == len(sizes)
    assert samples[("journalnode_sync_seconds_count", label)] == len(sizes)
    assert 0 < samples[("journalnode_sync_seconds_sum", label)] < 60


def test_sigterm_stops_cleanly_and_releases_the_directory(
    jn: JournalNodeProcess, channel: GrpcJournalChannel, tmp_path: Path
) -> None:
    channel.format(JID, NS, False, RPC_TIMEOUT)
    started = time.monotonic()
    assert jn.stop() == 0
    assert time.monotonic() - started < 8  # well before stop() would resort to SIGKILL
    assert "journalnode stopping" in jn.log_text()
    # The lock went with the process: a new JournalNode takes the directory and its data.
    jn.restart()
    again = GrpcJournalChannel(jn.address, jn.harness_tls)
    try:
        assert again.is_formatted(JID, RPC_TIMEOUT) == (True, NS)
    finally:
        again.close()


def test_two_journals_in_one_process_are_independent(
    jn: JournalNodeProcess, channel: GrpcJournalChannel
) -> None:
    ns_a, ns_b = NamespaceInfo("CID-a", 1), NamespaceInfo("CID-b", 2)
    a = Writer(channel, "journal-a", ns_a)
    b = Writer(channel, "journal-b", ns_b)
    channel.format("journal-a", ns_a, False, RPC_TIMEOUT)
    with pytest.raises(JournalNotFormattedError):
        channel.get_journal_state("journal-b", ns_b.cluster_id, RPC_TIMEOUT)
    channel.format("journal-b", ns_b, False, RPC_TIMEOUT)

    a.new_epoch(5)
    b.new_epoch(1)
    b.new_epoch(2)  # lower than journal-a's promise: each journal has its own epochs
    assert channel.get_journal_state("journal-a", "CID-a", RPC_TIMEOUT)[0] == 5
    assert channel.get_journal_state("journal-b", "CID-b", RPC_TIMEOUT)[0] == 2
    with pytest.raises(EpochError):
        a.new_epoch(4)
    with pytest.raises(NamespaceMismatchError):
        channel.get_journal_state("journal-a", "CID-b", RPC_TIMEOUT)

    rng = random.Random(1)
    a.start_segment(1)
    a.journal(framed_batch(1, 10, rng, 1), 10)
    b.start_segment(100)
    b.journal(framed_batch(100, 3, rng, 100), 3)
    a.finalize(10)

    manifest_a, _ = channel.get_edit_log_manifest("journal-a", "CID-a", 0, True, RPC_TIMEOUT)
    manifest_b, _ = channel.get_edit_log_manifest("journal-b", "CID-b", 0, True, RPC_TIMEOUT)
    assert manifest_a == [RemoteEditLog(1, 10, False)]
    assert manifest_b == [RemoteEditLog(100, 102, True)]

    samples = scrape(jn)
    for jid, txns, epoch in (("journal-a", 10, 5), ("journal-b", 3, 2)):
        label = (("journal", jid),)
        assert samples[("journalnode_txns_written_total", label)] == txns
        assert samples[("journalnode_last_promised_epoch", label)] == epoch
    # One lock for the whole root covers both journals: an idle journal holds no fd.
    assert (jn.edits_dir / "in_use.lock").is_file()
    for jid in ("journal-a", "journal-b"):
        assert (jn.edits_dir / jid / "current" / "VERSION").is_file()
        assert not (jn.edits_dir / jid / "in_use.lock").exists()


def test_unreachable_journalnode_is_unavailable(tmp_path: Path) -> None:
    """After kill -9 the client sees JournalUnavailableError, never a JournalNode verdict."""
    with start_journalnode(tmp_path, "jn1", probe_journal=JID) as jn:
        jn.kill()
        channel = GrpcJournalChannel(jn.address, jn.harness_tls)
        try:
            with pytest.raises(JournalUnavailableError) as info:
                channel.is_formatted(JID, 2.0)
        finally:
            channel.close()
        assert isinstance(info.value, JournalError)


# ---------------------------------------------------------------------------------------------
# (i) JournalNodeProcessCluster: one configuration, crash, pause, restart on the same ports
# ---------------------------------------------------------------------------------------------


def test_process_cluster_shares_one_configuration_and_restarts_on_the_same_ports(
    tmp_path: Path,
) -> None:
    with JournalNodeProcessCluster(3, tmp_path, journal_id=JID) as cluster:
        settings = load_settings(cluster.conf_path)
        assert settings.journal_uri is not None
        assert list(settings.journal_uri.addresses) == cluster.addresses
        assert settings.journal_uri.journal_id == JID
        assert [settings.journalnode(jn.jn_id).edits_dir for jn in cluster] == [
            tmp_path / f"jn{i}" for i in (1, 2, 3)
        ]
        with QuorumJournalManager.connect(
            cluster.addresses, JID, NS, tls=cluster.harness_tls
        ) as qjm:
            qjm.format()
        addresses, pids = cluster.addresses, [jn.pid for jn in cluster]

        cluster.kill(0)  # SIGKILL: reaped at once
        assert cluster[0].returncode == -9 and not cluster[0].running
        cluster.kill(1, signal.SIGSTOP)  # paused: running, but answers nothing
        with pytest.raises(JournalUnavailableError):
            is_formatted(cluster[1], 0.5)
        assert cluster[1].running
        cluster.kill(1, signal.SIGCONT)
        assert is_formatted(cluster[1]) == (True, NS)

        cluster.restart(0)
        assert cluster.addresses == addresses and cluster[0].pid != pids[0]
        assert is_formatted(cluster[0]) == (True, NS)
        assert cluster.stop() == [0, 0, 0]
    assert all(not jn.running for jn in cluster)


def is_formatted(
    jn: JournalNodeProcess, timeout: float = RPC_TIMEOUT
) -> tuple[bool, NamespaceInfo | None]:
    """IsFormatted on a fresh channel (one that timed out would still be backing off)."""
    channel = GrpcJournalChannel(jn.address, jn.harness_tls)
    try:
        return channel.is_formatted(JID, timeout)
    finally:
        channel.close()


def test_a_sigterm_as_soon_as_it_serves_stops_it_cleanly(tmp_path: Path) -> None:
    """A SIGTERM right after the JournalNode starts serving (while the collector settles:
    ``freeze_after_start``) is a clean stop, exit status 0, not death by the signal (-15)."""
    node = JournalNodeProcess("jn1", tmp_path)
    proc = node.spawn()
    try:
        deadline = time.monotonic() + 30
        while b"journalnode started" not in node.log_path.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, node.log_path.read_text()
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, node.log_path.read_text()[-2000:]
    finally:
        node.stop()
