"""CONSUMER_SEND_MSG_BACK (36) against a real broker: retry topic, reconsume times, DLQ, errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from _support import address, broker_and_client, create_topic, pull, running_broker, send, send_request

from cometmq.broker._groups import SubscriptionGroupConfig
from cometmq.client import AdminClient
from cometmq.errors import BrokerError
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id, decode_records
from cometmq.remoting import RemotingClient
from waiting import wait_until


def send_back(offset: int, group: str = "CG", delay_level: int = 0, **fields: str) -> RemotingCommand:
    """As the C++ client sends it: offset (string), group, delayLevel and nothing else."""
    ext = {"offset": str(offset), "group": group, "delayLevel": str(delay_level), **fields}
    return RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext)


async def only_record(
    client: RemotingClient, addr: str, topic: str, offset: int, queue_id: int = 0, suspend_ms: int = 0
) -> DecodedRecord:
    response, records = await pull(client, addr, topic, queue_id, offset, suspend_ms=suspend_ms)
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    assert len(records) == 1
    return records[0]


def test_retries_keep_the_message_and_count_up_then_go_to_the_dlq(tmp_path: Path) -> None:
    async def scenario() -> None:
        # Every delay level 1 s, so the retries come back quickly; level 3 + n is capped at 6.
        async with running_broker(tmp_path, messageDelayLevel="1s 1s 1s 1s 1s 1s") as broker:
            broker.groups.put(SubscriptionGroupConfig("CG", retry_max_times=2))
            client = RemotingClient()
            addr = address(broker)
            assert (await create_topic(client, addr, "Orders")).code == 0
            offset, first_id = await send(
                client, addr, "Orders", b"pay me", KEYS="order-1", TAGS="paid", UNIQ_KEY="UNIQ01", color="red"
            )

            for attempt in (1, 2):
                response = await client.invoke(addr, send_back(offset))
                assert response.code == ResponseCode.SUCCESS, response.remark
                # Parked for delay level 3 + reconsume times (RocketMQ), i.e. queue level - 1 ...
                level = 2 + attempt
                parked = await only_record(client, addr, "SCHEDULE_TOPIC_XXXX", 0, queue_id=level - 1)
                props = decode_properties(parked.properties)
                assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == (
                    str(level),
                    "%RETRY%CG",
                    "0",
                )
                assert parked.reconsume_times == attempt
                # ... and delivered to %RETRY%CG when due.
                retry = await only_record(client, addr, "%RETRY%CG", attempt - 1, suspend_ms=30_000)
                assert retry.store_timestamp - parked.store_timestamp >= 1000, "delivered before it was due"
                props = decode_properties(retry.properties)
                assert retry.reconsume_times == attempt
                assert retry.body == b"pay me"
                assert props["RETRY_TOPIC"] == "Orders"
                assert props["ORIGIN_MESSAGE_ID"] == first_id  # the first delivery, every time
                assert (props["UNIQ_KEY"], props["KEYS"], props["TAGS"], props["color"]) == (
                    "UNIQ01",
                    "order-1",
                    "paid",
                    "red",
                )
                offset = retry.commitlog_offset  # the consumer fails the redelivered copy next

            retry_topic = broker.topics.get("%RETRY%CG")
            assert retry_topic is not None
            assert (retry_topic.read_queue_nums, retry_topic.write_queue_nums, retry_topic.perm) == (1, 1, 6)
            assert broker.topics.get("%DLQ%CG") is None

            # reconsume times 2 reached the group's retryMaxTimes: a dead letter, at once.
            response = await client.invoke(addr, send_back(offset))
            assert response.code == ResponseCode.SUCCESS, response.remark
            dead = await only_record(client, addr, "%DLQ%CG", 0)
            props = decode_properties(dead.properties)
            assert dead.reconsume_times == 3
            assert dead.body == b"pay me"
            assert props["RETRY_TOPIC"] == "Orders"
            assert props["ORIGIN_MESSAGE_ID"] == first_id
            assert (props["UNIQ_KEY"], props["color"]) == ("UNIQ01", "red")
            assert "DELAY" not in props
            dlq = broker.topics.get("%DLQ%CG")
            assert dlq is not None
            assert (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)
            await client.close()

    asyncio.run(scenario())


def test_the_new_topics_are_registered_with_the_name_server_at_once(tmp_path: Path) -> None:
    async def routed(admin: AdminClient, topic: str) -> None:
        async def route() -> list[tuple[int, int]]:
            try:
                found = await admin.topic_route(topic)
            except BrokerError:
                return []
            return [(q.read_queue_nums, q.perm) for q in found.queue_datas]

        assert await wait_until(route, message=f"a route of {topic}") == [(1, 6)]

    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        ns_addr = f"127.0.0.1:{namesrv.port}"
        # The periodic registration is an hour away: only the on-change one can route the topics.
        hourly = {"namesrvAddr": ns_addr, "registerNameServerPeriod": 3_600_000}
        async with broker_and_client(tmp_path, **hourly) as (_, addr, client):
            offset, _ = await send(client, addr, "TopicA", b"x")
            assert (await client.invoke(addr, send_back(offset, delay_level=-1))).code == 0
            async with AdminClient(ns_addr) as admin:
                await routed(admin, "%RETRY%CG")
                await routed(admin, "%DLQ%CG")
        await namesrv.stop()

    asyncio.run(scenario())


def test_negative_delay_level_goes_straight_to_the_dlq_and_a_set_level_is_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            offset, _ = await send(client, addr, "TopicA", b"x", TAGS="t")
            assert (await client.invoke(addr, send_back(offset, delay_level=-1))).code == 0
            dead = await only_record(client, addr, "%DLQ%CG", 0)
            assert dead.reconsume_times == 1
            assert decode_properties(dead.properties)["RETRY_TOPIC"] == "TopicA"

            assert (await client.invoke(addr, send_back(offset, delay_level=7))).code == 0
            parked = await only_record(client, addr, "SCHEDULE_TOPIC_XXXX", 0, queue_id=6)
            assert decode_properties(parked.properties)["DELAY"] == "7"
            # Beyond the 18 default levels: capped, as RocketMQ does.
            assert (await client.invoke(addr, send_back(offset, delay_level=30))).code == 0
            parked = await only_record(client, addr, "SCHEDULE_TOPIC_XXXX", 0, queue_id=17)
            assert decode_properties(parked.properties)["DELAY"] == "18"

    asyncio.run(scenario())


def test_header_max_reconsume_times_counts_from_version_121(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            offset, _ = await send(client, addr, "TopicA", b"x")
            old = send_back(offset, maxReconsumeTimes="0")
            old.version = 63  # what the C++ client sends: the header value is ignored
            assert (await client.invoke(addr, old)).code == 0
            assert (
                await only_record(client, addr, "SCHEDULE_TOPIC_XXXX", 0, queue_id=2)
            ).reconsume_times == 1
            new = send_back(offset, maxReconsumeTimes="0")
            new.version = 121
            assert (await client.invoke(addr, new)).code == 0
            assert (await only_record(client, addr, "%DLQ%CG", 0)).reconsume_times == 1

    asyncio.run(scenario())


def test_bad_offset_and_unknown_group_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path, autoCreateSubscriptionGroup="false") as broker:
            broker.groups.put(SubscriptionGroupConfig("CG"))
            client = RemotingClient()
            addr = address(broker)
            offset, _ = await send(client, addr, "TopicA", b"some body")
            for bad in (offset + 10, 1 << 40, -1):  # inside a record, past the end, negative
                response = await client.invoke(addr, send_back(bad))
                assert response.code == ResponseCode.SYSTEM_ERROR
                assert response.remark == f"look message by offset failed, {bad}"
            response = await client.invoke(addr, send_back(offset, group="NoSuchGroup"))
            assert response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert response.remark is not None
            assert response.remark.startswith("subscription group not exist, NoSuchGroup")
            missing = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields={"group": "CG"})
            response = await client.invoke(addr, missing)
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "offset" in (response.remark or "")
            assert broker.topics.get("%DLQ%CG") is None
            await client.close()

    asyncio.run(scenario())


def test_a_consumer_pulls_its_retry_topic_with_the_heartbeat_subscription(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, messageDelayLevel="1s 1s 1s") as (broker, addr, client):
            # The C++ push consumer's heartbeat: the topic and %RETRY%<group>, both "*".
            subscriptions = [
                {"subString": "*", "subVersion": "1", "topic": topic} for topic in ("%RETRY%CG", "TopicA")
            ]
            body = {
                "clientID": "c1",
                "consumerDataSet": [
                    {
                        "consumeFromWhere": 0,
                        "consumeType": 1,
                        "groupName": "CG",
                        "messageModel": 1,
                        "subscriptionDataSet": subscriptions,
                    }
                ],
            }
            hb = RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(body).encode())
            assert (await client.invoke(addr, hb)).code == 0
            assert broker.topics.get("%RETRY%CG") is not None
            offset, _ = await send(client, addr, "TopicA", b"again", TAGS="t")
            assert (await client.invoke(addr, send_back(offset))).code == 0
            pull_req = RemotingCommand(
                code=RequestCode.PULL_MESSAGE,
                ext_fields={
                    "consumerGroup": "CG",
                    "topic": "%RETRY%CG",
                    "queueId": "0",
                    "queueOffset": "0",
                    "maxMsgNums": "32",
                    "sysFlag": "2",  # suspend; no subscription in the request: the heartbeat's is used
                    "commitOffset": "0",
                    "suspendTimeoutMillis": "5000",  # held until the retry is due
                    "subVersion": "1",
                },
            )
            response = await client.invoke(addr, pull_req, timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            [retry] = decode_records(response.body)
            assert (retry.body, retry.reconsume_times) == (b"again", 1)

    asyncio.run(scenario())


def test_under_sync_flush_the_copy_is_on_disk_before_success(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            offset, _ = await send(client, addr, "TopicA", b"x")
            reply = await client.invoke(addr, send_back(offset, delay_level=-1))
            assert reply.code == 0
            # The consumer commits past the original once it hears SUCCESS: the copy must be durable.
            assert broker.store.commitlog_flushed_offset >= broker.store.commitlog_max_offset
            assert (await only_record(client, addr, "%DLQ%CG", 0)).reconsume_times == 1

    asyncio.run(scenario())


def test_a_sync_master_without_a_slave_does_not_answer_success_to_a_send_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, brokerRole="SYNC_MASTER") as (_, addr, client):
            stored = await client.invoke(addr, send_request("TopicA", b"x"))
            # No slave: the original is stored, not replicated (SLAVE_NOT_AVAILABLE), and so is its copy,
            # which the consumer must not take for safe: RocketMQ answers code 1 with the status.
            assert stored.code == ResponseCode.SLAVE_NOT_AVAILABLE
            offset = decode_offset_msg_id(stored.ext_fields["msgId"])[2]
            reply = await client.invoke(addr, send_back(offset, delay_level=-1))
            assert (reply.code, reply.remark) == (ResponseCode.SYSTEM_ERROR, "SLAVE_NOT_AVAILABLE")
            assert (await only_record(client, addr, "%DLQ%CG", 0)).reconsume_times == 1

    asyncio.run(scenario())
