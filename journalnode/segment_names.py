"""Edit log segment file names (docs/protocol.md §7.1, HDFS-3077 §4.1), as pure functions
of strings.

::

    edits_inprogress_<start txid, 19 digits>           the open segment
    edits_<start 19 digits>-<end 19 digits>            a finalized segment
    edits_<start 19 digits>-<end 19 digits>.md5        the finalized segment's digest
    <either of the above>.<reason>[.<n>]               moved aside (.empty, .corrupt, .stale,
                                                       .mismatch)

The 19 digits make names sort in txid order. Which files ``purge`` removes is decided here
too (``purgeable``), so that the rule is tested on names without a directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from conf.mutants import Mutant, active

IN_PROGRESS = re.compile(r"edits_inprogress_(\d{19})")
FINALIZED = re.compile(r"edits_(\d{19})-(\d{19})")
# The md5 of a finalized segment's records, recorded when it was finalized or installed
# (docs/protocol.md §8.7). Listed before MOVED_ASIDE, whose pattern it would also match.
DIGEST = re.compile(r"edits_(\d{19})-(\d{19})\.md5")
DIGEST_SUFFIX = ".md5"
# A moved-aside file keeps its segment name and gains ".<reason>" (and ".<n>" if taken).
MOVED_ASIDE = re.compile(r"edits_(?:inprogress_(\d{19})|(\d{19})-\d{19})\.[A-Za-z0-9_.-]+")
REASON = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Kind(Enum):
    IN_PROGRESS = "in-progress"
    FINALIZED = "finalized"
    DIGEST = "digest"
    MOVED_ASIDE = "moved-aside"


@dataclass(frozen=True, slots=True)
class SegmentName:
    """What a file name says: its kind, first txid and (finalized only) last txid."""

    kind: Kind
    start_txid: int
    end_txid: int | None = None


def in_progress_name(start_txid: int) -> str:
    return f"edits_inprogress_{start_txid:019d}"


def finalized_name(start_txid: int, end_txid: int) -> str:
    return f"edits_{start_txid:019d}-{end_txid:019d}"


def digest_name(start_txid: int, end_txid: int) -> str:
    """The file beside ``edits_<start>-<end>`` that holds the md5 of its records."""
    return finalized_name(start_txid, end_txid) + DIGEST_SUFFIX


def finalized_prefix(start_txid: int) -> str:
    """The beginning every finalized name of a segment starting at ``start_txid`` shares."""
    return f"edits_{start_txid:019d}-"


def parse(name: str) -> SegmentName | None:
    """The segment a file name stands for, or None for any other file."""
    if m := FINALIZED.fullmatch(name):
        return SegmentName(Kind.FINALIZED, int(m.group(1)), int(m.group(2)))
    if m := IN_PROGRESS.fullmatch(name):
        return SegmentName(Kind.IN_PROGRESS, int(m.group(1)))
    if m := DIGEST.fullmatch(name):
        return SegmentName(Kind.DIGEST, int(m.group(1)), int(m.group(2)))
    if m := MOVED_ASIDE.fullmatch(name):
        return SegmentName(Kind.MOVED_ASIDE, int(m.group(1) or m.group(2)))
    return None


def purgeable(name: str, min_txid_to_keep: int) -> bool:
    """Whether ``purge(min_txid_to_keep)`` removes this file of current/.

    A finalized segment goes when its last txid is below the first txid to keep (a segment
    ending exactly at ``min_txid_to_keep`` still holds it); a moved-aside file when its first
    txid is; the open segment never. A segment's digest file goes with the segment.
    """
    seg = parse(name)
    if seg is None or seg.kind is Kind.IN_PROGRESS:
        return False
    if seg.kind in (Kind.FINALIZED, Kind.DIGEST):
        if active(Mutant.PURGE_INCLUSIVE):
            return seg.end_txid is not None and seg.end_txid <= min_txid_to_keep
        return seg.end_txid is not None and seg.end_txid < min_txid_to_keep
    return seg.start_txid < min_txid_to_keep
