"""Retention and the disk guard through a real broker: real sockets, real files, 64 KiB segments.

Disk usage comes from an *injected disk-usage probe* (``InjectedDiskUsage``, passed to the broker's
store) so the tests can put the disk above 75, 85 and 90 % without filling one.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime
from pathlib import Path

import pytest
from _support import broker_and_client, create_topic, pull, run, send_request

from cometmq.broker import Broker, BrokerConfig
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.remoting import RemotingClient
from retention_fakes import HOUR_MS, InjectedDiskUsage, at_hour
from waiting import wait_until

SMALL = {"mappedFileSizeCommitLog": 64 * 1024, "mappedFileSizeConsumeQueue": 20 * 100}
BODY = b"y" * 1000


def age_segments(root: Path, hours: float, now_ms: int) -> list[Path]:
    segs = sorted((root / "commitlog").iterdir())
    ns = (now_ms - int(hours * HOUR_MS)) * 1_000_000
    for path in segs:
        os.utime(path, ns=(ns, ns))
    return segs


async def send_many(client: RemotingClient, addr: str, topic: str, count: int) -> None:
    for i in range(count):
        response = await client.invoke(addr, send_request(topic, BODY[:-4] + b"%04d" % i))
        assert response.code == ResponseCode.SUCCESS, response.remark


def test_a_consumer_behind_a_retention_pass_is_moved_to_the_new_min_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        probe = InjectedDiskUsage(0.10)
        async with broker_and_client(tmp_path, probe, **SMALL) as (broker, addr, client):
            assert (await create_topic(client, addr, "Aging", queues=1)).code == 0
            await send_many(client, addr, "Aging", 300)
            now = at_hour(4)
            segs = age_segments(tmp_path, 100, now)
            assert len(segs) >= 4

            report = broker.store.clean(now)  # the retention pass, on the broker's event loop
            assert report.commitlog_deleted == segs[:-1]
            assert report.consumequeue_deleted  # queue files pointing only into them went too
            new_min = broker.store.min_offset("Aging", 0)
            assert new_min > 0

            moved, _ = await pull(client, addr, "Aging", 0, 0)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED
            assert moved.ext_fields["nextBeginOffset"] == str(new_min)
            assert moved.ext_fields["minOffset"] == str(new_min)
            found, records = await pull(client, addr, "Aging", 0, new_min)
            assert found.code == ResponseCode.SUCCESS
            assert records[0].queue_offset == new_min
            assert records[0].body == BODY[:-4] + b"%04d" % new_min
            asked = await client.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.GET_MIN_OFFSET, ext_fields={"topic": "Aging", "queueId": "0"}
                ),
            )
            assert asked.ext_fields["offset"] == str(new_min)

    run(scenario())


def test_above_90_percent_by_injected_probe_sends_are_refused_with_the_usage_and_pulls_still_work(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        probe = InjectedDiskUsage(0.10)
        settings = {"cleanResourceInterval": 50, **SMALL}
        async with broker_and_client(tmp_path, probe, **settings) as (broker, addr, client):
            assert (await create_topic(client, addr, "Full", queues=1)).code == 0
            await send_many(client, addr, "Full", 3)

            probe.ratio = 0.934
            # The broker's housekeeping runs the clean pass every cleanResourceInterval.
            await wait_until(lambda: broker.store.write_refusal is not None, message="writes refused")
            refused = await client.invoke(addr, send_request("Full", b"one more"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE  # 14
            assert refused.remark is not None
            assert refused.remark.startswith("disk full: 93.4% of ")
            assert "(limit 90%); writes resume at 85%" in refused.remark
            pulled, records = await pull(client, addr, "Full", 0, 0)
            assert pulled.code == ResponseCode.SUCCESS
            assert [r.body for r in records] == [BODY[:-4] + b"%04d" % i for i in range(3)]
            info = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
            assert fastjson.loads(info.body)["table"]["commitLogDiskRatio"] == "0.934"

            probe.ratio = 0.60  # space is back: writes resume without a restart
            await wait_until(lambda: broker.store.write_refusal is None, message="writes accepted again")
            accepted = await client.invoke(addr, send_request("Full", b"one more"))
            assert accepted.code == ResponseCode.SUCCESS, accepted.remark
            assert accepted.ext_fields["queueOffset"] == "3"

    run(scenario())


def test_housekeeping_deletes_expired_segments_every_clean_resource_interval(tmp_path: Path) -> None:
    async def scenario() -> None:
        hour = datetime.now().hour
        settings = {
            **SMALL,
            "cleanResourceInterval": "50",
            "fileReservedTime": "1",
            "deleteWhen": f"{hour};{(hour + 1) % 24}",  # now, even across the turn of the hour
        }
        async with broker_and_client(tmp_path, InjectedDiskUsage(0.10), **settings) as (broker, addr, client):
            assert (await create_topic(client, addr, "Hourly", queues=1)).code == 0
            await send_many(client, addr, "Hourly", 200)
            await asyncio.sleep(0.2)
            assert broker.store.commitlog_min_offset == 0  # written just now: not expired
            segs = age_segments(tmp_path, 2, int(time.time() * 1000))
            await wait_until(
                lambda: broker.store.commitlog_min_offset == int(segs[-1].name),
                message="aged segments gone",
            )
            assert sorted((tmp_path / "commitlog").iterdir()) == segs[-1:]
            moved, _ = await pull(client, addr, "Hourly", 0, 0)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED

    run(scenario())


def test_retention_settings_are_read_under_rocketmq_keys_and_reach_the_store(tmp_path: Path) -> None:
    config = BrokerConfig()
    config.update(
        {
            "storePathRootDir": str(tmp_path),
            "fileReservedTime": "48",
            "deleteWhen": "02;14",
            "diskMaxUsedSpaceRatio": "70",
            "diskSpaceCleanForciblyRatio": "80",
            "diskSpaceWarningLevelRatio": "88",
            "cleanFileForciblyEnable": "false",
            "deleteFileBatchMax": "3",
            "cleanResourceInterval": "5000",
        }
    )
    assert config.clean_resource_interval == 5000
    store_config = Broker(config).store._config
    assert store_config.file_reserved_time == 48
    assert store_config.delete_when == "02;14"
    assert store_config.disk_max_used_space_ratio == 70
    assert store_config.disk_space_clean_forcibly_ratio == 80
    assert store_config.disk_space_warning_level_ratio == 88
    assert store_config.clean_file_forcibly_enable is False
    assert store_config.delete_file_batch_max == 3
    defaults = BrokerConfig()
    assert (defaults.file_reserved_time, defaults.delete_when, defaults.disk_max_used_space_ratio) == (
        72,
        "04",
        75,
    )
    assert defaults.clean_resource_interval == 10_000
    with pytest.raises(ConfigError, match="deleteWhen"):
        BrokerConfig().update({"deleteWhen": "4am"})
