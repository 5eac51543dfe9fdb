"""Heartbeats, consumer membership, NOTIFY_CONSUMER_IDS_CHANGED, offsets and restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

from _support import (
    address,
    broker_and_client,
    commit_request,
    create_topic,
    heartbeat,
    pull,
    query_offset_request,
    queue_table,
    run,
    running_broker,
    send,
    send_request,
)

from cometmq.broker._clients import CHANNEL_EXPIRED_TIMEOUT_S
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.remoting import Connection, RemotingClient
from waiting import next_millisecond, wait_until


def consumer_list(group: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": group})


def test_membership_and_notifications(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            notified: list[str] = []

            def on_request(conn: Connection, request: RemotingCommand) -> None:
                if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                    notified.append(request.ext_fields["consumerGroup"])

            first, second = RemotingClient(on_request), RemotingClient()
            empty = await first.invoke(addr, consumer_list("G"))
            assert empty.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (empty.remark or "")
            assert (await first.invoke(addr, heartbeat("111-127.0.0.1@DEFAULT", "G", "T"))).code == 0
            assert broker.topics.get("%RETRY%G") is not None
            # The first member is told of its own joining too: what follows must be about the second.
            await wait_until(lambda: "G" in notified, message="the first consumer told of its joining")
            notified.clear()
            await second.invoke(addr, heartbeat("222-127.0.0.1@DEFAULT", "G", "T"))
            ids = json.loads((await first.invoke(addr, consumer_list("G"))).body)["consumerIdList"]
            assert sorted(ids) == ["111-127.0.0.1@DEFAULT", "222-127.0.0.1@DEFAULT"]
            await wait_until(lambda: "G" in notified, message="the first consumer told of the second")
            notified.clear()
            await second.close()  # a closed connection leaves the group at once
            await wait_until(lambda: notified, message="the first consumer told of the second leaving")
            ids = json.loads((await first.invoke(addr, consumer_list("G"))).body)["consumerIdList"]
            assert ids == ["111-127.0.0.1@DEFAULT"]
            assert notified == ["G"]
            await first.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.UNREGISTER_CLIENT,
                    ext_fields={
                        "clientID": "111-127.0.0.1@DEFAULT",
                        "consumerGroup": "G",
                        "producerGroup": "",
                    },
                ),
            )
            assert (await first.invoke(addr, consumer_list("G"))).code == ResponseCode.SYSTEM_ERROR
            await first.close()

    run(scenario())


def test_offsets_topics_and_messages_survive_a_restart(tmp_path: Path) -> None:
    async def first_life() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "T", 2)
            young = await client.invoke(addr, query_offset_request("G", "T", 0))
            assert young.code == 0 and young.ext_fields["offset"] == "0"  # young queue: start at 0
            for i in range(5):
                await client.invoke(addr, send_request("T", f"m{i}".encode(), 0))
            await client.invoke(addr, commit_request("G", "T", 0, 3))

    async def second_life() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert broker.topics.get("T") is not None
            stored = await client.invoke(addr, query_offset_request("G", "T", 0))
            assert stored.ext_fields["offset"] == "3"
            _, records = await pull(client, addr, "T", 0, 3)
            assert [r.body for r in records] == [b"m3", b"m4"]
            response = await client.invoke(addr, send_request("T", b"m5", 0))
            assert response.ext_fields["queueOffset"] == "5"

    run(first_life())
    run(second_life())


def test_queue_offset_lookups_and_view_by_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "L", 1)
            sent = []
            for i in range(3):
                sent.append(await client.invoke(addr, send_request("L", f"v{i}".encode(), 0)))
                next_millisecond()  # distinct store timestamps, for the timestamp search
            fields = {"topic": "L", "queueId": "0"}
            max_offset = await client.invoke(
                addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields=fields)
            )
            min_offset = await client.invoke(
                addr, RemotingCommand(code=RequestCode.GET_MIN_OFFSET, ext_fields=fields)
            )
            assert (max_offset.ext_fields["offset"], min_offset.ext_fields["offset"]) == ("3", "0")
            _, records = await pull(client, addr, "L", 0, 0)
            stamp = records[1].store_timestamp
            found = await client.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    ext_fields={**fields, "timestamp": str(stamp)},
                ),
            )
            assert found.ext_fields["offset"] == "1"
            earliest = await client.invoke(
                addr, RemotingCommand(code=RequestCode.GET_EARLIEST_MSG_STORETIME, ext_fields=fields)
            )
            assert earliest.ext_fields["timestamp"] == str(records[0].store_timestamp)
            view = await client.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.VIEW_MESSAGE_BY_ID,
                    ext_fields={"offset": str(records[2].commitlog_offset)},
                ),
            )
            assert view.code == 0 and b"v2" in view.body
            bad = await client.invoke(
                addr, RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": "7"})
            )
            assert bad.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (bad.remark or "")

    run(scenario())


def test_topic_stats_are_keyed_by_message_queue_as_rocketmq_writes_them(tmp_path: Path) -> None:
    """GET_TOPIC_STATS_INFO (202): TopicStatsTable, fastjson's Map<MessageQueue, TopicOffset>."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "S", 2)
            sent = [await send(client, addr, "S", b"s%d" % i) for i in range(3)]
            request = RemotingCommand(code=RequestCode.GET_TOPIC_STATS_INFO, ext_fields={"topic": "S"})
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert response.body.startswith(b'{"offsetTable":{{"brokerName":')  # an object as the key
            table = fastjson.loads(response.body)["offsetTable"]
            name = broker.config.broker_name
            assert [dict(key) for key in table] == [
                {"brokerName": name, "queueId": q, "topic": "S"} for q in (0, 1)
            ]
            _, records = await pull(client, addr, "S", 0, 0)
            assert [r.commitlog_offset for r in records] == [offset for offset, _ in sent]
            last = records[-1].store_timestamp
            assert queue_table(table) == {
                ("S", 0): {"lastUpdateTimestamp": last, "maxOffset": 3, "minOffset": 0},
                ("S", 1): {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0},
            }
            missing = RemotingCommand(code=RequestCode.GET_TOPIC_STATS_INFO, ext_fields={"topic": "None"})
            assert (await client.invoke(addr, missing)).code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_a_consumer_that_stops_heartbeating_is_dropped_after_120_s(tmp_path: Path) -> None:
    """The housekeeping loop's expiry rule, called with a clock moved forward instead of waiting."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, consumer):
            assert (await consumer.invoke(addr, heartbeat("1-127.0.0.1@a", "G", "T"))).code == 0
            observer = RemotingClient()
            now = time.monotonic()
            assert broker.consumers.expire(now + CHANNEL_EXPIRED_TIMEOUT_S - 1) == []
            kept = await observer.invoke(addr, consumer_list("G"))
            assert json.loads(kept.body)["consumerIdList"] == ["1-127.0.0.1@a"]
            assert broker.consumers.expire(now + CHANNEL_EXPIRED_TIMEOUT_S + 1) == ["G"]
            gone = await observer.invoke(addr, consumer_list("G"))
            assert gone.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (gone.remark or "")
            await observer.close()

    run(scenario())
