"""Fencing methods: parsing ``dfs.ha.fencing.methods`` and running ``shell(...)`` in order
with the target in the environment (no ZooKeeper needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf import ConfigError, Settings
from failover.fencing import FenceMethod, FenceTarget, NodeFencer, parse_fence_method

TARGET = FenceTarget("ns1", "nn1", "10.1.2.3:8020")


def test_parse() -> None:
    assert parse_fence_method(" shell(/bin/true) ") == FenceMethod("shell", "/bin/true")
    assert parse_fence_method("shell(kill -9 $(cat /run/nn.pid))") == FenceMethod(
        "shell", "kill -9 $(cat /run/nn.pid)"
    )
    with pytest.raises(ConfigError, match="unknown fencing method 'sshfence'"):
        parse_fence_method("sshfence(hdfs:22)")
    with pytest.raises(ConfigError, match="needs a command"):
        parse_fence_method("shell()")


def test_default_is_shell_true() -> None:
    fencer = NodeFencer.from_settings(Settings.from_mapping({}))
    assert [str(m) for m in fencer.methods] == ["shell(/bin/true)"]
    result = fencer.fence(TARGET)
    assert result.succeeded and result.method == "shell(/bin/true)"


def test_methods_run_in_order_until_one_succeeds(tmp_path: Path) -> None:
    log = tmp_path / "log"
    settings = Settings.from_mapping(
        {
            "dfs.ha.fencing.methods": "\n".join(
                [
                    f"shell(echo first >> {log}; echo 'cannot reach host' >&2; exit 3)",
                    f'shell(echo "$HANAMENODE_TARGET_ID $HANAMENODE_TARGET_HOST '
                    f'$HANAMENODE_TARGET_PORT $target_namenodeid $target_host:$target_port '
                    f'$target_nameserviceid" >> {log})',
                    f"shell(echo never >> {log})",
                ]
            )
        }
    )
    result = NodeFencer.from_settings(settings).fence(TARGET)
    assert result.succeeded
    assert result.method is not None and result.method.startswith('shell(echo "$HANAMENODE')
    assert [a.succeeded for a in result.attempts] == [False, True]
    assert result.attempts[0].detail == "exit status 3 (cannot reach host)"
    assert log.read_text() == "first\nnn1 10.1.2.3 8020 nn1 10.1.2.3:8020 ns1\n"


def test_every_method_failing_is_a_failed_fence() -> None:
    fencer = NodeFencer([FenceMethod("shell", "/bin/false"), FenceMethod("shell", "exit 7")])
    result = fencer.fence(TARGET)
    assert not result.succeeded and result.method is None
    assert result.describe() == "shell(/bin/false): exit status 1; shell(exit 7): exit status 7"


def test_a_hanging_method_is_killed() -> None:
    result = NodeFencer([FenceMethod("shell", "sleep 30")], shell_timeout=0.2).fence(TARGET)
    assert not result.succeeded
    assert result.describe() == "shell(sleep 30): did not exit within 0.2s (killed)"
