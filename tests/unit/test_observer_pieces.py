"""The small pieces of observer reads (docs/consistency.md §9) without a cluster: the wait for
an applied txid, the txid metadata, and the settings that make a NameNode an observer and a
client read from observers."""

from __future__ import annotations

import asyncio

import pytest

from conf import ConfigError, Settings
from hanamenode.errors import InvalidArgumentError
from hanamenode.ha import SEEN_TXID_KEY, parse_txid
from hanamenode.loop import AppliedTxid


def test_a_waiter_is_woken_as_soon_as_its_txid_is_applied() -> None:
    async def scenario() -> list[str]:
        applied = [5]
        watch = AppliedTxid(lambda: applied[0])
        events: list[str] = []

        async def reader(txid: int) -> None:
            events.append(f"{txid}: {await watch.wait_for(txid, timeout=5.0)}")

        assert await watch.wait_for(5, timeout=0.0)  # already applied: no wait at all
        tasks = [asyncio.create_task(reader(t)) for t in (7, 9)]
        await asyncio.sleep(0.01)
        assert watch.waiting == 2 and events == []
        applied[0] = 8
        watch.advanced(8)
        await asyncio.sleep(0.01)
        assert events == ["7: True"] and watch.waiting == 1
        applied[0] = 9
        watch.advanced(9)
        await asyncio.gather(*tasks)
        assert watch.waiting == 0
        return events

    assert asyncio.run(scenario()) == ["7: True", "9: True"]


def test_a_waiter_gives_up_after_its_timeout_and_leaves_no_trace() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        watch = AppliedTxid(lambda: 3)
        late = await watch.wait_for(4, timeout=0.05)
        never = await watch.wait_for(4, timeout=0.0)
        return late, never, watch.waiting

    assert asyncio.run(scenario()) == (False, False, 0)


@pytest.mark.parametrize("text", ["", "-1", "1.5", "x", "٣", str(2**63)])
def test_a_malformed_txid_in_metadata_is_refused_naming_the_key(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=SEEN_TXID_KEY):
        parse_txid(SEEN_TXID_KEY, text)


def test_txids_in_metadata_parse() -> None:
    assert parse_txid(SEEN_TXID_KEY, "0") == 0
    assert parse_txid(SEEN_TXID_KEY, str(2**63 - 1)) == 2**63 - 1


NNS = {"dfs.ha.namenodes.hanamenode": "nn1,nn2,nn3"}


def test_an_observer_is_configured_per_namenode_and_turns_on_observer_reads() -> None:
    plain = Settings.from_mapping(NNS)
    assert not plain.namenode("nn3").observer and not plain.client.observer_reads
    settings = Settings.from_mapping({**NNS, "dfs.namenode.observer.hanamenode.nn3": True})
    assert settings.namenode("nn3").observer and not settings.namenode("nn1").observer
    assert settings.client.observer_reads
    assert settings.ha.observer_read_max_wait == 1.0


@pytest.mark.parametrize(
    ("provider", "observer_reads"),
    [
        ("ConfiguredFailoverProxyProvider", False),
        ("org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider", True),
    ],
)
def test_the_proxy_provider_named_wins(provider: str, observer_reads: bool) -> None:
    settings = Settings.from_mapping(
        {
            **NNS,
            "dfs.namenode.observer.hanamenode.nn3": True,
            "dfs.client.failover.proxy.provider.hanamenode": provider,
        }
    )
    assert settings.client.observer_reads is observer_reads


def test_bad_observer_settings_are_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match=r"dfs\.client\.failover\.proxy\.provider\.hanamenode"):
        Settings.from_mapping({**NNS, "dfs.client.failover.proxy.provider.hanamenode": "Nope"})
    with pytest.raises(ConfigError, match=r"'nn9' is not in dfs\.ha\.namenodes"):
        Settings.from_mapping({**NNS, "dfs.namenode.observer.hanamenode.nn9": True})
    with pytest.raises(ConfigError, match=r"dfs\.namenode\.observer\.read\.max-wait\.ms"):
        Settings.from_mapping({**NNS, "dfs.namenode.observer.read.max-wait.ms": "soon"})
