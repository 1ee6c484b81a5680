"""The VERSION file a storage directory keeps beside its data, one parser and one writer for
the JournalNode (``storageType=JOURNAL_NODE``) and the NameNode (``storageType=NAME_NODE``).

The format is HDFS's: Java-properties-like ``key=value`` lines, ``#`` and ``!`` start a
comment line (after leading blanks). Keys and values are stripped of surrounding blanks,
and a writer refuses a cluster id that would not survive that, so that what is written is
what is read back, byte for byte, by either daemon.

Every key is required. A file of another layout version is refused before its keys are
looked at, since another layout may name them differently.
"""

from __future__ import annotations

from proto.values import NamespaceInfo

JOURNAL_NODE = "JOURNAL_NODE"
NAME_NODE = "NAME_NODE"

_REQUIRED = ("clusterID", "namespaceID", "cTime", "layoutVersion", "storageType")


class VersionFileError(ValueError):
    """A VERSION file that cannot be written or read; the message names the source."""


def format_version(ns: NamespaceInfo, storage_type: str, *, title: str) -> bytes:
    """The bytes of a VERSION file for ``ns``; ``title`` goes into a leading comment line."""
    cluster_id = ns.cluster_id
    if not cluster_id or cluster_id != cluster_id.strip() or not cluster_id.isprintable():
        raise VersionFileError(
            f"invalid cluster id {cluster_id!r}: it must be non-empty, printable and have no"
            " surrounding blanks"
        )
    if int(ns.namespace_id) <= 0:
        raise VersionFileError(f"invalid namespace id {ns.namespace_id}: it must be positive")
    return (
        f"#{title}\n"
        f"namespaceID={int(ns.namespace_id)}\n"
        f"clusterID={cluster_id}\n"
        f"cTime={int(ns.ctime)}\n"
        f"storageType={storage_type}\n"
        f"layoutVersion={int(ns.layout_version)}\n"
    ).encode()


def parse_properties(data: bytes, source: str) -> dict[str, str]:
    """The ``key=value`` pairs of a properties text (later keys win, as in Java)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VersionFileError(f"{source} is malformed: {exc}") from None
    props: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise VersionFileError(f"{source} line {number} is not key=value: {line[:80]!r}")
        props[key.strip()] = value.strip()
    return props


def parse_version(
    data: bytes, source: str, storage_type: str, *, layout_version: int | None = None
) -> NamespaceInfo:
    """The NamespaceInfo in a VERSION file of ``storage_type``; VersionFileError naming
    ``source`` when it is malformed, of another storage type, or (when ``layout_version`` is
    given) of another layout version."""
    props = parse_properties(data, source)
    if layout_version is not None and "layoutVersion" in props:
        found = props["layoutVersion"]
        if found != str(layout_version):
            raise VersionFileError(
                f"{source} has layout version {found}; this reads version {layout_version}"
            )
    for key in _REQUIRED:
        if key not in props:
            raise VersionFileError(f"{source} has no {key}")
    if props["storageType"] != storage_type:
        raise VersionFileError(
            f"{source} is not a {storage_type} VERSION (storageType={props['storageType']!r})"
        )
    try:
        info = NamespaceInfo(
            cluster_id=props["clusterID"],
            namespace_id=int(props["namespaceID"]),
            ctime=int(props["cTime"]),
            layout_version=int(props["layoutVersion"]),
        )
    except ValueError as exc:
        raise VersionFileError(f"{source} is malformed: {exc}") from None
    if not info.cluster_id or info.namespace_id <= 0:
        raise VersionFileError(f"{source} is malformed: empty clusterID or namespaceID <= 0")
    return info
