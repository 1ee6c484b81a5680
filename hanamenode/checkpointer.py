"""StandbyCheckpointer: the standby writes fsimage checkpoints and lets the active purge the
edits they cover (docs/architecture.md §5.4; HDFS ``StandbyCheckpointer``).

Every ``checkpoint_txns`` transactions or ``checkpoint_period`` seconds (whichever first, and
only when something new was applied) the standby saves its namespace as an image at its last
applied txid — written by a forked child from its copy-on-write view, so that tailing is held
only for the fork, after the heap was collapsed into huge pages so that the fork is short
(issue 27, ``hanamenode.hugepages``) — keeps the newest
``checkpoints_retained`` images, uploads the new image to the active (``PutImage``, HDFS's
image servlet PUT), and asks the active to purge the edits that no NameNode needs:

    min_txid_to_keep = min(newest image txid of every NameNode) + 1     (ha.min_txid_to_keep)

A purge never removes an edit that the newest image of any NameNode does not cover, and
nothing is purged while some NameNode cannot say what its newest image is.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from conf import clock
from hanamenode import fsimage, ha, hugepages
from hanamenode.errors import CheckpointCancelledError, NamenodeError, from_rpc_error
from hanamenode.loop import NameNodeLoop
from hanamenode.metrics import NameNodeMetrics
from hanamenode.namespace import Namespace
from hanamenode.peers import NameNodePeers
from hanamenode.storage import NameDirectory
from proto import namenode_pb2
from proto.bounds import IMAGE_CHUNK_MAX_BYTES
from proto.values import NamespaceInfo
from qjm.errors import describe_exception

log = structlog.get_logger(__name__)

IMAGE_CHUNK_BYTES = IMAGE_CHUNK_MAX_BYTES
# How often the task looks whether a checkpoint is due, at most.
_CHECK_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """One checkpoint: the image saved, and the purge bound sent to the active (None when
    nothing could be purged); how long tailing was held for it (the fork of its writer) and
    the CPU that fork took; the huge-page collapse before the fork (None without one)."""

    txid: int
    image: Path
    uploaded_to: str | None
    purged_before: int | None
    tailing_held_seconds: float = 0.0
    fork_cpu_seconds: float = 0.0
    heap: hugepages.CollapseReport | None = None


def image_chunks(path: Path, chunk_bytes: int = IMAGE_CHUNK_BYTES) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            yield chunk


def checkpoint_info(name_dir: NameDirectory) -> ha.CheckpointInfo | None:
    """The newest image of ``name_dir`` (md5 checked), or None without images."""
    newest = name_dir.newest_image()
    if newest is None:
        return None
    txid, path = newest
    md5 = fsimage.verify_md5(path)
    return ha.CheckpointInfo(txid, md5, path.stat().st_size)


class StandbyCheckpointer:
    """The checkpointing task of a standby (``standby-checkpointer-<nn>``, on the NameNode's
    loop); each checkpoint runs on the loop's bridge executor, since it is file and network
    I/O, except the fork: the loop, which alone changes the namespace, forks a child
    (``fsimage.fork_save_image``) that writes the image from its copy-on-write view of the
    tree at the last applied txid, while the parent goes on tailing and answering. Before,
    the bridge thread collapses the heap into huge pages (``hugepages.collapse_heap``), so
    that the fork copies an entry a 2 MiB instead of one a 4 KiB page; ``huge_pages=False``
    forks without (the bench's baseline). The bridge thread waits for the child and kills it
    when the NameNode leaves the standby state, and stops a collapse between two steps.
    ``on_thaw`` (on the loop, after the fork) hands the tailer any ops it held.

    ``namespace`` returns the current namespace (the namesystem may replace it on a reload).
    """

    def __init__(
        self,
        namespace: Callable[[], Namespace],
        name_dir: NameDirectory,
        ns_info: NamespaceInfo,
        *,
        checkpoint_txns: int,
        checkpoint_period: float,
        checkpoints_retained: int,
        peers: NameNodePeers | None = None,
        metrics: NameNodeMetrics | None = None,
        nn_id: str = "",
        nn_loop: NameNodeLoop,
        on_thaw: Callable[[], None] = lambda: None,
        huge_pages: bool = True,
    ) -> None:
        self._namespace = namespace
        self.huge_pages = huge_pages
        self._on_thaw = on_thaw
        self.nn_loop = nn_loop
        self.name_dir = name_dir
        self.ns_info = ns_info
        self.checkpoint_txns = checkpoint_txns
        self.checkpoint_period = checkpoint_period
        self.checkpoints_retained = checkpoints_retained
        self.peers = peers
        self.metrics = metrics
        self.nn_id = nn_id
        self._stop = threading.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # One checkpoint at a time, whether from the task or a test calling do_checkpoint.
        self._checkpoint_lock = threading.Lock()
        self.last_checkpoint_time = clock.monotonic()
        self.last_result: CheckpointResult | None = None
        self.last_error: str | None = None
        self._log = log.bind(nn=nn_id)

    # -- lifecycle -----------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or less when ``stop`` is called meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def start(self) -> None:
        """Start the task (on the loop)."""
        if self._task is not None:
            return
        stop = threading.Event()  # per run, as in EditLogTailer.start
        self._stop = stop
        self._stopping = asyncio.Event()
        self.last_checkpoint_time = clock.monotonic()
        self._task = self.nn_loop.loop.create_task(
            self._run(stop), name=f"standby-checkpointer-{self.nn_id}"
        )

    async def stop(self, timeout: float = 60.0) -> bool:
        """Stop the task; False if a checkpoint in flight did not end within ``timeout``."""
        self._stop.set()
        self._stopping.set()  # wakes the task's sleep at once
        task, self._task = self._task, None
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            self._log.warning("checkpointer did not stop in time", timeout=timeout)
            return False
        return True

    async def _run(self, stop: threading.Event) -> None:
        interval = min(_CHECK_INTERVAL, self.checkpoint_period / 4)
        while not stop.is_set():
            await self._sleep(interval)
            if stop.is_set() or not self.checkpoint_due():
                continue
            try:
                await self.nn_loop.blocking(self.do_checkpoint)
            except CheckpointCancelledError as exc:
                self._log.info("checkpoint cancelled", why=str(exc))
            except Exception as exc:
                self.last_error = describe_exception(exc)
                if self.metrics is not None:
                    self.metrics.checkpoint_errors.inc()
                self._log.warning("checkpoint failed", error=self.last_error)
                # Try again after a period rather than at every check.
                self.last_checkpoint_time = clock.monotonic()

    def checkpoint_due(self) -> bool:
        last_image = self.name_dir.newest_image_txid() or 0
        new_txns = self._namespace().last_applied_txid - last_image
        if new_txns <= 0:
            return False
        if new_txns >= self.checkpoint_txns:
            return True
        return clock.monotonic() - self.last_checkpoint_time >= self.checkpoint_period

    # -- one checkpoint ------------------------------------------------------------------------

    def do_checkpoint(self) -> CheckpointResult | None:
        """Save an image at the last applied txid, upload it to the active, ask for a purge.
        None when the newest image already covers the namespace."""
        with self._checkpoint_lock:
            namespace = self._namespace()
            newest = self.name_dir.newest_image_txid()
            if newest is not None and namespace.last_applied_txid <= newest:
                return None
            started = time.perf_counter()
            heap = self._collapse_heap() if self.huge_pages else None
            save = self.nn_loop.call(self._fork, namespace)
            image = save.wait(self._stop.is_set)
            txid = save.txid
            elapsed = time.perf_counter() - started
            fsimage.purge_old_images(self.name_dir.path, self.checkpoints_retained)
            self.last_checkpoint_time = clock.monotonic()
            if self.metrics is not None:
                self.metrics.checkpoints.inc()
                self.metrics.checkpoint_seconds.observe(elapsed)
            self._log.info(
                "saved checkpoint",
                txid=txid,
                writer_pid=save.pid,
                seconds=round(elapsed, 3),
                tailing_held_seconds=round(save.fork_seconds, 4),
                fork_cpu_seconds=round(save.fork_cpu_seconds, 4),
                heap_collapse_seconds=None if heap is None else round(heap.seconds, 3),
                heap_huge_page_bytes=None if heap is None else heap.huge_bytes,
            )
            uploaded_to = self._upload(image, txid)
            purged = self._purge() if uploaded_to is not None else None
            result = CheckpointResult(
                txid, image, uploaded_to, purged, save.fork_seconds, save.fork_cpu_seconds, heap
            )
            self.last_result = result
            self.last_error = None
            return result

    def _collapse_heap(self) -> hugepages.CollapseReport:
        """On the bridge thread: the heap into huge pages before the fork; cancelled, as the
        checkpoint, when the NameNode leaves the standby state meanwhile."""
        heap = hugepages.collapse_heap(self._stop.is_set)
        if heap.stopped:
            raise CheckpointCancelledError(
                "checkpoint cancelled while the heap was collapsed into huge pages: the "
                "NameNode is leaving the standby state"
            )
        if heap.errors:
            # Not fatal: what stays in small pages makes the fork longer, as before.
            self._log.warning(
                "heap not all in huge pages before the checkpoint's fork",
                errors=",".join(heap.errors),
                small_page_bytes=heap.failed_bytes,
                asked_bytes=heap.asked_bytes,
            )
        return heap

    def _fork(self, namespace: Namespace) -> fsimage.ForkedImageSave:
        """On the loop: fork the child that writes the image; then the tailer's held ops."""
        try:
            return fsimage.fork_save_image(namespace, self.name_dir.path, self.ns_info)
        finally:
            self._on_thaw()

    def _upload(self, image: Path, txid: int) -> str | None:
        """PutImage to the active; the active's id, or None when there is no active or the
        upload failed (the image stays here; the next checkpoint uploads a newer one)."""
        if self.peers is None or not self.peers.peers:
            return None
        peers = self.peers
        md5 = fsimage.verify_md5(image)
        info = namenode_pb2.CheckpointInfo(txid=txid, md5=md5, size=image.stat().st_size)

        def messages() -> Iterator[namenode_pb2.ImageUpload]:
            yield namenode_pb2.ImageUpload(info=info)
            for chunk in image_chunks(image):
                yield namenode_pb2.ImageUpload(data=chunk)

        try:
            active = peers.find_active()
            # An upload moves the whole image: allow it more than a plain call.
            peers.namenode(active).PutImage(messages(), timeout=peers.timeout * 12)
        except NamenodeError as exc:
            self._log.warning("checkpoint not uploaded", txid=txid, error=str(exc))
            return None
        except grpc.RpcError as err:
            if self.metrics is not None:
                self.metrics.checkpoint_errors.inc()
            self._log.warning(
                "checkpoint upload failed", txid=txid, error=str(from_rpc_error(err))
            )
            return None
        self._log.info("uploaded checkpoint to the active", txid=txid, active=str(active))
        return active.nn_id

    def newest_images(self) -> dict[str, int | None]:
        """Every NameNode's newest image txid (None for one that did not answer)."""
        found: dict[str, int | None] = {self.nn_id: self.name_dir.newest_image_txid()}
        if self.peers is None:
            return found
        for peer in self.peers.peers:
            try:
                reply = self.peers.namenode(peer).GetMostRecentCheckpoint(
                    namenode_pb2.HAEmpty(), timeout=self.peers.timeout
                )
                found[peer.nn_id] = int(reply.txid)
            except grpc.RpcError as err:
                self._log.warning(
                    "cannot learn a NameNode's newest image; purging nothing",
                    namenode=str(peer),
                    error=str(from_rpc_error(err)),
                )
                found[peer.nn_id] = None
        return found

    def _purge(self) -> int | None:
        bound = ha.min_txid_to_keep(self.newest_images())
        if bound is None or self.peers is None:
            return None
        peers = self.peers
        request = namenode_pb2.PurgeRequest(min_txid_to_keep=bound)
        peers.call_active(
            "purge edit logs",
            lambda peer: peers.namenode(peer).PurgeLogs(request, timeout=peers.timeout * 6),
        )
        self._log.info("asked the active to purge old edits", min_txid_to_keep=bound)
        return bound
