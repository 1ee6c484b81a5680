"""Transparent huge pages under the heap, so that forking the image writer holds the loop for
a few milliseconds whatever the namespace's size (issue 27; docs/architecture.md §5.7).

A fork copies the parent's page tables while the forking thread waits: an entry for every
4 KiB page of the heap, about 33 ms of CPU a GB here, 50 ms at 10 million inodes. A
2 MiB transparent huge page is one entry a level up (a PMD), which the fork copies instead of
512. So before each forked checkpoint, the checkpointer's bridge thread (not the loop) asks
the kernel to collapse the heap's anonymous mappings into huge pages: ``MADV_COLLAPSE``
(Linux 6.1) copies each 2 MiB range into a huge page in the calling thread, without the GIL,
whatever ``/sys/kernel/mm/transparent_hugepage/enabled`` says short of ``never``. The first
collapse copies the whole heap (about 2.5 s of CPU a GB, beside the loop, which waits only
when it touches the 2 MiB being copied); later ones copy what changed since: new arenas, and
the ranges the parent wrote to while a child shared them (a write to a shared huge page
splits it back into 4 KiB entries, then copies the one 4 KiB page, as without huge pages).

``plan_collapse`` decides from the text of ``/proc/self/smaps`` (pure, table-tested);
``collapse_heap`` carries the plan out a huge page per ``madvise`` call and stops between two
when asked, so that a failover does not wait for a whole heap to be copied. One huge page a
call, because a call over many keeps the loop's own ``mmap`` and ``munmap`` (Python's arenas)
waiting: with 64 MiB calls, the loop thread slept 6 ms at a time beside them, with 2 MiB
calls no longer than its own 1 ms sleep (1,000,000 inodes, the thread's schedstat).

    report = collapse_heap(should_stop=stop.is_set)
    if report.errors: log.warning("heap not all in huge pages", errors=report.errors)
"""

from __future__ import annotations

import ctypes
import errno
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

MADV_COLLAPSE = 25
"""``<linux/mman.h>``; Python's ``mmap`` module names it only from 3.13 on."""
HUGE_PAGE_BYTES = 2 << 20
"""x86-64's PMD size; ``huge_page_bytes()`` reads the machine's."""
MIN_RESIDENT_FRACTION = 0.75
"""A collapse fills the pages of a 2 MiB range that were never touched: only mappings at
least this resident are collapsed (the heap's arenas are; thread stacks and the reserved
tails of malloc's arenas are not), so a collapse adds at most a third to what it covers."""

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+ ?(.*)$")
_ANONYMOUS_NAMES = ("", "[heap]")


@dataclass(frozen=True, slots=True)
class Mapping:
    """One mapping of ``/proc/self/smaps``: its addresses, permissions, name, and how much of
    it is resident (``rss``) and already in anonymous huge pages, in bytes."""

    start: int
    end: int
    perms: str
    name: str
    rss: int
    anon_huge: int

    @property
    def anonymous(self) -> bool:
        """Private anonymous memory: Python's arenas and malloc's heap (``[anon:...]`` is a
        named one). Files, shared memory and the main thread's stack are left alone."""
        return self.perms[3] == "p" and (
            self.name in _ANONYMOUS_NAMES or self.name.startswith("[anon:")
        )


@dataclass(frozen=True, slots=True)
class Range:
    """Addresses to collapse: whole huge pages inside one mapping."""

    start: int
    end: int


def parse_smaps(text: str) -> list[Mapping]:
    """The mappings of a ``/proc/<pid>/smaps`` text, with their ``Rss`` and
    ``AnonHugePages``."""
    found: list[Mapping] = []
    current: dict[str, int] = {}
    header: re.Match[str] | None = None

    def close() -> None:
        if header is not None:
            found.append(
                Mapping(
                    int(header[1], 16), int(header[2], 16), header[3], header[4].strip(),
                    current.get("Rss", 0), current.get("AnonHugePages", 0),
                )
            )

    for line in text.splitlines():
        match = _HEADER.match(line)
        if match is not None:
            close()
            header, current = match, {}
            continue
        key, _, rest = line.partition(":")
        if key in ("Rss", "AnonHugePages"):
            value, unit = rest.split()
            if unit != "kB":
                raise ValueError(f"smaps: {key} in {unit!r}, not kB: {line!r}")
            current[key] = int(value) * 1024
    close()
    return found


def plan_collapse(mappings: Iterable[Mapping], huge_page: int = HUGE_PAGE_BYTES) -> list[Range]:
    """The ranges worth collapsing: in each writable private anonymous mapping that is at
    least ``MIN_RESIDENT_FRACTION`` resident and holds at least a huge page's worth of small
    pages, the whole huge pages inside it (``MADV_COLLAPSE`` refuses a range that holds none).

    >>> m = Mapping(0x1FF000, 0x801000, "rw-p", "", rss=0x602000, anon_huge=0)
    >>> [(hex(r.start), hex(r.end)) for r in plan_collapse([m])]
    [('0x200000', '0x800000')]
    """
    ranges: list[Range] = []
    for m in mappings:
        if not m.anonymous or "w" not in m.perms:
            continue
        if m.rss - m.anon_huge < huge_page:
            continue  # nothing left to collapse, or too little to matter
        if m.rss < MIN_RESIDENT_FRACTION * (m.end - m.start):
            continue  # mostly never touched: a collapse would fill it
        start = -(-m.start // huge_page) * huge_page
        end = m.end // huge_page * huge_page
        if end > start:
            ranges.append(Range(start, end))
    return ranges


def steps(ranges: Iterable[Range], step: int = HUGE_PAGE_BYTES) -> list[Range]:
    """``ranges`` cut into pieces of at most ``step`` bytes (a multiple of the huge page)."""
    return [
        Range(at, min(at + step, r.end)) for r in ranges for at in range(r.start, r.end, step)
    ]


@dataclass(frozen=True, slots=True)
class CollapseReport:
    """What one ``collapse_heap`` did: the bytes it asked the kernel to collapse, the errors
    it met (errno names, each once, with the bytes they left in small pages; or why it could
    not read the mappings), the seconds it took, whether a stop cut it short, and the
    process's bytes in anonymous huge pages after it (``AnonHugePages`` of
    ``/proc/self/smaps_rollup``; 0 when that cannot be read)."""

    asked_bytes: int
    failed_bytes: int
    errors: tuple[str, ...]
    seconds: float
    stopped: bool
    huge_bytes: int


def huge_page_bytes() -> int:
    """The machine's PMD size, as the kernel states it; ``HUGE_PAGE_BYTES`` when it does not."""
    try:
        return int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return HUGE_PAGE_BYTES


def _madvise() -> Callable[[int, int, int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _anon_huge_bytes() -> int:
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


def collapse_heap(should_stop: Callable[[], bool] = lambda: False) -> CollapseReport:
    """Collapse this process's heap into transparent huge pages (``plan_collapse``), a huge
    page per ``madvise`` call, looking at ``should_stop`` before each. Blocking, in the
    kernel without the GIL: call it from a thread that holds nothing the loop needs."""
    began = time.perf_counter()
    huge_page = huge_page_bytes()
    try:
        mappings = parse_smaps(Path("/proc/self/smaps").read_text())
    except (OSError, ValueError) as exc:
        # An optimisation that cannot see the heap: the caller logs why and forks as before.
        why = f"cannot read /proc/self/smaps: {type(exc).__name__}: {exc}"
        return CollapseReport(0, 0, (why,), time.perf_counter() - began, False, 0)
    plan = steps(plan_collapse(mappings, huge_page), huge_page)
    madvise = _madvise()
    asked = failed = 0
    errors: dict[str, None] = {}
    stopped = False
    for step in plan:
        if should_stop():
            stopped = True
            break
        size = step.end - step.start
        asked += size
        if madvise(step.start, size, MADV_COLLAPSE) != 0:
            # EAGAIN: a page was busy or no huge page was free; EINVAL: huge pages are off
            # (``never``) or the kernel predates MADV_COLLAPSE; ENOMEM: a page went away
            # (pymalloc freed its arena meanwhile) or memory ran out. The step stays in
            # small pages, and the fork copies its entries as before.
            failed += size
            errors[errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))] = None
    return CollapseReport(
        asked_bytes=asked,
        failed_bytes=failed,
        errors=tuple(errors),
        seconds=time.perf_counter() - began,
        stopped=stopped,
        huge_bytes=_anon_huge_bytes(),
    )
