"""conf: loading Hadoop-style XML into typed settings, and every way a file can be wrong."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import structlog
from click.testing import CliRunner

import conf.logging as conf_logging
from conf import (
    KEYS,
    ConfigError,
    HASettings,
    JournalNodeSettings,
    NameNodeSettings,
    QJMSettings,
    QJournalUri,
    RPCSettings,
    Settings,
    TLSSettings,
    ZKSettings,
    load_settings,
    parse_duration,
    parse_qjournal_uri,
    write_xml,
)
from conf.logging import LOG_FORMAT_OPTION, setup_logging
from conf.xmlconf import ConfigValue

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "conf" / "examples" / "ha-site.xml"
MIB = 1024 * 1024


def write_conf(tmp_path: Path, mapping: dict[str, ConfigValue]) -> Path:
    return write_xml(mapping, tmp_path / "ha-site.xml")


def load_error(tmp_path: Path, mapping: dict[str, ConfigValue]) -> str:
    path = write_conf(tmp_path, mapping)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- the example file ------------------------------------------------------------------------


def test_example_file_loads_with_typed_values() -> None:
    s = load_settings(EXAMPLE)
    assert s.source == EXAMPLE
    assert s.nameservice == "mycluster"
    assert s.journal_uri == QJournalUri(
        ("jn1.example.com:8485", "jn2.example.com:8485", "jn3.example.com:8485"), "mycluster"
    )
    assert s.journalnode_ids == ("jn1", "jn2", "jn3")
    assert s.namenode_ids == ("nn1", "nn2")
    assert s.journalnode("jn2") == JournalNodeSettings(
        id="jn2",
        rpc_address="jn2.example.com:8485",
        http_address="0.0.0.0:8480",
        edits_dir=Path("/var/lib/hanamenode/journal"),
        edits_address="0.0.0.0:8486",
    )
    assert s.namenode("nn1") == NameNodeSettings(
        id="nn1",
        rpc_address="nn1.example.com:8020",
        http_address="nn1.example.com:9870",
        name_dir=Path("/var/lib/hanamenode/name"),
    )
    assert s.qjm.write_txns_timeout == 20.0
    assert s.qjm.start_segment_timeout == 20.0  # "20s"
    assert s.qjm.new_epoch_timeout == 120.0  # "2m"
    assert s.qjm.queued_edits_limit_bytes == 10 * MIB
    assert s.zk.quorum == "zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181"
    assert s.zk.session_timeout == 10.0
    assert s.zk.parent_znode == "/hanamenode"
    assert s.ha.automatic_failover_enabled is True
    assert s.ha.fencing_methods == ("shell(/bin/true)",)
    assert s.ha.graceful_fence_timeout == 5.0
    assert s.ha.tail_edits_period == 1.0
    assert s.ha.log_roll_period == 120.0
    assert s.ha.checkpoint_period == 3600.0
    assert s.tls == TLSSettings(enabled=False)
    assert s.raw["dfs.qjournal.new-epoch.timeout.ms"] == "2m"


def test_empty_configuration_gives_the_documented_defaults() -> None:
    s = Settings.from_mapping({})
    assert s.source == Path("<memory>")
    assert s.nameservice == "hanamenode"
    assert s.journal_uri is None
    assert s.journalnode_ids == () and s.namenode_ids == ()
    # The dataclass defaults (for code that builds settings by hand) equal the key table's.
    assert s.qjm == QJMSettings()
    assert s.zk == ZKSettings()
    assert s.ha == HASettings()
    assert s.tls == TLSSettings()
    assert s.rpc == RPCSettings(handler_count=16, max_message_bytes=16 * MIB)
    assert s.qjm.prepare_recovery_timeout == 120.0 and s.qjm.format_timeout == 60.0
    assert s.qjm.heartbeat_interval == 1.0
    assert s.journalnode("jn7") == JournalNodeSettings(
        "jn7", "0.0.0.0:8485", "0.0.0.0:8480", Path("/tmp/hanamenode/journal")
    )


def test_per_id_keys_fall_back_to_the_generic_ones() -> None:
    s = Settings.from_mapping(
        {
            "dfs.nameservices": "ns1",
            "dfs.ha.namenodes.ns1": "a, b",
            "dfs.namenode.rpc-address.ns1.a": "127.0.0.1:0",
            "dfs.namenode.name.dir": "/data/name",
            "dfs.namenode.name.dir.ns1.b": "file:///data/name-b",
            "dfs.journalnode.rpc-address": "127.0.0.1:9000",
            "dfs.journalnode.rpc-address.jn2": "[::1]:9002",
            "dfs.journalnode.edits.dir.jn2": "/data/jn2",
        }
    )
    assert s.namenode_ids == ("a", "b")
    assert s.namenode("a") == NameNodeSettings(
        "a", "127.0.0.1:0", "0.0.0.0:9870", Path("/data/name")
    )
    assert s.namenode("b").name_dir == Path("/data/name-b")
    assert s.namenode("b").rpc_address == "0.0.0.0:8020"
    assert s.journalnode("jn1").rpc_address == "127.0.0.1:9000"
    assert s.journalnode("jn2").rpc_address == "[::1]:9002"
    assert s.journalnode("jn2").edits_dir == Path("/data/jn2")
    with pytest.raises(
        ConfigError, match=r"unknown NameNode id 'c' \(dfs.ha.namenodes.ns1: a, b\)"
    ):
        s.namenode("c")


def test_a_namenode_may_reach_the_journalnodes_by_its_own_addresses(tmp_path: Path) -> None:
    base: dict[str, ConfigValue] = {
        "dfs.nameservices": "ns1",
        "dfs.ha.namenodes.ns1": "a,b",
        "dfs.namenode.shared.edits.dir": "qjournal://h1:8485;h2:8485;h3:8485/ns1",
    }
    s = Settings.from_mapping(
        {**base, "dfs.namenode.shared.edits.dir.ns1.a": "qjournal://p1:1;p2:2;p3:3/ns1"}
    )
    assert s.journal_uri is not None and s.journal_uri.addresses[0] == "h1:8485"
    own = s.for_daemon("a").journal_uri
    assert own is not None and own.addresses == ("p1:1", "p2:2", "p3:3")
    assert s.for_daemon("b").journal_uri == s.journal_uri
    message = load_error(
        tmp_path, {**base, "dfs.namenode.shared.edits.dir.ns1.b": "qjournal://p1:1;p2:2;p3:3/x"}
    )
    assert "dfs.namenode.shared.edits.dir.ns1.b: journal id 'x' is not that of" in message
    assert "never another journal" in message


def test_unknown_journalnode_id_when_ids_are_listed() -> None:
    s = Settings.from_mapping({"dfs.journalnode.ids": "jn1,jn2,jn3"}, source="site.xml")
    assert s.journalnode("jn3").id == "jn3"
    with pytest.raises(ConfigError) as info:
        s.journalnode("jn4")
    assert str(info.value) == (
        "site.xml: dfs.journalnode.ids: unknown JournalNode id 'jn4' "
        "(dfs.journalnode.ids: jn1, jn2, jn3)"
    )


# --- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "unit", "seconds"),
    [
        ("20000", "ms", 20.0),
        ("20s", "ms", 20.0),
        ("20 S", "ms", 20.0),
        ("1500us", "ms", 0.0015),
        ("5000000ns", "ms", 0.005),
        ("2m", "ms", 120.0),
        ("1h", "ms", 3600.0),
        ("1d", "ms", 86400.0),
        ("0.5s", "ms", 0.5),
        ("3", "s", 3.0),
        ("250ms", "s", 0.25),
    ],
)
def test_durations(text: str, unit: str, seconds: float) -> None:
    assert parse_duration(text, unit) == pytest.approx(seconds)


def test_duration_keys_use_their_default_unit() -> None:
    s = Settings.from_mapping(
        {
            "dfs.qjournal.write-txns.timeout.ms": "1500",
            "dfs.qjournal.heartbeat.interval.ms": "2s",
            "dfs.ha.tail-edits.period": "0",  # tail as fast as possible
            "dfs.ha.log-roll.period": "30",
            "dfs.namenode.checkpoint.period": "10m",
            "ha.zookeeper.session-timeout.ms": "4s",
        }
    )
    assert s.qjm.write_txns_timeout == 1.5
    assert s.qjm.heartbeat_interval == 2.0
    assert s.ha.tail_edits_period == 0.0
    assert s.ha.log_roll_period == 30.0
    assert s.ha.checkpoint_period == 600.0
    assert s.zk.session_timeout == 4.0


def test_other_typed_values() -> None:
    s = Settings.from_mapping(
        {
            "dfs.ha.automatic-failover.enabled": "TRUE",
            "ha.zookeeper.quorum": "127.0.0.1:2181, 127.0.0.1:2182",
            "ha.zookeeper.auth": "digest:hdfs:s3cret,digest:other:pw:with:colons",
            "ha.zookeeper.acl": "digest:hdfs:abc=:rwcda,world:anyone:r",
            "dfs.ha.fencing.methods": "shell(/usr/local/bin/fence.sh $target_host)\n"
            "  shell(/bin/true)\n",
            "dfs.namenode.checkpoint.txns": 500,
            "dfs.namenode.num.checkpoints.retained": "3",
            "hanamenode.rpc.handler.count": 4,
            "hanamenode.rpc.max-message.mb": 8,
            "dfs.qjournal.queued-edits.limit.mb": 1,
            "dfs.ha.tail-edits.in-progress": "true",
            "dfs.ha.tail-edits.qjm.rpc.max-txns": 100,
            "dfs.journalnode.edit-cache-size.bytes": 0,
            "dfs.namenode.edits.sync.gather-delay": "0",
        }
    )
    assert s.ha.tail_edits_in_progress is True and s.ha.tail_edits_max_txns == 100
    assert s.ha.edits_sync_gather_delay == 0.0
    assert Settings.from_mapping({}).ha.edits_sync_gather_delay == 0.016
    assert s.journalnode("jn1").edit_cache_bytes == 0
    assert s.ha.automatic_failover_enabled is True
    assert s.zk.quorum == "127.0.0.1:2181,127.0.0.1:2182"
    assert s.zk.auth == (("digest", "hdfs:s3cret"), ("digest", "other:pw:with:colons"))
    assert s.zk.acl == "digest:hdfs:abc=:rwcda,world:anyone:r"
    assert s.ha.fencing_methods == (
        "shell(/usr/local/bin/fence.sh $target_host)",
        "shell(/bin/true)",
    )
    assert s.ha.checkpoint_txns == 500 and s.ha.checkpoints_retained == 3
    assert s.rpc == RPCSettings(handler_count=4, max_message_bytes=8 * MIB)
    assert s.qjm.queued_edits_limit_bytes == MIB


def test_qjournal_uri() -> None:
    uri = parse_qjournal_uri("qjournal://h1:8485;h2:8485;[::1]:8485/my.journal-1")
    assert uri == QJournalUri(("h1:8485", "h2:8485", "[::1]:8485"), "my.journal-1")
    assert str(uri) == "qjournal://h1:8485;h2:8485;[::1]:8485/my.journal-1"
    for bad in (
        "hdfs://h1:8485/j",
        "qjournal://h1:8485",
        "qjournal://h1:8485/",
        "qjournal://h1:8485/a/b",
        "qjournal://h1;h2:8485/j",
        "qjournal://h1:0/j",
        "qjournal://h1:8485;h1:8485/j",
    ):
        with pytest.raises(ConfigError):
            parse_qjournal_uri(bad)


# Every kind of malformed value, each a one-line error naming the file and the key.
MALFORMED = [
    ("dfs.qjournal.write-txns.timeout.ms", "abc", "expected a duration, got 'abc'"),
    ("dfs.qjournal.write-txns.timeout.ms", "10 parsecs", "expected a duration"),
    ("dfs.qjournal.write-txns.timeout.ms", "-5", "expected a duration"),
    ("dfs.qjournal.new-epoch.timeout.ms", "0", "must be greater than zero"),
    ("dfs.ha.automatic-failover.enabled", "yes", "expected true or false, got 'yes'"),
    ("dfs.namenode.checkpoint.txns", "1x", "expected an integer, got '1x'"),
    ("dfs.namenode.checkpoint.txns", "1_000", "expected an integer, got '1_000'"),
    ("dfs.namenode.num.checkpoints.retained", "0", "must be at least 1"),
    ("hanamenode.rpc.handler.count", "", "expected an integer"),
    ("dfs.qjournal.queued-edits.limit.mb", "ten", "expected an integer"),
    ("dfs.journalnode.rpc-address", "jn1", "expected host:port, got 'jn1'"),
    ("dfs.journalnode.rpc-address", "jn1:99999", "port 99999 out of range 0..65535"),
    ("dfs.journalnode.rpc-address", "jn1:-1", "expected host:port"),
    ("dfs.journalnode.http-address", ":8480", "expected host:port"),
    ("dfs.journalnode.edits.dir", "relative/dir", "expected an absolute path"),
    ("dfs.namenode.shared.edits.dir", "hdfs://x:1/j", "expected qjournal://"),
    ("dfs.nameservices", "a,b", "federation is not supported"),
    ("dfs.journalnode.ids", "jn1,,jn2", "expected an id"),
    ("dfs.journalnode.ids", "jn1,jn1", "duplicate id 'jn1'"),
    ("dfs.ha.fencing.methods", " ", "expected at least one fencing method"),
    ("dfs.ha.fencing.methods", "(/bin/true)", "expected a fencing method"),
    ("ha.zookeeper.quorum", "zk1", "expected host:port"),
    ("ha.zookeeper.auth", "digest", "expected scheme:credential"),
    ("ha.zookeeper.acl", "world:anyone:xyz", "expected scheme:id:perms"),
    ("ha.zookeeper.parent-znode", "hanamenode", "expected an absolute znode path"),
    ("hanamenode.rpc.tls.enabled", "1", "expected true or false"),
    # Out of range: a config error, not an OverflowError where the value is used (issue 10).
    ("hanamenode.rpc.max-message.mb", "2048", "must be at most 2047, got '2048'"),
    ("hanamenode.rpc.max-message.mb", "99999999999999999999", "must be at most 2047"),
    ("hanamenode.rpc.handler.count", "1000000000", "must be at most 10000"),
    ("dfs.qjournal.write-txns.timeout.ms", "1e400", "expected a duration"),
    ("dfs.qjournal.write-txns.timeout.ms", "999999999999999999999", "must be at most 365 days"),
    ("dfs.namenode.checkpoint.txns", "9" * 30, "must be at most 9223372036854775807"),
    ("ha.zookeeper.session-timeout.ms", "366d", "must be at most 365 days"),
    ("dfs.ha.tail-edits.qjm.rpc.max-txns", "2000000", "must be at most 1048576"),
    ("dfs.namenode.edits.sync.gather-delay", "2s", "must be at most 1s"),
    ("dfs.namenode.edits.sync.gather-delay", "-5ms", "expected a duration"),
    ("dfs.namenode.edit.log.autoroll.multiplier.threshold", "-1", "at least 0, got '-1'"),
    ("dfs.namenode.edit.log.autoroll.multiplier.threshold", "nan", "a finite number"),
    ("dfs.namenode.edit.log.autoroll.multiplier.threshold", "inf", "a finite number"),
    ("dfs.namenode.edit.log.autoroll.multiplier.threshold", "half", "expected a number"),
    ("dfs.qjournal.queued-edits.limit.mb", "16", "is not below hanamenode.rpc.max-message.mb"),
]


@pytest.mark.parametrize(("key", "value", "problem"), MALFORMED)
def test_malformed_value_is_one_line_naming_file_and_key(
    tmp_path: Path, key: str, value: str, problem: str
) -> None:
    message = load_error(tmp_path, {key: value})
    assert message.startswith(f"{tmp_path / 'ha-site.xml'}: {key}: ")
    assert problem in message


def test_the_documented_message_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_conf(tmp_path, {"dfs.qjournal.write-txns.timeout.ms": "abc"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_settings("ha-site.xml")
    assert str(info.value) == (
        "ha-site.xml: dfs.qjournal.write-txns.timeout.ms: expected a duration, got 'abc'"
    )
    assert info.value.source == "ha-site.xml"
    assert info.value.key == "dfs.qjournal.write-txns.timeout.ms"
    assert isinstance(info.value, ValueError)


# --- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("dfs.qjournal.write-txn.timeout.ms", "dfs.qjournal.write-txns.timeout.ms"),
        ("dfs.ha.automatic-failover.enable", "dfs.ha.automatic-failover.enabled"),
        ("dfs.journalnode.rpc-adress.jn1", "dfs.journalnode.rpc-address.jn1"),
        ("dfs.namenode.rpc-adress.hanamenode.nn1", "dfs.namenode.rpc-address.hanamenode.nn1"),
        ("ha.zookeeper.session.timeout.ms", "ha.zookeeper.session-timeout.ms"),
    ],
)
def test_unknown_key_names_key_and_file_with_suggestion(
    tmp_path: Path, key: str, suggestion: str
) -> None:
    message = load_error(tmp_path, {key: "1"})
    assert message == (
        f"{tmp_path / 'ha-site.xml'}: {key}: unknown key (did you mean {suggestion!r}?)"
    )


def test_unknown_key_without_a_close_match(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"dfs.replication": "3"})
    assert message == f"{tmp_path / 'ha-site.xml'}: dfs.replication: unknown key"


def test_per_id_keys_must_name_configured_ids() -> None:
    base: dict[str, ConfigValue] = {
        "dfs.nameservices": "mycluster",
        "dfs.ha.namenodes.mycluster": "nn1,nn2",
        "dfs.journalnode.ids": "jn1,jn2,jn3",
    }
    cases = [
        (
            "dfs.namenode.rpc-address.mycluster.nn3",
            "h:1",
            "NameNode id 'nn3' is not in dfs.ha.namenodes.mycluster (nn1, nn2)",
        ),
        (
            "dfs.namenode.rpc-address.other.nn1",
            "h:1",
            "nameservice 'other' is not dfs.nameservices ('mycluster')",
        ),
        (
            "dfs.ha.namenodes.other",
            "nn1",
            "nameservice 'other' is not dfs.nameservices ('mycluster')",
        ),
        (
            "dfs.journalnode.rpc-address.jn4",
            "h:1",
            "JournalNode id 'jn4' is not in dfs.journalnode.ids (jn1, jn2, jn3)",
        ),
    ]
    for key, value, problem in cases:
        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({**base, key: value}, source="x.xml")
        assert str(info.value) == f"x.xml: {key}: {problem}"


def test_every_key_is_documented_in_operations_md() -> None:
    ops = (ROOT / "docs" / "operations.md").read_text()
    table = ops.split("\n### 2.2 ", 1)[1].split("\n### ", 1)[0]
    missing = [k.name for k in KEYS if f"| `{k.name}` |" not in table]
    assert not missing, f"docs/operations.md §2.2's table of keys lacks {missing}"


# --- substitution ----------------------------------------------------------------------------


def test_substitution_from_other_properties_and_defaults() -> None:
    s = Settings.from_mapping(
        {
            "dfs.nameservices": "mycluster",
            "dfs.namenode.name.dir": "/srv/${dfs.nameservices}",
            "dfs.journalnode.edits.dir": "${dfs.namenode.name.dir}/journal",
            "dfs.journalnode.edits.dir.jn1": "${dfs.journalnode.edits.dir}/jn1",
            "dfs.namenode.shared.edits.dir": "qjournal://${dfs.journalnode.rpc-address}"
            "/${dfs.nameservices}",
        }
    )
    assert s.raw["dfs.namenode.name.dir"] == "/srv/mycluster"
    assert s.journalnode("jn1").edits_dir == Path("/srv/mycluster/journal/jn1")
    assert s.journalnode("jn2").edits_dir == Path("/srv/mycluster/journal")
    # An unset key with a default substitutes its default.
    assert s.journal_uri == QJournalUri(("0.0.0.0:8485",), "mycluster")


def test_substitution_errors_name_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping({"dfs.namenode.name.dir": "/x/${nope}"}, source="s.xml")
    assert str(info.value) == "s.xml: dfs.namenode.name.dir: ${nope} is not defined"

    with pytest.raises(ConfigError) as info:
        Settings.from_mapping(
            {
                "dfs.namenode.name.dir": "${dfs.journalnode.edits.dir}",
                "dfs.journalnode.edits.dir": "${dfs.namenode.name.dir}",
            },
            source="s.xml",
        )
    assert str(info.value) == (
        "s.xml: dfs.namenode.name.dir: substitution cycle: dfs.namenode.name.dir -> "
        "dfs.journalnode.edits.dir -> dfs.namenode.name.dir"
    )

    with pytest.raises(ConfigError, match=r"^s.xml: dfs.namenode.name.dir: unterminated"):
        Settings.from_mapping({"dfs.namenode.name.dir": "/x/${oops"}, source="s.xml")


# --- files -----------------------------------------------------------------------------------


def test_hanamenode_conf_environment_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_conf(tmp_path, {"dfs.nameservices": "fromenv"})
    monkeypatch.setenv("HANAMENODE_CONF", str(path))
    assert load_settings(None).nameservice == "fromenv"
    assert load_settings().source == path
    monkeypatch.delenv("HANAMENODE_CONF")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert str(info.value) == "no configuration: pass --conf or set HANAMENODE_CONF"
    monkeypatch.setenv("HANAMENODE_CONF", "")
    with pytest.raises(ConfigError, match="no configuration"):
        load_settings()


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "nope.xml")
    assert str(info.value) == f"{tmp_path / 'nope.xml'}: no such file"
    with pytest.raises(ConfigError, match="is a directory"):
        load_settings(tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "<configuration>\n  <property>\n    <name>a</name>\n</configuration>\n",
            "line 4: malformed XML: mismatched tag",
        ),
        ("<configuration>\n  <property>\n", "line 3: malformed XML: no element found"),
        ("\n\n<configuration><property><name>x</name><value>1 & 2</value>", "line 3: malformed"),
        ("<conf/>", "line 1: expected <configuration> as the root element, got <conf>"),
        (
            "<configuration>\n<prop/></configuration>",
            "line 2: unexpected <prop> in <configuration>",
        ),
        (
            "<configuration>\n<property><name>dfs.nameservices</name></property></configuration>",
            "line 2: dfs.nameservices: <property> without a <value>",
        ),
        (
            "<configuration>\n<property><value>x</value></property></configuration>",
            "line 2: <property> without a <name>",
        ),
        (
            "<configuration>\n<property><name>a</name><value>1</value></property>\n"
            "<property><name>a</name><value>2</value></property>\n</configuration>",
            "line 3: a: defined twice (first on line 2)",
        ),
        (
            '<!DOCTYPE c [<!ENTITY x "y">]><configuration/>',
            "line 1: DOCTYPE declarations are not allowed",
        ),
    ],
)
def test_malformed_xml_names_file_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad-site.xml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value).startswith(f"{path}: {problem}")
    assert "\n" not in str(info.value)


def test_hadoop_style_extras_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "hdfs-site.xml"
    path.write_text(
        '<?xml version="1.0"?>\n'
        '<?xml-stylesheet type="text/xsl" href="configuration.xsl"?>\n'
        "<configuration>\n"
        "  <property>\n"
        "    <name> dfs.nameservices </name>\n"
        "    <value>\n      ns1\n    </value>\n"
        "    <description>the nameservice</description>\n"
        "    <final>true</final>\n"
        "  </property>\n"
        "  <property><name>dfs.journalnode.edits.dir</name><value><![CDATA[/a&b]]></value>"
        "</property>\n"
        "</configuration>\n"
    )
    s = load_settings(path)
    assert s.nameservice == "ns1"
    assert s.journalnode("jn1").edits_dir == Path("/a&b")


def test_write_xml_round_trips(tmp_path: Path) -> None:
    mapping: dict[str, ConfigValue] = {
        "dfs.nameservices": "mycluster",
        "dfs.ha.automatic-failover.enabled": False,
        "dfs.namenode.checkpoint.txns": 10,
        "dfs.ha.tail-edits.period": 0.5,
        "dfs.journalnode.edits.dir": tmp_path / "a <&> b",
        "dfs.ha.fencing.methods": "shell(/bin/echo 'x' \"y\")\nshell(/bin/true)",
        "ha.zookeeper.quorum": "127.0.0.1:2181",
    }
    path = write_xml(mapping, tmp_path / "sub" / "gen-site.xml")
    s = load_settings(path)
    assert s.raw == {
        "dfs.nameservices": "mycluster",
        "dfs.ha.automatic-failover.enabled": "false",
        "dfs.namenode.checkpoint.txns": "10",
        "dfs.ha.tail-edits.period": "0.5",
        "dfs.journalnode.edits.dir": str(tmp_path / "a <&> b"),
        "dfs.ha.fencing.methods": "shell(/bin/echo 'x' \"y\")\nshell(/bin/true)",
        "ha.zookeeper.quorum": "127.0.0.1:2181",
    }
    assert s.ha.fencing_methods == ("shell(/bin/echo 'x' \"y\")", "shell(/bin/true)")
    assert s == Settings.from_mapping(mapping, source=path)
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["gen-site.xml"]


def test_automatic_failover_needs_a_zookeeper_quorum() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping({"dfs.ha.automatic-failover.enabled": "true"}, source="s.xml")
    assert str(info.value) == (
        "s.xml: ha.zookeeper.quorum: required when dfs.ha.automatic-failover.enabled is true"
    )


# --- TLS -------------------------------------------------------------------------------------


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, Path]:
    # Existence is all that loading checks; tests/cluster/test_tls.py uses real certificates.
    files = {}
    for name in ("ca", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text("-----BEGIN PLACEHOLDER-----\n")
    return files


def tls_keys(files: dict[str, Path]) -> dict[str, ConfigValue]:
    return {f"hanamenode.rpc.tls.{name}-file": path for name, path in files.items()}


def test_tls_is_on_when_ca_file_is_set(pem_files: dict[str, Path]) -> None:
    s = Settings.from_mapping(tls_keys(pem_files))
    assert s.tls == TLSSettings(True, pem_files["ca"], pem_files["cert"], pem_files["key"])
    off = Settings.from_mapping({**tls_keys(pem_files), "hanamenode.rpc.tls.enabled": False})
    assert off.tls == TLSSettings(enabled=False)


def test_tls_missing_file_names_the_key(pem_files: dict[str, Path], tmp_path: Path) -> None:
    keys = tls_keys(pem_files)
    keys["hanamenode.rpc.tls.key-file"] = tmp_path / "gone.key"
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping(keys, source="s.xml")
    assert str(info.value) == (
        f"s.xml: hanamenode.rpc.tls.key-file: no such file '{tmp_path / 'gone.key'}'"
    )


def test_tls_enabled_needs_every_file(pem_files: dict[str, Path]) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping({"hanamenode.rpc.tls.enabled": "true"}, source="s.xml")
    assert str(info.value) == (
        "s.xml: hanamenode.rpc.tls.ca-file: required when hanamenode.rpc.tls.enabled is true"
    )
    keys = tls_keys(pem_files)
    del keys["hanamenode.rpc.tls.cert-file"]
    with pytest.raises(ConfigError) as info:
        Settings.from_mapping(keys, source="s.xml")
    assert str(info.value) == (
        "s.xml: hanamenode.rpc.tls.cert-file: required when hanamenode.rpc.tls.ca-file is set"
    )
    # A certificate without a CA would silently run in plaintext: refuse.
    keys = tls_keys(pem_files)
    del keys["hanamenode.rpc.tls.ca-file"]
    with pytest.raises(ConfigError, match=r"^s.xml: hanamenode.rpc.tls.cert-file: set, but TLS"):
        Settings.from_mapping(keys, source="s.xml")
    with pytest.raises(ConfigError, match="TLS is enabled but ca_file is not set"):
        TLSSettings(enabled=True)


# --- logging ---------------------------------------------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put logging back as it was. structlog's processor list is restored in place: loggers
    that earlier tests cached hold that list, and capture_logs edits it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    installed = conf_logging._handler  # the handler a next setup_logging replaces
    saved = structlog.get_config()
    processors = saved["processors"]
    kept = processors[:]
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    conf_logging._handler = installed
    processors[:] = kept
    structlog.configure(**saved)


@pytest.mark.usefixtures("restore_logging")
def test_a_logger_used_before_a_second_setup_still_reaches_capture_logs() -> None:
    """Each CLI command run in one process sets logging up again; a module logger cached on
    its first use must follow, or a test's capture_logs misses it (as a refusal's log line
    once was, depending on which tests ran before in the same worker)."""
    setup_logging("json", "info")
    logger = structlog.get_logger("conf.test.cached")
    logger.info("first use caches the logger")
    setup_logging("console", "info")
    with structlog.testing.capture_logs() as logs:
        logger.warning("after the second setup", n=1)
    assert [(e["event"], e.get("n")) for e in logs] == [("after the second setup", 1)]


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_json_routes_structlog_and_stdlib(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("json", "info")
    setup_logging("json", "info")  # idempotent: still one line per event
    structlog.get_logger("conf.test").bind(journal="j1").info("segment started", txid=7)
    logging.getLogger("kazoo.client").warning("connection %s", "lost")
    structlog.get_logger("conf.test").debug("not shown at info")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 2
    assert lines[0]["event"] == "segment started"
    assert lines[0]["journal"] == "j1" and lines[0]["txid"] == 7
    assert lines[0]["level"] == "info" and "timestamp" in lines[0]
    assert lines[1]["event"] == "connection lost" and lines[1]["logger"] == "kazoo.client"


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_console_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("console", "DEBUG")
    structlog.get_logger("conf.test").debug("for people", epoch=3)
    err = capsys.readouterr().err
    assert "for people" in err and "epoch=3" in err
    with pytest.raises(ConfigError, match="unknown log format 'xml'"):
        setup_logging("xml")
    with pytest.raises(ConfigError, match="unknown log level 'loud'"):
        setup_logging("console", "loud")


def test_log_format_option() -> None:
    @click.command()
    @LOG_FORMAT_OPTION
    def cli(log_format: str) -> None:
        click.echo(log_format)

    runner = CliRunner()
    assert runner.invoke(cli, []).output == "console\n"
    assert runner.invoke(cli, ["--log-format", "json"]).output == "json\n"
    bad = runner.invoke(cli, ["--log-format", "xml"])
    assert bad.exit_code == 2 and "'xml' is not one of 'console', 'json'" in bad.output
