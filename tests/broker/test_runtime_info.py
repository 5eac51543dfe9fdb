"""The broker's runtime info (GET_BROKER_RUNTIME_INFO): message totals and their rates, as RocketMQ's
tools read them."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from _support import broker_and_client, pull, run, send_request

from cometmq.broker import BrokerStats
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.remoting import RemotingClient


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    response = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
    assert response.code == ResponseCode.SUCCESS, response.remark
    table: dict[str, str] = fastjson.loads(response.body)["table"]
    return table


def rates(text: str) -> list[float]:
    """RocketMQ's "<10 s> <60 s> <600 s>" rates."""
    parts = text.split(" ")
    assert len(parts) == 3, text
    return [float(part) for part in parts]


def test_put_and_transferred_rates_count_every_message_stored_and_pulled(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            for i in range(10):
                sent = await client.invoke(addr, send_request("Rates", b"single-%d" % i))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            entries = [BatchEntry(0, b"batch-%d" % i, "") for i in range(5)]
            batch = send_request("Rates", encode_batch_body(entries), 0, v2=False, batch="1")
            sent = await client.invoke(addr, batch)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            _, records = await pull(client, addr, "Rates", 0, 0)
            assert len(records) == 15

            info = await runtime_info(client, addr)
            assert (info["msgPutTotalTodayNow"], info["msgGetTotalTodayNow"]) == ("15", "15")
            # The longest window surely covers the sends, however slow the machine (the windows
            # themselves: the next test).
            assert rates(info["putTps"])[2] > 0 and rates(info["getTransferedTps"])[2] > 0
            assert info["getTransferredTps"] == info["getTransferedTps"]  # RocketMQ 5's spelling

    run(scenario())


def test_each_rate_is_the_growth_since_the_snapshot_its_window_back() -> None:
    clock = [1000.0]
    stats = BrokerStats(clock=lambda: clock[0])
    assert stats.put_tps() == "  "  # nothing measured yet: empty, as RocketMQ's young windows
    for second in range(61):  # 10 messages a second for a minute, one snapshot a second
        clock[0] = 1000.0 + second
        stats.put_messages = 10 * second
        stats.sample()
    stats.put_messages += 30  # 30 more in the next half second
    clock[0] += 0.5
    # The tenth snapshot back is second 51 (510 stored), the sixtieth second 1 (10 stored); the 600 s
    # window reaches the oldest there is, second 0.
    assert stats.put_tps() == f"{round(120 / 9.5, 2)} {round(620 / 59.5, 2)} {round(630 / 60.5, 2)}"
    assert stats.get_transferred_tps() == "0.0 0.0 0.0"


def test_every_field_rocketmq_cluster_list_parses_is_there_and_numeric(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            before = int(time.time() * 1000)
            for i in range(3):
                sent = await client.invoke(addr, send_request("Counted", b"m-%d" % i))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            info = await runtime_info(client, addr)
            # RocketMQ 4.9.8's ClusterListSubCommand reads these with Long.parseLong / Double.
            for key in (
                "msgPutTotalTodayMorning",
                "msgPutTotalYesterdayMorning",
                "msgGetTotalTodayMorning",
                "msgGetTotalYesterdayMorning",
                "earliestMessageTimeStamp",
                "pageCacheLockTimeMills",
                "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize",
                "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills",
                "remainHowManyDataToFlush",
                "putMessageTimesTotal",
                "putMessageSizeTotal",
            ):
                assert int(info[key]) >= 0, key
            # A broker started today: today's counts are everything since it started.
            assert int(info["msgPutTotalTodayNow"]) - int(info["msgPutTotalTodayMorning"]) == 3
            assert int(info["putMessageTimesTotal"]) == 3
            assert int(info["putMessageSizeTotal"]) == broker.stats.put_by_topic["Counted"][1]
            assert before - 5000 <= int(info["earliestMessageTimeStamp"]) <= int(time.time() * 1000)
            assert info["commitLogDirCapacity"].startswith("Total : ")

    run(scenario())


def test_the_day_totals_move_at_midnight() -> None:
    stats = BrokerStats()
    stats.put_messages, stats.got_messages = 100, 40
    stats._day = datetime.date(2000, 1, 1)  # the broker has been running since a day long gone
    stats.sample()
    assert stats.day_starts == (100, 40, 0, 0)
    stats.put_messages, stats.got_messages = 130, 50
    stats._day = datetime.date(2000, 1, 1)
    stats.sample()
    assert stats.day_starts == (130, 50, 100, 40)


def test_the_last_store_time_is_the_commit_logs_last_record_after_its_topic_is_deleted_and_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert (await runtime_info(client, addr))["lastMessageStoreTimestamp"] == "0"
            sent = await client.invoke(addr, send_request("Gone", b"last"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            _, records = await pull(client, addr, "Gone", 0, 0)
            stored = str(records[0].store_timestamp)
            assert (await runtime_info(client, addr))["lastMessageStoreTimestamp"] == stored
            delete = RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "Gone"})
            assert (await client.invoke(addr, delete)).code == ResponseCode.SUCCESS
            # The record stays in the commit log: it is still the newest message stored.
            assert (await runtime_info(client, addr))["lastMessageStoreTimestamp"] == stored
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert (await runtime_info(client, addr))["lastMessageStoreTimestamp"] == stored

    run(scenario())
