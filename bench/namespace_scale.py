"""The namespace at scale (issue 27): memory per inode, image save and load, the standby's
checkpoint, and a NameNode started on a large image.

``python -m bench.namespace_scale [--inodes 1000000] [--dir D] [--no-namenode]``

In this one process it builds a namespace of ``--inodes`` inodes with ``Namespace.mkdir`` and
``Namespace.create`` (directories of 1,000 files; from 10,000,000 inodes on, the last
1,000,000 are the children of one directory, ``--big-dir`` to choose), then measures:

- ``rss_bytes_per_inode``: the growth of this process's RSS over the build, per inode;
- ``build_ops_per_s``: mkdir and create calls a second while building;
- ``image_save_s_per_million``, ``image_load_s_per_million``, ``image_bytes_per_inode``:
  ``fsimage.save_image`` and ``fsimage.load_image`` (md5 and tree checks included), and
  their ratios against the baseline, the same namespace written in layout 3 (one row per
  inode, SQLAlchemy inserts of 20,000 rows, as images were written before issue 27) and
  loaded by ``fsimage.load_image``; ``--no-baseline`` skips it;
- ``checkpoint_tailing_held_ms_max``: a ``StandbyCheckpointer`` writes an image while a
  task on the same NameNode loop plays the tailer, applying one op every millisecond and
  holding it while the namespace is frozen; the key is the longest stretch between two of
  its applies while the checkpoint runs, beside the same stretch measured without a
  checkpoint (``tailing_gap_ms_max_idle``, the baseline). Three checkpoints run in turn:
  ``checkpoint_4k_*`` forks a heap in 4 KiB pages (``huge_pages=False``, the design before
  ``hanamenode.hugepages``); then two with the heap collapsed into huge pages first, the
  first collapse copying the whole heap (``checkpoint_first_*``), the next only what changed
  (``checkpoint_next_*``); ``checkpoint_tailing_held_ms_max``, ``checkpoint_fork_ms`` and
  ``checkpoint_fork_cpu_ms`` are the larger of those two. ``*_apply_us_p99`` and
  ``*_minor_faults`` (this process's, over the checkpoint) show the copy-on-write that the
  tailer pays while the child shares the heap, ``*_rss_growth_mb`` what the checkpoint added
  to this process's RSS (a collapse fills what it covers). Where the time went:
  ``*_gap_at_fork_ms`` is the stretch that holds the fork, and ``*_runqueue_ms`` how long of
  a stretch the loop thread was runnable but waiting for a core (its ``schedstat``), which
  is the machine's load, not the checkpoint; ``*_held_ms_max_less_runqueue`` is the longest
  stretch once that wait is taken out of each;
- ``startup_to_serving_s``: a real NameNode process (``hadev.namenodes``) whose name dir
  holds the image, from spawn to answering STANDBY;
- with a large directory: the time to list one page of it in the middle and to stat one of
  its children (``big_dir_list_page_ms``, ``big_dir_stat_us``).

Memory figures are only meaningful for one namespace per process: the bench drops the loaded
copy before measuring the checkpoint. Each timed step also reports its CPU seconds
(``*_cpu_s``): on the shared machine the wall clock waits for a core as much as it works.
It prints a table, then the JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import functools
import gc
import itertools
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from bench.common import print_json, print_table
from conf.logging import setup_logging
from durable.files import fsync_file
from hadev.namenodes import NameNodeProcessCluster
from hanamenode import fsimage
from hanamenode.checkpointer import StandbyCheckpointer
from hanamenode.loop import NameNodeLoop
from hanamenode.namespace import INodeDirectory, INodeFile, Namespace
from hanamenode.storage import NameDirectory
from proto.values import NamespaceInfo

FILES_PER_DIR = 1000
BIG_DIR = "/big"
BIG_DIR_FROM = 10_000_000
"""From this many inodes on, the last million is one directory (the issue's shape)."""
TICK_S = 0.001
_TICKS = itertools.count()
T = TypeVar("T")
NS_INFO = NamespaceInfo(cluster_id="CID-bench", namespace_id=27, ctime=0, layout_version=1)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build(ns: Namespace, inodes: int, big_children: int) -> int:
    """Fill ``ns`` up to about ``inodes`` inodes; the number of calls made."""
    calls = 0
    regular = inodes - big_children - 1
    d = 0
    while regular > 0:
        parent = f"/d{d:05d}"
        ns.mkdir(parent)
        calls += 1
        regular -= 1
        for f in range(min(FILES_PER_DIR, regular)):
            ns.create(f"{parent}/f{f:04d}")
            calls += 1
        regular -= min(FILES_PER_DIR, regular)
        d += 1
    if big_children:
        ns.mkdir(BIG_DIR)
        for f in range(big_children - 1):
            ns.create(f"{BIG_DIR}/f{f:07d}")
        calls += big_children
    return calls


def big_dir_figures(ns: Namespace, children: int) -> dict[str, float]:
    middle = f"f{children // 2:07d}"
    began = time.perf_counter()
    page, _ = ns.list_page(BIG_DIR, start_after=middle, limit=1000)
    listed = time.perf_counter() - began
    if len(page) != 1000:
        raise RuntimeError(f"a page of {BIG_DIR} after {middle} held {len(page)} entries")
    began = time.perf_counter()
    for _ in range(1000):
        ns.stat(f"{BIG_DIR}/{middle}")
    stat = (time.perf_counter() - began) / 1000
    return {"big_dir_list_page_ms": round(listed * 1000, 2),
            "big_dir_stat_us": round(stat * 1e6, 1)}


@dataclasses.dataclass
class _Ticks:
    """What the tailer task saw: the time after each apply, how long each apply took, and
    how long the loop thread had waited for a core by then (nanoseconds, the second field
    of ``/proc/thread-self/schedstat``; 0 where the kernel does not keep it)."""

    applied: list[float] = dataclasses.field(default_factory=list)
    took: list[float] = dataclasses.field(default_factory=list)
    runqueue_ns: list[int] = dataclasses.field(default_factory=list)

    def longest_gap(self) -> int:
        """The index of the apply that starts the longest stretch without one."""
        gaps = [b - a for a, b in itertools.pairwise(self.applied)]
        return max(range(len(gaps)), key=gaps.__getitem__, default=0)

    def gap_ms(self, i: int) -> float:
        return round((self.applied[i + 1] - self.applied[i]) * 1000, 1) if self.took else 0.0

    def runqueue_ms(self, i: int) -> float:
        """How long, of the stretch after apply ``i``, the loop thread waited for a core."""
        if not self.took:
            return 0.0
        return round((self.runqueue_ns[i + 1] - self.runqueue_ns[i]) / 1e6, 1)

    def own_ms_max(self) -> float:
        """The longest stretch less the time the loop thread waited for a core in it: what
        this process held the loop for, whatever the machine's load."""
        if not self.took:
            return 0.0
        own = [
            (b - a) * 1e9 - (rb - ra)
            for (a, b), (ra, rb) in zip(
                itertools.pairwise(self.applied), itertools.pairwise(self.runqueue_ns), strict=True
            )
        ]
        return round(max(own) / 1e6, 1)

    def gap_around(self, at: float) -> int:
        """The index of the apply that starts the stretch holding the instant ``at``."""
        return max(bisect.bisect_right(self.applied, at) - 1, 0)


async def _tailer_gaps(ns: Namespace, stop: asyncio.Event) -> _Ticks:
    """Play the tailer on the loop: one mkdir op every ``TICK_S``, held while the namespace
    is frozen."""
    ticks = _Ticks()
    try:
        stats = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        stats = -1

    def runqueue() -> int:
        return int(os.pread(stats, 100, 0).split()[1]) if stats >= 0 else 0

    try:
        while not stop.is_set():
            if not ns.frozen:
                began = time.perf_counter()
                op = ns.prepare_mkdir(f"/tick/t{next(_TICKS):07d}", parents=True)
                assert op is not None
                op.txid = ns.last_applied_txid + 1
                ns.apply(op)
                ticks.applied.append(time.perf_counter())
                ticks.took.append(ticks.applied[-1] - began)
                ticks.runqueue_ns.append(runqueue())
            await asyncio.sleep(TICK_S)
        ticks.applied.append(time.perf_counter())
        ticks.runqueue_ns.append(runqueue())
    finally:
        if stats >= 0:
            os.close(stats)
    return ticks


def _max_gap(times: list[float]) -> float:
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0


def checkpoint_held(ns: Namespace, workdir: Path) -> dict[str, float]:
    """The longest stretch without an apply, idle for a second and during each of three
    checkpoints: with the heap in 4 KiB pages, then twice with it collapsed into huge pages."""
    nn_loop = NameNodeLoop("bench").start()
    name_dir = NameDirectory(workdir / "checkpoint")
    name_dir.path.mkdir(parents=True, exist_ok=True)

    async def start() -> tuple[asyncio.Event, asyncio.Task[_Ticks]]:
        stop = asyncio.Event()
        return stop, asyncio.get_running_loop().create_task(_tailer_gaps(ns, stop))

    async def finish(stop: asyncio.Event, task: asyncio.Task[_Ticks]) -> _Ticks:
        stop.set()
        return await task

    def one(prefix: str, huge_pages: bool) -> dict[str, float]:
        forked: list[float] = []  # on_thaw runs on the loop just after the fork
        checkpointer = StandbyCheckpointer(
            lambda: ns, name_dir, NS_INFO, checkpoint_txns=1, checkpoint_period=3600,
            checkpoints_retained=1, nn_id="bench", nn_loop=nn_loop, huge_pages=huge_pages,
            on_thaw=lambda: forked.append(time.perf_counter()),
        )
        stop, task = nn_loop.run(start())
        time.sleep(0.05)
        faults, rss = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, rss_bytes()
        began = time.perf_counter()
        result = checkpointer.do_checkpoint()
        took = time.perf_counter() - began
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        rss = rss_bytes() - rss
        time.sleep(0.05)
        busy = nn_loop.run(finish(stop, task))
        if result is None:
            raise RuntimeError("the checkpoint wrote nothing")
        applies = zip(busy.applied[: len(busy.took)], busy.took, strict=True)  # not the end stamp
        during = [d for t, d in applies if began <= t <= began + took]
        longest, at_fork = busy.longest_gap(), busy.gap_around(forked[0])
        figures = {
            "tailing_held_ms_max": round(_max_gap(busy.applied) * 1000, 1),
            "longest_gap_runqueue_ms": busy.runqueue_ms(longest),
            "held_ms_max_less_runqueue": busy.own_ms_max(),
            "gap_at_fork_ms": busy.gap_ms(at_fork),
            "gap_at_fork_runqueue_ms": busy.runqueue_ms(at_fork),
            "s": round(took, 2),
            "fork_ms": round(result.tailing_held_seconds * 1000, 1),
            "fork_cpu_ms": round(result.fork_cpu_seconds * 1000, 1),
            "ops_applied_during": float(len(during)),
            "apply_us_p99": round(_p99(during) * 1e6, 1),
            "minor_faults": float(faults),
            "rss_growth_mb": round(rss / 2**20, 1),
        }
        if result.heap is not None:
            figures["heap_collapse_s"] = round(result.heap.seconds, 2)
            figures["huge_page_mb"] = round(result.heap.huge_bytes / 2**20, 1)
        return {f"{prefix}_{key}": value for key, value in figures.items()}

    try:
        stop, task = nn_loop.run(start())
        time.sleep(1.0)
        idle = nn_loop.run(finish(stop, task))
        figures = {
            "load_average_1m_checkpoints": round(os.getloadavg()[0], 2),
            "tailing_gap_ms_max_idle": round(_max_gap(idle.applied) * 1000, 1),
            "tailing_gap_runqueue_ms_idle": idle.runqueue_ms(idle.longest_gap()),
            "tailing_gap_ms_max_less_runqueue_idle": idle.own_ms_max(),
            "tailing_apply_us_p99_idle": round(_p99(idle.took) * 1e6, 1),
        }
        figures.update(one("checkpoint_4k", huge_pages=False))
        figures.update(one("checkpoint_first", huge_pages=True))
        figures.update(one("checkpoint_next", huge_pages=True))
    finally:
        nn_loop.stop()
    for key in ("tailing_held_ms_max", "held_ms_max_less_runqueue", "fork_ms", "fork_cpu_ms"):
        figures[f"checkpoint_{key}"] = max(
            figures[f"checkpoint_first_{key}"], figures[f"checkpoint_next_{key}"]
        )
    return figures


def startup_to_serving(image: Path, workdir: Path) -> float:
    """Seconds from spawning a NameNode on ``image`` (as its txid-0 image) to STANDBY."""
    with NameNodeProcessCluster(workdir / "cluster", namenodes=1) as cluster:
        nn = cluster["nn1"]
        nn.stop()
        name_dir = cluster.name_dir("nn1")
        ns_info = NameDirectory(name_dir).read_version()
        for old in fsimage.list_images(name_dir):
            old[1].unlink()
            fsimage.md5_path(old[1]).unlink()
        # The same bytes under this cluster's identity: re-save with its namespace info.
        namespace, _, _ = fsimage.load_image(image)
        namespace.last_applied_txid = 0
        fsimage.save_image(namespace, name_dir, 0, ns_info)
        del namespace
        gc.collect()
        began = time.perf_counter()
        nn.start(timeout=900)
        return time.perf_counter() - began


def save_layout3(ns: Namespace, name_dir: Path) -> Path:
    """The baseline: ``ns`` as a layout-3 image, one ``inodes`` row per inode, written as
    ``fsimage`` wrote it before layout 4 (pre-order rows as dicts, inserts of 20,000)."""
    rows: list[dict[str, Any]] = []
    ids: dict[int, int] = {}
    parent_of: dict[int, int | None] = {id(ns.root): None}
    for node_id, (_path, node) in enumerate(ns.walk(), 1):
        is_dir = isinstance(node, INodeDirectory)
        if isinstance(node, INodeDirectory):
            ids[id(node)] = node_id
            for child in node.children:
                parent_of[id(child)] = node_id
        rows.append({
            "id": node_id, "parent_id": parent_of.pop(id(node)), "name": node.name,
            "is_dir": is_dir, "mtime_ms": node.mtime_ms, "permission": node.permission,
            "owner": node.owner, "group": node.group,
            "length": node.length if isinstance(node, INodeFile) else 0,
            "replication": node.replication if isinstance(node, INodeFile) else 0,
        })
    final = name_dir / fsimage.image_name(ns.last_applied_txid)
    info = fsimage.ImageInfo(ns.last_applied_txid, NS_INFO.namespace_id, NS_INFO.cluster_id,
                             3, 0, len(rows))
    engine = sa.create_engine(f"sqlite:///{final}", poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=OFF")
            fsimage.metadata.create_all(
                conn, tables=[fsimage.image_info, fsimage.inodes, fsimage.retry_entries]
            )
            conn.execute(fsimage.image_info.insert(), dataclasses.asdict(info))
            for start in range(0, len(rows), 20_000):
                conn.execute(fsimage.inodes.insert(), rows[start : start + 20_000])
    finally:
        engine.dispose()
    fsync_file(final)
    digest = fsimage._md5_of(final)
    fsimage.md5_path(final).write_text(f"{digest}  {final.name}\n")
    return final


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()`` with the wall and CPU seconds it took."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def run(
    workdir: Path, inodes: int, big_children: int, namenode: bool, baseline: bool
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "inodes_asked": inodes, "cpus": os.cpu_count() or 0,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    gc.collect()
    rss0 = rss_bytes()
    ns = Namespace()
    calls, built, built_cpu = timed(functools.partial(build, ns, inodes, big_children))
    gc.collect()
    count = ns.inode_count
    million = count / 1e6
    result.update(
        inodes=count,
        rss_bytes_per_inode=round((rss_bytes() - rss0) / count, 1),
        build_ops_per_s=round(calls / built),
        build_s=round(built, 1),
        build_cpu_s=round(built_cpu, 1),
    )
    if big_children:
        result.update(big_dir_figures(ns, big_children))
    name_dir = workdir / "images"
    name_dir.mkdir(parents=True, exist_ok=True)
    image, saved, saved_cpu = timed(
        functools.partial(fsimage.save_image, ns, name_dir, None, NS_INFO)
    )
    result["image_save_s_per_million"] = round(saved / million, 2)
    result["image_save_cpu_s_per_million"] = round(saved_cpu / million, 2)
    result["image_bytes_per_inode"] = round(image.stat().st_size / count, 1)
    (loaded, _, _), took, took_cpu = timed(functools.partial(fsimage.load_image, image))
    result["image_load_s_per_million"] = round(took / million, 2)
    result["image_load_cpu_s_per_million"] = round(took_cpu / million, 2)
    if loaded.inode_count != count:
        raise RuntimeError(f"the image loaded {loaded.inode_count} inodes of {count}")
    del loaded
    gc.collect()
    if baseline:
        old_dir = workdir / "layout3"
        old_dir.mkdir(parents=True, exist_ok=True)
        old, old_saved, old_saved_cpu = timed(functools.partial(save_layout3, ns, old_dir))
        loaded_old = timed(functools.partial(fsimage.load_image, old))
        (old_loaded, _, _), old_took, old_took_cpu = loaded_old
        if old_loaded.inode_count != count:
            raise RuntimeError(f"the layout-3 image loaded {old_loaded.inode_count} inodes")
        del old_loaded
        gc.collect()
        result.update(
            layout3_save_s_per_million=round(old_saved / million, 2),
            layout3_load_s_per_million=round(old_took / million, 2),
            layout3_bytes_per_inode=round(old.stat().st_size / count, 1),
            image_save_speedup_vs_layout3=round(old_saved / saved, 2),
            image_load_speedup_vs_layout3=round(old_took / took, 2),
            image_save_cpu_speedup_vs_layout3=round(old_saved_cpu / saved_cpu, 2),
            image_load_cpu_speedup_vs_layout3=round(old_took_cpu / took_cpu, 2),
        )
        shutil.rmtree(old_dir)
    result.update(checkpoint_held(ns, workdir))
    del ns
    gc.collect()
    if namenode:
        result["startup_to_serving_s"] = round(startup_to_serving(image, workdir), 2)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--inodes", type=int, default=1_000_000)
    parser.add_argument(
        "--big-dir", type=int, default=None,
        help=f"children of {BIG_DIR} (default: 1,000,000 from {BIG_DIR_FROM:,} inodes, else 0)",
    )
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--no-namenode", action="store_true",
                        help="skip startup_to_serving_s (no NameNode process)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the layout-3 image baseline")
    args = parser.parse_args(argv)
    big = args.big_dir if args.big_dir is not None else (
        1_000_000 if args.inodes >= BIG_DIR_FROM else 0
    )
    if args.inodes < 2 or not 0 <= big < args.inodes:
        parser.error(f"--big-dir {big} must be below --inodes {args.inodes}")
    setup_logging(level="warning")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-nsscale-"))
    try:
        result = run(workdir, args.inodes, big, not args.no_namenode, not args.no_baseline)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = [[key, result[key]] for key in (
        "inodes", "rss_bytes_per_inode", "build_ops_per_s", "image_save_s_per_million",
        "image_save_cpu_s_per_million", "image_load_s_per_million",
        "image_load_cpu_s_per_million", "image_bytes_per_inode",
        "layout3_save_s_per_million", "layout3_load_s_per_million", "layout3_bytes_per_inode",
        "image_save_speedup_vs_layout3", "image_load_speedup_vs_layout3",
        "image_save_cpu_speedup_vs_layout3", "image_load_cpu_speedup_vs_layout3",
        "tailing_gap_ms_max_idle", "tailing_gap_runqueue_ms_idle",
        "tailing_gap_ms_max_less_runqueue_idle", "tailing_apply_us_p99_idle",
        "checkpoint_tailing_held_ms_max", "checkpoint_held_ms_max_less_runqueue",
        "checkpoint_fork_ms", "checkpoint_fork_cpu_ms",
        *(f"{prefix}_{key}" for prefix in ("checkpoint_4k", "checkpoint_first", "checkpoint_next")
          for key in ("tailing_held_ms_max", "longest_gap_runqueue_ms",
                      "held_ms_max_less_runqueue", "gap_at_fork_ms",
                      "gap_at_fork_runqueue_ms", "fork_ms", "fork_cpu_ms", "heap_collapse_s",
                      "huge_page_mb", "apply_us_p99", "minor_faults", "rss_growth_mb", "s")),
        "load_average_1m_checkpoints", "startup_to_serving_s",
        "big_dir_list_page_ms", "big_dir_stat_us", "load_average_1m",
    ) if key in result]
    print_table(f"A namespace of {result['inodes']:,} inodes", ["key", "value"], rows)
    print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
