"""Typed, frozen settings read once from a Hadoop-style XML file (docs/operations.md §2).

Loading a file checks every property against the key table (``conf.keys.KEYS``),
substitutes ``${other.key}`` references, parses every value, and fails on the first problem
with a one-line ``ConfigError`` naming the file and the key::

    s = load_settings("ha-site.xml")          # or None: $HANAMENODE_CONF
    jn = s.journalnode("jn1")                 # JournalNodeSettings(rpc_address=..., ...)
    timeout = s.qjm.write_txns_timeout        # float seconds

Nothing else in the project reads XML or the environment for configuration.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from conf.keys import KEYS_BY_NAME, MIB, Key, QJournalUri, ZKJournalUri, find_key, suggest_key
from conf.xmlconf import ConfigError, ConfigValue, Property, read_xml, to_config_string

__all__ = [
    "CONF_ENV",
    "ClientSettings",
    "HASettings",
    "JournalNodeSettings",
    "NameNodeSettings",
    "QJMSettings",
    "RPCSettings",
    "Settings",
    "TLSSettings",
    "ZKSettings",
    "load_settings",
]

CONF_ENV = "HANAMENODE_CONF"
"""Environment variable naming the configuration file when no ``--conf`` is given."""

_SUBST_RE = re.compile(r"\$\{([^${}]*)\}")

# ---------------------------------------------------------------------------------------------
# The typed settings.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalNodeSettings:
    id: str
    rpc_address: str = "0.0.0.0:8485"
    http_address: str = "0.0.0.0:8480"
    edits_dir: Path = Path("/tmp/hanamenode/journal")
    edit_cache_bytes: int = 1 << 20
    subscriber_queue_bytes: int = 4 << 20
    max_subscribers: int = 64
    max_journals: int = 100
    sync_enabled: bool = True
    sync_interval: float = 120.0
    sync_format: bool = False
    edits_address: str | None = ""
    """The edits wire's address ("": the rpc host, any port; None: no edits wire)."""


@dataclass(frozen=True, slots=True)
class NameNodeSettings:
    id: str
    rpc_address: str = "0.0.0.0:8020"
    http_address: str = "0.0.0.0:9870"
    name_dir: Path = Path("/tmp/hanamenode/name")
    observer: bool = False
    """Starts as an observer (``dfs.namenode.observer.<ns>.<id>``)."""


@dataclass(frozen=True, slots=True)
class QJMSettings:
    """Quorum Journal Manager timeouts (float seconds) and the per-JN queue limit."""

    start_segment_timeout: float = 20.0
    prepare_recovery_timeout: float = 120.0
    accept_recovery_timeout: float = 120.0
    finalize_segment_timeout: float = 120.0
    select_input_streams_timeout: float = 20.0
    get_journal_state_timeout: float = 120.0
    new_epoch_timeout: float = 120.0
    write_txns_timeout: float = 20.0
    format_timeout: float = 60.0
    heartbeat_interval: float = 1.0
    queued_edits_limit_bytes: int = 10 * MIB


@dataclass(frozen=True, slots=True)
class ZKJournalSettings:
    """The ZooKeeper journal's limits (``dfs.namenode.zookeeper-journal.*``)."""

    max_znode_bytes: int = 512 * 1024
    window_bytes: int = 64 * MIB
    window_seconds: float = 300.0
    publish_period: float = 2.0


@dataclass(frozen=True, slots=True)
class ZKSettings:
    """ZooKeeper connection for the elector; ``quorum`` is kazoo's ``hosts`` string."""

    quorum: str = ""
    session_timeout: float = 10.0
    parent_znode: str = "/hanamenode"
    auth: tuple[tuple[str, str], ...] = ()
    acl: str = "world:anyone:rwcda"


@dataclass(frozen=True, slots=True)
class HASettings:
    automatic_failover_enabled: bool = False
    fencing_methods: tuple[str, ...] = ("shell(/bin/true)",)
    tail_edits_period: float = 1.0
    tail_edits_in_progress: bool = False
    tail_edits_push: bool = True
    tail_edits_max_txns: int = 5000
    log_roll_period: float = 120.0
    log_roll_by_observers: bool = False
    checkpoint_txns: int = 1_000_000
    autoroll_multiplier: float = 0.5
    autoroll_check_interval: float = 300.0
    checkpoint_period: float = 3600.0
    checkpoints_retained: int = 2
    edits_sync_max_batch_bytes: int = 1 * MIB
    edits_sync_gather_delay: float = 0.016
    edits_sync_in_flight: int = 1
    graceful_fence_timeout: float = 5.0
    health_check_interval: float = 1.0
    health_rpc_timeout: float = 20.0
    """Deadline of the health check's call on a fresh connection (0: none is made)."""
    new_active_timeout: float = 60.0
    cli_check_timeout: float = 20.0
    observer_read_max_wait: float = 1.0
    multi_max_ops: int = 1000
    ls_limit: int = 1000
    session_max_unanswered: int = 1024
    transition_history: int = 20
    """HA transitions kept for the status page (``hanamenode.ha.transition-history``)."""


@dataclass(frozen=True, slots=True)
class TLSSettings:
    """Mutual TLS for gRPC: one CA trusted by every process, and this process's key pair."""

    enabled: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if self.enabled:
            for name in ("ca_file", "cert_file", "key_file"):
                if getattr(self, name) is None:
                    raise ConfigError(f"TLS is enabled but {name} is not set")


@dataclass(frozen=True, slots=True)
class RPCSettings:
    handler_count: int = 16
    max_message_bytes: int = 16 * MIB
    handshake_timeout: float = 5.0
    """Seconds a server waits for a new connection's handshake (conf.rpc.server_options)."""
    max_connection_idle: float = 60.0
    """Seconds a server keeps a connection without calls before it sends GOAWAY."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """The failover proxy's retry policy and RPC deadline (float seconds)."""

    failover_max_attempts: int = 15
    failover_sleep_base: float = 0.05
    failover_sleep_max: float = 1.0
    rpc_timeout: float = 20.0
    observer_reads: bool = False
    """Reads go to observers first (``ObserverReadProxyProvider``), writes to the active."""
    sessions: bool = True
    """Calls travel pipelined on one Session stream per NameNode (docs/protocol.md §13);
    False: one unary call each."""
    zookeeper_quorum: str = ""
    """``dfs.client.failover.zookeeper.quorum``: find the NameNodes in the election znodes of
    this ZooKeeper instead of the configured list (docs/operations.md §3.5); "" is off."""
    zookeeper_auth: tuple[tuple[str, str], ...] = ()
    """``dfs.client.failover.zookeeper.auth``: the client's own (read-only) credentials."""


@dataclass(frozen=True)
class Settings:
    """Everything a process needs, read once. Build with ``load_settings`` or ``from_mapping``."""

    source: Path
    raw: Mapping[str, str] = field(repr=False)
    """The properties of the file, ``${...}`` substituted, as text."""
    nameservice: str
    journal_uri: QJournalUri | None
    journalnode_ids: tuple[str, ...]
    namenode_ids: tuple[str, ...]
    qjm: QJMSettings
    zk: ZKSettings
    ha: HASettings
    tls: TLSSettings
    rpc: RPCSettings
    values: Mapping[str, Any] = field(repr=False, compare=False)
    """Every key set in the file, parsed (per-id keys included); prefer the typed fields."""
    client: ClientSettings = field(default_factory=ClientSettings)
    gc_freeze_after_start: bool = True
    """``hanamenode.gc.freeze-after-start`` (``conf.gcpauses``)."""
    zk_journal_uri: ZKJournalUri | None = None
    """``dfs.namenode.shared.edits.dir`` when it is ``zookeeper://``: the ZooKeeper journal
    (``journal_uri``, the QJM's, is then None; docs/architecture.md §9)."""
    zk_journal: ZKJournalSettings = field(default_factory=lambda: ZKJournalSettings())

    @property
    def shared_edits_uri(self) -> QJournalUri | ZKJournalUri | None:
        """The shared edit log, whichever the backend."""
        return self.journal_uri if self.journal_uri is not None else self.zk_journal_uri

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, ConfigValue], source: str | os.PathLike[str] = "<memory>"
    ) -> Settings:
        """Settings from a dict of key -> value (values are stringified: ``True`` -> "true")."""
        props = [Property(k, to_config_string(v).strip()) for k, v in mapping.items()]
        return _build(props, os.fspath(source), Path(source))

    def _error(self, message: str, key: str | None = None) -> ConfigError:
        return ConfigError(message, source=str(self.source), key=key)

    def _lookup(self, *names: str) -> Any:
        """The parsed value of the first of ``names`` that is set, else the last one's default."""
        for name in names:
            if name in self.values:
                return self.values[name]
        found = find_key(names[-1])
        assert found is not None and found[0].default is not None, names
        return found[0].parse(found[0].default)

    def journalnode(self, jn_id: str) -> JournalNodeSettings:
        """One JournalNode's addresses and directory (per-id keys, then the generic ones)."""
        if self.journalnode_ids and jn_id not in self.journalnode_ids:
            listed = ", ".join(self.journalnode_ids)
            raise self._error(
                f"unknown JournalNode id {jn_id!r} (dfs.journalnode.ids: {listed})",
                "dfs.journalnode.ids",
            )
        base = ("dfs.journalnode.rpc-address", "dfs.journalnode.http-address")
        return JournalNodeSettings(
            id=jn_id,
            rpc_address=self._lookup(f"{base[0]}.{jn_id}", base[0]),
            http_address=self._lookup(f"{base[1]}.{jn_id}", base[1]),
            edits_address=self._lookup(
                f"dfs.journalnode.edits-address.{jn_id}", "dfs.journalnode.edits-address"
            ),
            edits_dir=self._lookup(
                f"dfs.journalnode.edits.dir.{jn_id}", "dfs.journalnode.edits.dir"
            ),
            edit_cache_bytes=self._lookup("dfs.journalnode.edit-cache-size.bytes"),
            max_journals=self._lookup("dfs.journalnode.max-journals"),
            subscriber_queue_bytes=self._lookup("dfs.journalnode.edit-subscription.queue.bytes"),
            max_subscribers=self._lookup("dfs.journalnode.edit-subscription.max"),
            sync_enabled=self._lookup("dfs.journalnode.enable.sync"),
            sync_interval=self._lookup("dfs.journalnode.sync.interval"),
            sync_format=self._lookup("dfs.journalnode.enable.sync.format"),
        )

    def journalnode_names(self) -> dict[str, str]:
        """The configured id (``jn1``) of each JournalNode address of the shared edits URI,
        by address: the id whose ``dfs.journalnode.rpc-address.<id>`` is that address, or
        has its port on a wildcard host (``0.0.0.0:8485``) when no other id has that port.
        An address no id names is left out (pages and metrics then show the address)."""
        if self.journal_uri is None or not self.journalnode_ids:
            return {}
        configured = {jn: self.journalnode(jn).rpc_address for jn in self.journalnode_ids}
        names: dict[str, str] = {}
        for address in self.journal_uri.addresses:
            port = address.rsplit(":", 1)[-1]
            exact = [jn for jn, a in configured.items() if a == address]
            by_port = [jn for jn, a in configured.items() if a.rsplit(":", 1)[-1] == port]
            wildcard = len(by_port) == 1 and configured[by_port[0]].rsplit(":", 1)[0] in (
                "0.0.0.0", "[::]", "::", ""
            )
            if len(exact) == 1 or wildcard:
                names[address] = (exact or by_port)[0]
        return names

    @property
    def plaintext_requested(self) -> bool:
        """Whether the file asks for plaintext RPC (``hanamenode.rpc.tls.enabled`` false)."""
        return self.values.get("hanamenode.rpc.tls.enabled") is False

    def for_daemon(self, daemon_id: str) -> Settings:
        """These settings as daemon ``daemon_id`` (``nn1``, ``jn2``) uses them: its own
        certificate and key (``hanamenode.rpc.tls.cert-file.<id>``, ``key-file.<id>``,
        carrying its role) instead of the generic ones, which operators' tools use; for a
        NameNode, its own shared edits URI when ``dfs.namenode.shared.edits.dir.<ns>.<id>``
        is set."""
        own_uri = self.values.get(f"dfs.namenode.shared.edits.dir.{self.nameservice}.{daemon_id}")
        if isinstance(own_uri, ZKJournalUri):
            own = dataclasses.replace(self, journal_uri=None, zk_journal_uri=own_uri)
            return own._with_own_certificate(daemon_id)
        if own_uri is not None:
            return dataclasses.replace(self, journal_uri=own_uri)._with_own_certificate(daemon_id)
        return self._with_own_certificate(daemon_id)

    def _with_own_certificate(self, daemon_id: str) -> Settings:
        """``for_daemon``'s certificate part."""
        cert = self.values.get(f"hanamenode.rpc.tls.cert-file.{daemon_id}")
        key = self.values.get(f"hanamenode.rpc.tls.key-file.{daemon_id}")
        if not self.tls.enabled or (cert is None and key is None):
            return self
        for name, path in (("cert-file", cert), ("key-file", key)):
            full = f"hanamenode.rpc.tls.{name}.{daemon_id}"
            if path is None:
                raise self._error("required with its cert-file/key-file pair", full)
            if not path.is_file():
                raise self._error(f"no such file {str(path)!r}", full)
        tls = TLSSettings(True, self.tls.ca_file, cert, key)
        return dataclasses.replace(self, tls=tls)

    def namenode(self, nn_id: str) -> NameNodeSettings:
        """One NameNode of the nameservice: its RPC and HTTP addresses and its name dir."""
        ids_key = f"dfs.ha.namenodes.{self.nameservice}"
        if nn_id not in self.namenode_ids:
            listed = ", ".join(self.namenode_ids) or "not set"
            raise self._error(f"unknown NameNode id {nn_id!r} ({ids_key}: {listed})", ids_key)
        suffix = f"{self.nameservice}.{nn_id}"
        return NameNodeSettings(
            id=nn_id,
            rpc_address=self._lookup(f"dfs.namenode.rpc-address.{suffix}"),
            http_address=self._lookup(f"dfs.namenode.http-address.{suffix}"),
            name_dir=self._lookup(f"dfs.namenode.name.dir.{suffix}", "dfs.namenode.name.dir"),
            observer=self._lookup(f"dfs.namenode.observer.{suffix}"),
        )


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read ``path`` (or the file named by ``$HANAMENODE_CONF``) into ``Settings``."""
    if path is None:
        path = os.environ.get(CONF_ENV) or None
        if path is None:
            raise ConfigError(f"no configuration: pass --conf or set {CONF_ENV}")
    source = os.fspath(path)
    return _build(read_xml(source), source, Path(source).absolute())


# ---------------------------------------------------------------------------------------------
# Building: match keys, substitute, parse, cross-check.
# ---------------------------------------------------------------------------------------------


def _substitute(props: Iterable[Property], source: str) -> dict[str, str]:
    """Resolve ``${key}`` in every value from the other properties (or a fixed key's default)."""
    given = {p.name: p.value for p in props}
    resolved: dict[str, str] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> str:
        if name in resolved:
            return resolved[name]
        if name in chain:
            cycle = " -> ".join((*chain[chain.index(name) :], name))
            raise ConfigError(f"substitution cycle: {cycle}", source=source, key=chain[0])

        def replace(ref: re.Match[str]) -> str:
            other = ref.group(1).strip()
            if other in given:
                return resolve(other, (*chain, name))
            key = KEYS_BY_NAME.get(other)
            if key is not None and key.default is not None:
                return key.default
            raise ConfigError(
                f"${{{other}}} is not defined", source=source, key=chain[0] if chain else name
            )

        value = _SUBST_RE.sub(replace, given[name])
        if "${" in value:
            raise ConfigError(
                f"unterminated or empty ${{...}} in {value!r}", source=source, key=name
            )
        resolved[name] = value
        return value

    return {name: resolve(name, ()) for name in given}


def _build(props: list[Property], source: str, source_path: Path) -> Settings:
    matched: list[tuple[Property, Key, dict[str, str]]] = []
    for prop in props:
        found = find_key(prop.name)
        if found is None:
            suggestion = suggest_key(prop.name)
            hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
            raise ConfigError(f"unknown key{hint}", source=source, key=prop.name)
        matched.append((prop, *found))
    raw = _substitute(props, source)

    def parse(key: Key, name: str, text: str) -> Any:
        try:
            return key.parse(text)
        except ValueError as err:
            message = err.message if isinstance(err, ConfigError) else str(err)
            raise ConfigError(message, source=source, key=name) from None

    values: dict[str, Any] = {}
    for prop, key, _ in matched:
        values[prop.name] = parse(key, prop.name, raw[prop.name])

    def get(name: str) -> Any:
        if name in values:
            return values[name]
        key = KEYS_BY_NAME[name]
        return None if key.default is None else parse(key, name, key.default)

    nameservice: str = get("dfs.nameservices")
    ids_key = f"dfs.ha.namenodes.{nameservice}"
    namenode_ids: tuple[str, ...] = values.get(ids_key, ())
    journalnode_ids: tuple[str, ...] = get("dfs.journalnode.ids")

    for prop, key, holders in matched:
        ns, ident = holders.get("ns"), holders.get("id")
        if ns is not None and ns != nameservice:
            raise ConfigError(
                f"nameservice {ns!r} is not dfs.nameservices ({nameservice!r})",
                source=source,
                key=prop.name,
            )
        if ident is None:
            continue
        if key.name.startswith("dfs.namenode.") and ident not in namenode_ids:
            listed = ", ".join(namenode_ids) or "not set"
            raise ConfigError(
                f"NameNode id {ident!r} is not in {ids_key} ({listed})",
                source=source,
                key=prop.name,
            )
        if key.name.startswith("hanamenode.rpc.tls.") and ident not in (
            *namenode_ids,
            *journalnode_ids,
        ):
            raise ConfigError(
                f"{ident!r} is neither a NameNode id ({ids_key}) nor a JournalNode id "
                "(dfs.journalnode.ids)",
                source=source,
                key=prop.name,
            )
        is_jn_key = key.name.startswith("dfs.journalnode.")
        if is_jn_key and journalnode_ids and ident not in journalnode_ids:
            raise ConfigError(
                f"JournalNode id {ident!r} is not in dfs.journalnode.ids "
                f"({', '.join(journalnode_ids)})",
                source=source,
                key=prop.name,
            )

    qjm = QJMSettings(
        start_segment_timeout=get("dfs.qjournal.start-segment.timeout.ms"),
        prepare_recovery_timeout=get("dfs.qjournal.prepare-recovery.timeout.ms"),
        accept_recovery_timeout=get("dfs.qjournal.accept-recovery.timeout.ms"),
        finalize_segment_timeout=get("dfs.qjournal.finalize-segment.timeout.ms"),
        select_input_streams_timeout=get("dfs.qjournal.select-input-streams.timeout.ms"),
        get_journal_state_timeout=get("dfs.qjournal.get-journal-state.timeout.ms"),
        new_epoch_timeout=get("dfs.qjournal.new-epoch.timeout.ms"),
        write_txns_timeout=get("dfs.qjournal.write-txns.timeout.ms"),
        format_timeout=get("dfs.qjournal.format.timeout.ms"),
        heartbeat_interval=get("dfs.qjournal.heartbeat.interval.ms"),
        queued_edits_limit_bytes=get("dfs.qjournal.queued-edits.limit.mb"),
    )
    zk = ZKSettings(
        quorum=get("ha.zookeeper.quorum"),
        session_timeout=get("ha.zookeeper.session-timeout.ms"),
        parent_znode=get("ha.zookeeper.parent-znode"),
        auth=get("ha.zookeeper.auth"),
        acl=get("ha.zookeeper.acl"),
    )
    ha = HASettings(
        automatic_failover_enabled=get("dfs.ha.automatic-failover.enabled"),
        fencing_methods=get("dfs.ha.fencing.methods"),
        tail_edits_period=get("dfs.ha.tail-edits.period"),
        tail_edits_in_progress=get("dfs.ha.tail-edits.in-progress"),
        tail_edits_push=get("dfs.ha.tail-edits.push"),
        tail_edits_max_txns=get("dfs.ha.tail-edits.qjm.rpc.max-txns"),
        log_roll_period=get("dfs.ha.log-roll.period"),
        log_roll_by_observers=get("dfs.ha.log-roll.observers"),
        checkpoint_txns=get("dfs.namenode.checkpoint.txns"),
        autoroll_multiplier=get("dfs.namenode.edit.log.autoroll.multiplier.threshold"),
        autoroll_check_interval=get("dfs.namenode.edit.log.autoroll.check.interval.ms"),
        checkpoint_period=get("dfs.namenode.checkpoint.period"),
        checkpoints_retained=get("dfs.namenode.num.checkpoints.retained"),
        edits_sync_max_batch_bytes=get("dfs.namenode.edits.sync.max-batch.bytes"),
        edits_sync_gather_delay=get("dfs.namenode.edits.sync.gather-delay"),
        edits_sync_in_flight=get("dfs.namenode.edits.sync.in-flight"),
        graceful_fence_timeout=get("ha.failover-controller.graceful-fence.rpc-timeout.ms"),
        health_check_interval=get("ha.health-monitor.check-interval.ms"),
        health_rpc_timeout=get("ha.health-monitor.rpc-timeout.ms"),
        new_active_timeout=get("ha.failover-controller.new-active.rpc-timeout.ms"),
        cli_check_timeout=get("ha.failover-controller.cli-check.rpc-timeout.ms"),
        observer_read_max_wait=get("dfs.namenode.observer.read.max-wait.ms"),
        multi_max_ops=get("dfs.namenode.multi.max-ops"),
        ls_limit=get("dfs.ls.limit"),
        session_max_unanswered=get("dfs.namenode.session.max-unanswered-calls"),
        transition_history=get("hanamenode.ha.transition-history"),
    )
    max_message_bytes: int = get("hanamenode.rpc.max-message.mb")
    if qjm.queued_edits_limit_bytes >= max_message_bytes:
        # A writer sends batches up to its queue limit; a JournalNode must accept them.
        raise ConfigError(
            f"{qjm.queued_edits_limit_bytes // MIB} MiB is not below "
            f"hanamenode.rpc.max-message.mb ({max_message_bytes // MIB} MiB): the JournalNodes "
            "would refuse the largest batches",
            source=source,
            key="dfs.qjournal.queued-edits.limit.mb",
        )
    if ha.edits_sync_max_batch_bytes >= max_message_bytes:
        # One batch is one journal call; a JournalNode refuses a call above its message limit.
        raise ConfigError(
            f"{ha.edits_sync_max_batch_bytes} bytes is not below hanamenode.rpc.max-message.mb "
            f"({max_message_bytes // MIB} MiB): the JournalNodes would refuse the largest batches",
            source=source,
            key="dfs.namenode.edits.sync.max-batch.bytes",
        )
    generic_uri = get("dfs.namenode.shared.edits.dir")
    for nn_id in namenode_ids:
        own = f"dfs.namenode.shared.edits.dir.{nameservice}.{nn_id}"
        own_uri = values.get(own)
        if own_uri is not None and (
            generic_uri is None or own_uri.journal_id != generic_uri.journal_id
        ):
            # Another journal id would be another edit log: two NameNodes writing apart.
            shown = generic_uri.journal_id if generic_uri is not None else "not set"
            raise ConfigError(
                f"journal id {own_uri.journal_id!r} is not that of dfs.namenode.shared.edits.dir "
                f"({shown}): a NameNode may reach the JournalNodes by other addresses, never "
                "another journal",
                source=source,
                key=own,
            )
    if ha.automatic_failover_enabled and not zk.quorum:
        raise ConfigError(
            "required when dfs.ha.automatic-failover.enabled is true",
            source=source,
            key="ha.zookeeper.quorum",
        )
    return Settings(
        source=source_path,
        raw=MappingProxyType(raw),
        nameservice=nameservice,
        journal_uri=generic_uri if isinstance(generic_uri, QJournalUri) else None,
        zk_journal_uri=generic_uri if isinstance(generic_uri, ZKJournalUri) else None,
        zk_journal=ZKJournalSettings(
            max_znode_bytes=get("dfs.namenode.zookeeper-journal.max-znode-bytes"),
            window_bytes=get("dfs.namenode.zookeeper-journal.window.bytes"),
            window_seconds=get("dfs.namenode.zookeeper-journal.window.seconds"),
            publish_period=get("dfs.namenode.zookeeper-journal.publish.period"),
        ),
        journalnode_ids=journalnode_ids,
        namenode_ids=namenode_ids,
        qjm=qjm,
        zk=zk,
        ha=ha,
        tls=_tls(get, source),
        rpc=RPCSettings(
            handler_count=get("hanamenode.rpc.handler.count"),
            max_message_bytes=max_message_bytes,
            handshake_timeout=get("hanamenode.rpc.handshake-timeout.ms"),
            max_connection_idle=get("hanamenode.rpc.max-connection-idle.ms"),
        ),
        values=MappingProxyType(values),
        client=ClientSettings(
            failover_max_attempts=get("dfs.client.failover.max.attempts"),
            failover_sleep_base=get("dfs.client.failover.sleep.base.millis"),
            failover_sleep_max=get("dfs.client.failover.sleep.max.millis"),
            rpc_timeout=get("dfs.client.rpc-timeout.ms"),
            observer_reads=_observer_reads(values, nameservice, namenode_ids),
            sessions=get("dfs.client.sessions.enabled"),
            zookeeper_quorum=get("dfs.client.failover.zookeeper.quorum"),
            zookeeper_auth=get("dfs.client.failover.zookeeper.auth"),
        ),
        gc_freeze_after_start=get("hanamenode.gc.freeze-after-start"),
    )


def _observer_reads(
    values: Mapping[str, Any], nameservice: str, namenode_ids: tuple[str, ...]
) -> bool:
    """Whether the client sends reads to observers: the proxy provider named, else whether a
    NameNode is configured as an observer or the client finds them in ZooKeeper."""
    provider = values.get(f"dfs.client.failover.proxy.provider.{nameservice}")
    if provider is not None:
        return bool(provider == "ObserverReadProxyProvider")
    if values.get("dfs.client.failover.zookeeper.quorum"):
        return True
    return any(values.get(f"dfs.namenode.observer.{nameservice}.{nn}") for nn in namenode_ids)


def _tls(get: Callable[[str], Any], source: str) -> TLSSettings:
    prefix = "hanamenode.rpc.tls."
    files: dict[str, Path | None] = {
        name: get(f"{prefix}{name}") for name in ("ca-file", "cert-file", "key-file")
    }
    explicit: bool | None = get(f"{prefix}enabled")
    enabled = explicit if explicit is not None else files["ca-file"] is not None
    if not enabled:
        stray = [name for name, path in files.items() if path is not None]
        if stray and explicit is None:
            raise ConfigError(
                f"set, but TLS is off: set {prefix}ca-file too (or {prefix}enabled to false)",
                source=source,
                key=prefix + stray[0],
            )
        return TLSSettings()
    why = f"{prefix}enabled is true" if explicit else f"{prefix}ca-file is set"
    for name, path in files.items():
        if path is None:
            raise ConfigError(f"required when {why}", source=source, key=prefix + name)
        if not path.is_file():
            raise ConfigError(f"no such file {str(path)!r}", source=source, key=prefix + name)
    return TLSSettings(True, files["ca-file"], files["cert-file"], files["key-file"])
