"""The configuration keys: every key's name, value parser, default and meaning, in one table.

``KEYS`` is the single list of what a ``*-site.xml`` may contain (docs/operations.md §2).
Per-id keys
are patterns: ``<ns>`` stands for the nameservice and ``<id>`` for a NameNode or JournalNode
id, as in ``dfs.journalnode.rpc-address.<id>``. Parsers take the text of a value and return
a plain value or raise ``ValueError`` with a short message; ``conf.settings`` adds the file
and the key to make the one-line ``ConfigError``.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conf.xmlconf import ConfigError

__all__ = [
    "KEYS",
    "KEYS_BY_NAME",
    "MIB",
    "Key",
    "QJournalUri",
    "ZKJournalUri",
    "find_key",
    "parse_address",
    "parse_bool",
    "parse_duration",
    "parse_int",
    "parse_qjournal_uri",
    "parse_shared_edits_uri",
    "suggest_key",
]

MIB = 1024 * 1024

# ---------------------------------------------------------------------------------------------
# Value parsers: text in, value out, ValueError with a short message (no key, no file) on error.
# ---------------------------------------------------------------------------------------------

_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)", re.IGNORECASE)
_INT_RE = re.compile(r"-?[0-9]+")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_ID_RE = re.compile(r"[A-Za-z0-9_-]+")
_JOURNAL_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
_HOST_RE = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")
_FENCE_RE = re.compile(r"[A-Za-z][\w.-]*(\(.*\))?")
_ZK_PERMS = frozenset("rwcda")


def parse_duration(text: str, unit: str = "ms") -> float:
    """Seconds from a Hadoop duration: a number with an optional ns/us/ms/s/m/h/d suffix.

    A bare number is in ``unit`` (``"ms"`` for keys named ``*.ms``): ``parse_duration("20s")``
    and ``parse_duration("20000")`` are both 20.0.
    """
    match = _DURATION_RE.fullmatch(text.strip())
    suffix = match.group(2).lower() if match else ""
    if match is None or (suffix and suffix not in _DURATION_UNITS):
        raise ValueError(f"expected a duration, got {text!r}")
    return float(match.group(1)) * _DURATION_UNITS[suffix or unit]


def parse_int(text: str) -> int:
    if not _INT_RE.fullmatch(text.strip()):
        raise ValueError(f"expected an integer, got {text!r}")
    return int(text)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def parse_address(text: str, *, allow_port_zero: bool = True) -> str:
    """Validate ``host:port`` (IPv6 hosts in brackets) and return it; port 0 means "any free"."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not _HOST_RE.fullmatch(host) or not re.fullmatch("[0-9]{1,5}", port_text):
        raise ValueError(f"expected host:port, got {text!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} out of range 0..65535 in {text!r}")
    if port == 0 and not allow_port_zero:
        raise ValueError(f"port 0 is not an address one can connect to, in {text!r}")
    return f"{host}:{port}"


def parse_edits_address(text: str) -> str | None:
    """``host:port``; ``auto`` (or empty) for the rpc address's host on any free port, as
    ""; ``off`` for none, as None."""
    value = text.strip()
    if value.lower() == "off":
        return None
    if value.lower() in ("", "auto"):
        return ""
    return parse_address(value)


def parse_path(text: str) -> Path:
    """An absolute local path; Hadoop's ``file://`` URI form is accepted too."""
    value = text.strip()
    if value.startswith("file://"):
        value = value[len("file://") :]
    if not value or not value.startswith("/"):
        raise ValueError(f"expected an absolute path, got {text!r}")
    return Path(value)


def parse_id(text: str) -> str:
    value = text.strip()
    if not _ID_RE.fullmatch(value):
        raise ValueError(f"expected an id (letters, digits, '_' or '-'), got {text!r}")
    return value


def parse_id_list(text: str) -> tuple[str, ...]:
    """A comma list of ids (``nn1,nn2``); empty items and duplicates are errors."""
    if not text.strip():
        return ()
    ids = tuple(parse_id(item) for item in text.split(","))
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate id {duplicates[0]!r} in {text!r}")
    return ids


@dataclass(frozen=True, slots=True)
class QJournalUri:
    """Where the shared edit log lives: the JournalNodes' addresses and the journal id."""

    addresses: tuple[str, ...]
    journal_id: str

    def __str__(self) -> str:
        return f"qjournal://{';'.join(self.addresses)}/{self.journal_id}"


def parse_qjournal_uri(uri: str) -> QJournalUri:
    """Parse ``qjournal://h1:8485;h2:8485;h3:8485/journal-id``; a bad URI is a ConfigError."""
    text = uri.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme != "qjournal":
        raise ConfigError(f"expected qjournal://host:port;host:port/journal-id, got {uri!r}")
    hosts, slash, journal_id = rest.partition("/")
    if not slash or not _JOURNAL_ID_RE.fullmatch(journal_id) or journal_id in (".", ".."):
        raise ConfigError(f"expected a journal id after the addresses, got {uri!r}")
    return QJournalUri(_uri_addresses(hosts.split(";"), uri, "JournalNode"), journal_id)


def _uri_addresses(hosts: list[str], uri: str, what: str) -> tuple[str, ...]:
    """The ``host:port`` of each of ``hosts`` (in ``uri``), none twice; else ConfigError."""
    try:
        addresses = tuple(parse_address(a, allow_port_zero=False) for a in hosts)
    except ValueError as err:
        raise ConfigError(f"{err} (in {uri!r})") from None
    if len(set(addresses)) != len(addresses):
        raise ConfigError(f"a {what} address is listed twice in {uri!r}")
    return addresses


@dataclass(frozen=True, slots=True)
class ZKJournalUri:
    """Where a ZooKeeper journal lives (docs/architecture.md §9.2): the ZooKeeper servers
    and the znode under which its live log is kept; ``journal_id`` is that path."""

    hosts: tuple[str, ...]
    path: str

    @property
    def journal_id(self) -> str:
        return self.path

    @property
    def connect_string(self) -> str:
        """kazoo's ``hosts``: ``h1:2181,h2:2181``."""
        return ",".join(self.hosts)

    def __str__(self) -> str:
        return f"zookeeper://{self.connect_string}{self.path}"


def parse_zookeeper_journal_uri(uri: str) -> ZKJournalUri:
    """Parse ``zookeeper://h1:2181,h2:2181/path/of/journal``; a bad URI is a ConfigError."""
    text = uri.strip()
    _, _, rest = text.partition("://")
    hosts, slash, path = rest.partition("/")
    names = path.split("/")
    if not slash or not path or any(
        not _JOURNAL_ID_RE.fullmatch(n) or n in (".", "..") for n in names
    ):
        raise ConfigError(
            f"expected a znode path after the ZooKeeper hosts (zookeeper://h1:2181,h2:2181/"
            f"hanamenode/journal), got {uri!r}"
        )
    return ZKJournalUri(_uri_addresses(hosts.split(","), uri, "ZooKeeper"), "/" + path)


def parse_shared_edits_uri(uri: str) -> QJournalUri | ZKJournalUri:
    """``dfs.namenode.shared.edits.dir``: ``qjournal://`` for the QJM, ``zookeeper://`` for
    the ZooKeeper journal; any other scheme is a ConfigError naming both."""
    scheme = uri.strip().partition("://")[0]
    if scheme == "zookeeper":
        return parse_zookeeper_journal_uri(uri)
    if scheme != "qjournal":
        raise ConfigError(
            f"expected qjournal://host:port;host:port/journal-id or "
            f"zookeeper://host:port,host:port/path, got {uri!r}"
        )
    return parse_qjournal_uri(uri)


PROXY_PROVIDERS = ("ConfiguredFailoverProxyProvider", "ObserverReadProxyProvider")
"""The client's proxy providers, by HDFS's class names (a package prefix is accepted)."""


def parse_proxy_provider(text: str) -> str:
    """HDFS's proxy provider class name, with or without its package.

    >>> parse_proxy_provider("org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider")
    'ObserverReadProxyProvider'
    """
    name = text.strip().rsplit(".", 1)[-1]
    if name not in PROXY_PROVIDERS:
        raise ValueError(f"expected one of {', '.join(PROXY_PROVIDERS)}, got {text!r}")
    return name


def parse_fencing_methods(text: str) -> tuple[str, ...]:
    """One fencing method per line, tried in order: ``shell(/path/to/script args)``, ..."""
    methods = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not methods:
        raise ValueError("expected at least one fencing method, e.g. shell(/bin/true)")
    for method in methods:
        if not _FENCE_RE.fullmatch(method):
            raise ValueError(f"expected a fencing method like shell(command), got {method!r}")
    return methods


def parse_zk_quorum(text: str) -> str:
    """``host:port,host:port`` (kazoo's ``hosts``), normalized without spaces, with an optional
    chroot after the last host as in ZooKeeper's connect string (``h1:2181,h2:2181/chroot``)."""
    if not text.strip():
        return ""
    hosts, _, chroot = text.strip().partition("/")
    normalized = ",".join(parse_address(i, allow_port_zero=False) for i in hosts.split(","))
    chroot = chroot.strip("/")
    return normalized + parse_znode("/" + chroot) if chroot else normalized


def _indirect(text: str) -> str:
    """``text``, or the content of the file it names as ``@/absolute/path`` (Hadoop's
    ``ZKUtil.resolveConfIndirection``): a secret kept out of the configuration file, in a
    file only the daemons' user reads."""
    value = text.strip()
    if not value.startswith("@"):
        return value
    path = value[1:].strip()
    if not path.startswith("/"):
        raise ValueError(f"expected @/absolute/path of a file holding the value, got {value!r}")
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path} ({type(exc).__name__}: {exc})") from None


def parse_zk_auth(text: str) -> tuple[tuple[str, str], ...]:
    """``digest:user:password,...`` as kazoo ``auth_data``: ``(("digest", "user:password"),)``;
    ``@/path`` reads the value from that file."""
    auth = []
    for item in (i.strip() for i in _indirect(text).split(",") if i.strip()):
        scheme, sep, credential = item.partition(":")
        if not sep or not scheme or not credential:
            raise ValueError("expected scheme:credential, e.g. digest:user:password")
        auth.append((scheme, credential))
    return tuple(auth)


def parse_zk_acl(text: str) -> str:
    """``scheme:id:perms,...`` (perms from ``rwcda``), e.g. ``world:anyone:rwcda`` or
    ``digest:user:base64-sha1:rwcda``; ``@/path`` reads the value from that file."""
    items = [i.strip() for i in _indirect(text).split(",") if i.strip()]
    if not items:
        raise ValueError("expected at least one scheme:id:perms entry")
    for item in items:
        scheme, _, rest = item.partition(":")
        ident, _, perms = rest.rpartition(":")
        if not scheme or not ident or not perms or not set(perms.lower()) <= _ZK_PERMS:
            raise ValueError(f"expected scheme:id:perms with perms from 'rwcda', got {item!r}")
    return ",".join(items)


def parse_znode(text: str) -> str:
    value = text.strip()
    parts = value.split("/")
    if not value.startswith("/") or (value != "/" and "" in parts[1:]):
        raise ValueError(f"expected an absolute znode path like /hanamenode, got {text!r}")
    return value


def _single_nameservice(text: str) -> str:
    if "," in text:
        raise ValueError(f"expected one nameservice id (federation is not supported), got {text!r}")
    return parse_id(text)


# Upper bounds: a value past them is a config error naming the key, not an OverflowError deep
# in a library (a timer of 10^300 seconds, a gRPC limit past its int32, a thread pool of 10^9).
MAX_DURATION_SECONDS = 365 * 86400.0
MAX_COUNT = 2**63 - 1
MAX_MESSAGE_MIB = (2**31 - 1) // MIB  # gRPC's message limits are int32 byte counts: 2047
MAX_HANDLERS = 10_000


def _duration(unit: str, *, positive: bool = True) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = parse_duration(text, unit)
        if positive and value <= 0:
            raise ValueError(f"must be greater than zero, got {text!r}")
        if value > MAX_DURATION_SECONDS:
            raise ValueError(f"must be at most 365 days, got {text!r}")
        return value

    return parse


def _short_duration(unit: str, maximum: float) -> Callable[[str], float]:
    """A duration from 0 (off) to ``maximum`` seconds: a wait on a hot path, where a
    value of seconds is a typo, not a setting."""
    parse_any = _duration(unit, positive=False)

    def parse(text: str) -> float:
        value = parse_any(text)  # a negative one is not a duration
        if value > maximum:
            raise ValueError(f"must be at most {maximum:g}s, got {text!r}")
        return value

    return parse


def _count(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = parse_int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {text!r}")
        if value > maximum:
            raise ValueError(f"must be at most {maximum}, got {text!r}")
        return value

    return parse


def _multiplier(text: str) -> float:
    """A finite number, 0 or more (0 turns the feature it scales off)."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):  # NaN fails the first test
        raise ValueError(f"must be a finite number of at least 0, got {text!r}")
    return value


def _mebibytes(text: str, maximum: int = MAX_COUNT // MIB) -> int:
    return _count(1, maximum)(text) * MIB


def _message_mebibytes(text: str) -> int:
    return _mebibytes(text, MAX_MESSAGE_MIB)


# ---------------------------------------------------------------------------------------------
# The key table.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One configuration key: ``<ns>``/``<id>`` in the name stand for the nameservice/an id."""

    name: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str

    @property
    def is_pattern(self) -> bool:
        return "<" in self.name

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(re.findall(r"<(\w+)>", self.name))

    @functools.cached_property
    def _regex(self) -> re.Pattern[str]:
        return re.compile(
            "".join(
                f"(?P<{p[1:-1]}>[^.]+)" if p.startswith("<") else re.escape(p)
                for p in re.split(r"(<\w+>)", self.name)
                if p
            )
        )

    def match(self, name: str) -> dict[str, str] | None:
        """The placeholder values if ``name`` is this key, else None."""
        found = self._regex.fullmatch(name)
        return found.groupdict() if found else None

    def instantiate(self, **values: str) -> str:
        name = self.name
        for placeholder, value in values.items():
            name = name.replace(f"<{placeholder}>", value)
        return name


def _qjm_timeout(op: str, default_ms: int, doc: str) -> Key:
    return Key(f"dfs.qjournal.{op}.timeout.ms", _duration("ms"), str(default_ms), doc)


KEYS: tuple[Key, ...] = (
    # Identity and layout.
    Key("dfs.nameservices", _single_nameservice, "hanamenode", "the nameservice id"),
    Key("dfs.ha.namenodes.<ns>", parse_id_list, None, "NameNode ids of the nameservice (nn1,nn2)"),
    Key(
        "dfs.namenode.shared.edits.dir",
        parse_shared_edits_uri,
        None,
        "the shared edit log: qjournal://h1:8485;h2:8485;h3:8485/<journal-id>, or "
        "zookeeper://h1:2181,h2:2181/<path> for the ZooKeeper journal",
    ),
    Key(
        "dfs.namenode.zookeeper-journal.max-znode-bytes",
        _count(4096, 1_000_000),
        "524288",
        "the largest batch znode of the ZooKeeper journal's live log, in bytes; a larger "
        "batch is cut into several (ZooKeeper refuses a request above jute.maxbuffer, 1 MB)",
    ),
    Key(
        "dfs.namenode.zookeeper-journal.window.bytes",
        _count(1),
        str(64 * MIB),
        "the ZooKeeper journal: the bytes of batches ZooKeeper holds beyond what every "
        "NameNode packed; past it the publisher deletes the oldest packed ones anyway",
    ),
    Key(
        "dfs.namenode.zookeeper-journal.window.seconds",
        _duration("s"),
        "300",
        "the same in age: no batch older than this stays once the active packed it",
    ),
    Key(
        "dfs.namenode.zookeeper-journal.publish.period",
        _duration("s"),
        "2",
        "how often each NameNode packs the new batches on its disk and the active deletes "
        "the packed ones",
    ),
    Key(
        "dfs.namenode.shared.edits.dir.<ns>.<id>",
        parse_shared_edits_uri,
        None,
        "the same, for one NameNode: its own addresses of the same JournalNodes (a proxy, "
        "another network), as in Hadoop; the journal id must be the generic key's",
    ),
    Key("dfs.journalnode.ids", parse_id_list, "", "JournalNode ids (jn1,jn2,jn3), optional"),
    # JournalNode.
    Key("dfs.journalnode.rpc-address", parse_address, "0.0.0.0:8485", "JournalNode gRPC address"),
    Key("dfs.journalnode.rpc-address.<id>", parse_address, None, "the same, for one JournalNode"),
    Key(
        "dfs.journalnode.http-address",
        parse_address,
        "0.0.0.0:8480",
        "JournalNode HTTP address (Prometheus /metrics)",
    ),
    Key("dfs.journalnode.http-address.<id>", parse_address, None, "the same, for one JournalNode"),
    Key(
        "dfs.journalnode.edits-address",
        parse_edits_address,
        "auto",
        "where the edits wire listens for writers' batches (docs/protocol.md §13.8): "
        "auto for the rpc-address host on any free port (writers learn it from "
        "GetJournalState), host:port, or off",
    ),
    Key(
        "dfs.journalnode.edits-address.<id>",
        parse_edits_address,
        None,
        "the same, for one JournalNode",
    ),
    Key(
        "dfs.journalnode.edits.dir",
        parse_path,
        "/tmp/hanamenode/journal",
        "JournalNode storage directory",
    ),
    Key("dfs.journalnode.edits.dir.<id>", parse_path, None, "the same, for one JournalNode"),
    Key(
        "dfs.journalnode.edit-cache-size.bytes",
        _count(0),
        "1048576",
        "recent edits kept in memory per journal for in-progress tailing",
    ),
    Key(
        "dfs.journalnode.edit-subscription.queue.bytes",
        _count(1, 1 << 30),
        "4194304",
        "edits queued for one SubscribeEdits reader at most; past it the reader is dropped",
    ),
    Key(
        "dfs.journalnode.edit-subscription.max",
        _count(1, 10_000),
        "64",
        "SubscribeEdits subscriptions one journal serves at once",
    ),
    Key(
        "dfs.journalnode.max-journals",
        _count(1, 1_000_000),
        "100",
        "journal ids one JournalNode stores at most (Format of one more is refused)",
    ),
    Key(
        "dfs.journalnode.enable.sync",
        parse_bool,
        "true",
        "fetch finalized segments this JournalNode lacks from its peers (HDFS-4025)",
    ),
    Key(
        "dfs.journalnode.sync.interval",
        _duration("ms"),
        "2m",
        "how often a JournalNode compares its segments with its peers' (bare number: ms)",
    ),
    Key(
        "dfs.journalnode.enable.sync.format",
        parse_bool,
        "false",
        "a JournalNode with empty storage formats itself from a majority of its peers "
        "(HDFS-16690)",
    ),
    # NameNode.
    Key(
        "dfs.namenode.rpc-address.<ns>.<id>",
        parse_address,
        "0.0.0.0:8020",
        "NameNode client gRPC address",
    ),
    Key(
        "dfs.namenode.http-address.<ns>.<id>",
        parse_address,
        "0.0.0.0:9870",
        "NameNode HTTP address (Prometheus /metrics)",
    ),
    Key("dfs.namenode.name.dir", parse_path, "/tmp/hanamenode/name", "NameNode local name dir"),
    Key("dfs.namenode.name.dir.<ns>.<id>", parse_path, None, "the same, for one NameNode"),
    Key(
        "dfs.namenode.observer.<ns>.<id>",
        parse_bool,
        "false",
        "NameNode <id> starts as an observer (HDFS-12943): it tails the log and serves reads",
    ),
    Key(
        "dfs.ls.limit",
        _count(1, 100_000),
        "1000",
        "most entries one GetListing answer holds (HDFS's key); a client asks for the rest "
        "page by page",
    ),
    Key(
        "dfs.namenode.multi.max-ops",
        _count(1, 100_000),
        "1000",
        "most ops one Multi call may hold (a longer one is refused, INVALID_ARGUMENT)",
    ),
    Key(
        "dfs.namenode.session.max-unanswered-calls",
        _count(1, 1 << 20),
        "1024",
        "calls one Session holds unanswered; more get RESOURCE_EXHAUSTED until answers drain",
    ),
    Key(
        "dfs.namenode.observer.read.max-wait.ms",
        _duration("ms", positive=False),
        "1000",
        "longest an observer holds a read until it has applied the txid the client has seen",
    ),
    # Quorum Journal Manager.
    _qjm_timeout("start-segment", 20000, "QJM startLogSegment quorum timeout"),
    _qjm_timeout("prepare-recovery", 120000, "QJM prepareRecovery quorum timeout"),
    _qjm_timeout("accept-recovery", 120000, "QJM acceptRecovery quorum timeout"),
    _qjm_timeout("finalize-segment", 120000, "QJM finalizeLogSegment quorum timeout"),
    _qjm_timeout("select-input-streams", 20000, "QJM getEditLogManifest quorum timeout"),
    _qjm_timeout("get-journal-state", 120000, "QJM getJournalState quorum timeout"),
    _qjm_timeout("new-epoch", 120000, "QJM newEpoch quorum timeout"),
    _qjm_timeout("write-txns", 20000, "QJM journal (write) quorum timeout"),
    _qjm_timeout("format", 60000, "QJM format timeout (needs every JN)"),
    Key(
        "dfs.qjournal.heartbeat.interval.ms",
        _duration("ms"),
        "1000",
        "heartbeat to JNs while the writer is idle",
    ),
    Key(
        "dfs.qjournal.queued-edits.limit.mb",
        _mebibytes,
        "10",
        "per-JN queue limit before it is marked out of sync",
    ),
    # ZooKeeper.
    Key("ha.zookeeper.quorum", parse_zk_quorum, "", "ZooKeeper hosts host:port,host:port"),
    Key(
        "ha.zookeeper.session-timeout.ms",
        _duration("ms"),
        "10000",
        "ZooKeeper session timeout",
    ),
    Key("ha.zookeeper.parent-znode", parse_znode, "/hanamenode", "parent znode of all our znodes"),
    Key("ha.zookeeper.auth", parse_zk_auth, "", "ZooKeeper auth, digest:user:password,..."),
    Key("ha.zookeeper.acl", parse_zk_acl, "world:anyone:rwcda", "ACL of the znodes we create"),
    # HA.
    Key(
        "dfs.ha.automatic-failover.enabled",
        parse_bool,
        "false",
        "ZooKeeper-driven automatic failover",
    ),
    Key(
        "dfs.ha.fencing.methods",
        parse_fencing_methods,
        "shell(/bin/true)",
        "fencing methods, one per line, tried in order",
    ),
    Key(
        "dfs.ha.tail-edits.period",
        _duration("s", positive=False),
        "1",
        "how often the standby tails the log (s)",
    ),
    Key(
        "dfs.ha.tail-edits.in-progress",
        parse_bool,
        "false",
        "the standby also tails the in-progress segment (edits a JN majority holds)",
    ),
    Key(
        "dfs.ha.tail-edits.push",
        parse_bool,
        "true",
        "with in-progress tailing, subscribe to every JournalNode's pushed edits (SubscribeEdits)"
        " and poll only as the fallback",
    ),
    Key(
        "dfs.ha.tail-edits.qjm.rpc.max-txns",
        _count(1, 1 << 20),  # proto.bounds: GetJournaledEditsRequest.max_txns
        "5000",
        "most edits one in-progress tailing call returns",
    ),
    Key("dfs.ha.log-roll.period", _duration("s"), "120", "how often the standby asks for a roll"),
    Key(
        "dfs.ha.log-roll.observers",
        parse_bool,
        "false",
        "observers that tail the in-progress segment ask for rolls too (the standby does in "
        "any case; an observer without in-progress tailing always asks, it sees nothing else)",
    ),
    Key(
        "dfs.namenode.edits.sync.max-batch.bytes",
        _count(1, MAX_MESSAGE_MIB * MIB),
        "1048576",
        "most bytes of edits the active's syncer ships in one batch to the JournalNodes",
    ),
    Key(
        "dfs.namenode.edits.sync.gather-delay",
        _short_duration("ms", 1.0),
        "16ms",
        "while recent batches held several edits, the longest the active's syncer waits "
        "(from the previous sync's start) for as many edits as their median before it ships "
        "the next batch; 0 ships at once",
    ),
    Key(
        "dfs.namenode.edits.sync.in-flight",
        _count(1, 16),
        "1",
        "syncs the active keeps in flight to the JournalNodes at once (1: HDFS's double "
        "buffer, one batch shipping while the next fills)",
    ),
    Key("dfs.namenode.checkpoint.txns", _count(1), "1000000", "checkpoint after this many txns"),
    Key("dfs.namenode.checkpoint.period", _duration("s"), "3600", "checkpoint at least this often"),
    Key(
        "dfs.namenode.edit.log.autoroll.multiplier.threshold",
        _multiplier,
        "0.5",
        "the active rolls its segment by itself once it holds this many times "
        "dfs.namenode.checkpoint.txns edits, asked or not (0: only when asked)",
    ),
    Key(
        "dfs.namenode.edit.log.autoroll.check.interval.ms",
        _duration("ms"),
        "300000",
        "how often the active compares its open segment with that threshold",
    ),
    Key(
        "dfs.namenode.num.checkpoints.retained",
        _count(1, 1000),
        "2",
        "fsimage checkpoints kept",
    ),
    Key(
        "ha.failover-controller.graceful-fence.rpc-timeout.ms",
        _duration("ms"),
        "5000",
        "timeout of the graceful fence RPC",
    ),
    Key(
        "ha.health-monitor.check-interval.ms",
        _duration("ms"),
        "1000",
        "how often the elector checks its NameNode's health",
    ),
    Key(
        "ha.health-monitor.rpc-timeout.ms",
        _duration("ms", positive=False),
        "20000",
        "the elector's health check also calls its NameNode on a fresh connection and counts "
        "it unhealthy when that call does not answer by then (0: no such call)",
    ),
    Key(
        "ha.failover-controller.new-active.rpc-timeout.ms",
        _duration("ms"),
        "60000",
        "longest wait for a NameNode to become active or step down in a graceful failover",
    ),
    Key(
        "ha.failover-controller.cli-check.rpc-timeout.ms",
        _duration("ms"),
        "20000",
        "timeout of hactl's state and health RPCs",
    ),
    # RPC.
    Key(
        "hanamenode.rpc.tls.enabled",
        parse_bool,
        None,
        "mutual TLS on every gRPC channel (default: true iff ca-file is set)",
    ),
    Key("hanamenode.rpc.tls.ca-file", parse_path, None, "CA certificate (PEM) trusted by all"),
    Key("hanamenode.rpc.tls.cert-file", parse_path, None, "this host's certificate chain (PEM)"),
    Key("hanamenode.rpc.tls.key-file", parse_path, None, "this host's private key (PEM)"),
    Key(
        "hanamenode.rpc.tls.cert-file.<id>",
        parse_path,
        None,
        "the certificate of one daemon (a NameNode or JournalNode id), carrying its role",
    ),
    Key("hanamenode.rpc.tls.key-file.<id>", parse_path, None, "the same daemon's private key"),
    Key(
        "hanamenode.rpc.handler.count", _count(1, MAX_HANDLERS), "16", "gRPC server worker threads"
    ),
    Key(
        "hanamenode.rpc.handshake-timeout.ms",
        _duration("ms"),
        "5000",
        "a server closes a connection whose TLS/HTTP/2 handshake is not done by then",
    ),
    Key(
        "hanamenode.rpc.max-connection-idle.ms",
        _duration("ms"),
        "60000",
        "a server closes a connection that carried no call for this long (GOAWAY)",
    ),
    Key(
        "hanamenode.ha.transition-history",
        _count(1, 1000),
        "20",
        "HA transitions a NameNode keeps for its status page and /status.json (the failover "
        "history, docs/operations.md §13.1)",
    ),
    Key(
        "hanamenode.gc.freeze-after-start",
        parse_bool,
        "true",
        "a daemon moves what it made at start to the garbage collector's permanent generation "
        "(gc.freeze), so that full collections under load pause it for less",
    ),
    Key(
        "hanamenode.rpc.max-message.mb",
        _message_mebibytes,
        "16",
        "largest journal batch a JournalNode accepts, and largest answer of any daemon",
    ),
    # Client (hafs and the failover proxy). HDFS defaults are 15 attempts, 500 ms and 15 s;
    # the sleeps here are shorter, so that a manual failover on a dev cluster is not waited
    # out for seconds.
    Key(
        "dfs.client.failover.max.attempts",
        _count(1, 1_000_000),
        "15",
        "attempts of one call over all NameNodes before the client gives up",
    ),
    Key(
        "dfs.client.failover.sleep.base.millis",
        _duration("ms", positive=False),
        "50",
        "first sleep between failovers, doubled each time",
    ),
    Key(
        "dfs.client.failover.sleep.max.millis",
        _duration("ms", positive=False),
        "1000",
        "longest sleep between failovers (before jitter)",
    ),
    Key("dfs.client.rpc-timeout.ms", _duration("ms"), "20000", "deadline of one client RPC"),
    Key(
        "dfs.client.sessions.enabled",
        parse_bool,
        "true",
        "the client pipelines its calls on one Session stream per NameNode; false: unary calls",
    ),
    Key(
        "dfs.client.failover.proxy.provider.<ns>",
        parse_proxy_provider,
        None,
        "ConfiguredFailoverProxyProvider (every call to the active) or "
        "ObserverReadProxyProvider (reads to observers); default: the latter when a "
        "NameNode is configured as an observer, or the client resolves from ZooKeeper",
    ),
    Key(
        "dfs.client.failover.zookeeper.quorum",
        parse_zk_quorum,
        "",
        "the client finds the active NameNode and the observers in the election znodes of "
        "this ZooKeeper (host:port,...[/chroot]) instead of dfs.ha.namenodes.<ns>",
    ),
    Key(
        "dfs.client.failover.zookeeper.auth",
        parse_zk_auth,
        "",
        "the client's read-only ZooKeeper credentials, digest:user:password (never "
        "ha.zookeeper.auth)",
    ),
)

KEYS_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS if not k.is_pattern}
"""The keys without placeholders, by name."""
_PATTERNS = tuple(k for k in KEYS if k.is_pattern)


def find_key(name: str) -> tuple[Key, dict[str, str]] | None:
    """The key ``name`` is, with its placeholder values (``{"id": "jn1"}``), or None."""
    if name in KEYS_BY_NAME:
        return KEYS_BY_NAME[name], {}
    for key in _PATTERNS:
        values = key.match(name)
        if values is not None:
            return key, values
    return None


def suggest_key(name: str) -> str | None:
    """The closest known key, per-id keys instantiated with the unknown name's last parts."""
    parts = name.split(".")
    candidates = list(KEYS_BY_NAME)
    for key in _PATTERNS:
        holders = key.placeholders
        if len(parts) > len(holders):
            tail = parts[len(parts) - len(holders) :]
            candidates.append(key.instantiate(**dict(zip(holders, tail, strict=True))))
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else None
