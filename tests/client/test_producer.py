"""The asyncio Producer against a real `cometmq standalone` (and, for response codes a healthy broker
never gives, against a scripted stand-in broker on real sockets)."""

from __future__ import annotations

import asyncio
import string
import time
import zlib
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from client_support import DROP, MALFORMED, run, scripted, send_to_queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cometmq.client import _brokerapi
from cometmq.client._instance import ClientInstance
from cometmq.client.admin import AdminClient
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.client.producer import RESERVED_PROPERTIES, Producer, select_by_hash
from cometmq.errors import (
    BrokerError,
    ClientStateError,
    CometMQError,
    ConnectionClosedError,
    InvalidMessageError,
    MessageTooLargeError,
    ProtocolError,
)
from cometmq.protocol import MAX_FRAME_SIZE, RemotingCommand, RequestCode
from cometmq.protocol import ResponseCode as Code
from cometmq.protocol.batch import decode_batch_body
from cometmq.protocol.naming import SCHEDULE_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_records
from cometmq.protocol.subscription import SubscriptionData
from cometmq.remoting import Connection
from processes import TEST_BROKER_CONF, ServerProcess, StandaloneServer, free_port
from waiting import wait_until

# ---------------------------------------------------------------------------------------------
# reading back what was sent


@asynccontextmanager
async def reader(namesrv: str) -> AsyncIterator[ClientInstance]:
    instance = ClientInstance(namesrv)
    try:
        yield instance
    finally:
        await instance.close()


async def routed(instance: ClientInstance, queue: MessageQueue) -> str:
    """The queue's broker address, once the name server routes the topic there (a topic created by a
    send is registered right after the reply)."""

    async def address() -> str | None:
        if instance.broker_addr(queue.broker_name) is None:
            await instance.fetch_route(queue.topic)
        return instance.broker_addr(queue.broker_name)

    return await wait_until(address, message=f"a route of {queue.topic} to {queue.broker_name}")


async def pull_queue(instance: ClientInstance, queue: MessageQueue, offset: int = 0) -> list[ReceivedMessage]:
    """Every message of ``queue`` from ``offset`` on."""
    await routed(instance, queue)
    messages: list[ReceivedMessage] = []
    while True:
        result = await _brokerapi.pull(
            instance, queue, "GID_reader", SubscriptionData(queue.topic), offset, 32
        )
        if not result.messages and result.next_begin_offset == offset:
            return messages
        messages.extend(result.messages)
        offset = result.next_begin_offset


async def pull_topic(instance: ClientInstance, topic: str) -> list[ReceivedMessage]:
    await wait_until(lambda: instance.fetch_route(topic), message=f"a route of {topic}")
    messages: list[ReceivedMessage] = []
    for queue in await instance.subscribe_queues(topic):
        messages.extend(await pull_queue(instance, queue))
    return messages


async def raw_records(instance: ClientInstance, queue: MessageQueue, offset: int) -> list[DecodedRecord]:
    """Stored records as the broker serves them (bodies not inflated)."""
    await routed(instance, queue)
    result = await _brokerapi.pull(
        instance, queue, "GID_reader", SubscriptionData(queue.topic), offset, 32, decode=False
    )
    return decode_records(result.body)


# ---------------------------------------------------------------------------------------------
# a real standalone server: the module's one (conftest's ``server``), each test with topics and groups of
# its own; a test that adds a broker to the cluster has a server of its own (``standalone``)


def test_send_and_pull_back_with_tags_keys_properties_and_unique_key(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with (
            Producer("PID_roundtrip", server.namesrv) as producer,
            reader(server.namesrv) as rd,
        ):
            results: list[SendResult] = []
            for i in range(6):
                message = Message(
                    "RoundTrip",
                    f"body-{i}".encode(),
                    tags="TagA",
                    keys=[f"order-{i}", "shared"],
                    properties={"color": f"blue-{i}", "unicode": "ünï €"},
                    flag=7,
                )
                results.append(await producer.send(message))
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert len({r.msg_id for r in results}) == 6
            got = {m.msg_id: m for m in await pull_topic(rd, "RoundTrip")}
            assert set(got) == {r.msg_id for r in results}
            for i, result in enumerate(results):
                message = got[result.msg_id]
                assert message.body == f"body-{i}".encode()
                assert message.tags == "TagA"
                assert message.keys == [f"order-{i}", "shared"]
                assert message.properties["color"] == f"blue-{i}"
                assert message.properties["unicode"] == "ünï €"
                assert message.properties["UNIQ_KEY"] == result.msg_id
                assert message.flag == 7
                assert message.sys_flag == 0
                assert message.offset_msg_id == result.offset_msg_id
                assert (message.queue, message.queue_offset) == (result.queue, result.queue_offset)

    run(scenario())


def test_a_unique_key_given_by_the_caller_is_kept(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with Producer("PID_uniq", server.namesrv) as producer, reader(server.namesrv) as rd:
            result = await producer.send(Message("KeepId", b"x", properties={"UNIQ_KEY": "MY-ID-1"}))
            assert result.msg_id == "MY-ID-1"
            (message,) = await pull_queue(rd, result.queue, result.queue_offset)
            assert message.msg_id == "MY-ID-1"

    run(scenario())


def test_keys_split_at_spaces_only_as_the_index_splits_them(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with (
            Producer("PID_keysplit", server.namesrv) as producer,
            reader(server.namesrv) as rd,
            AdminClient(server.namesrv) as admin,
        ):
            result = await producer.send(Message("KeySplit", b"x", keys="tab\tkey  line\nkey "))
            (message,) = await pull_queue(rd, result.queue, result.queue_offset)
            assert message.keys == ["tab\tkey", "line\nkey"]
            for key in message.keys:  # each key the message reports is one the broker finds it by
                assert [r.body for r in await admin.query_message("KeySplit", key)] == [b"x"]
            assert await admin.query_message("KeySplit", "tab") == []

    run(scenario())


def test_large_bodies_are_stored_zlib_compressed_and_read_back_equal(server: StandaloneServer) -> None:
    big = ("".join(string.ascii_letters) * 300).encode()  # 15 600 bytes, compressible
    threshold_body = b"t" * 4096
    below = b"b" * 4095

    async def scenario() -> None:
        async with Producer("PID_zip", server.namesrv) as producer, reader(server.namesrv) as rd:
            queue = MessageQueue("Zipped", "broker-a", 0)
            await producer.send(Message("Zipped", b"create the topic"), queue=queue)
            sent = [
                await producer.send(Message("Zipped", body), queue=queue)
                for body in (big, threshold_body, below)
            ]
            records = await raw_records(rd, queue, sent[0].queue_offset)
            assert [r.sys_flag & 0x1 for r in records] == [1, 1, 0]  # RocketMQ compresses at >= 4096
            assert records[0].body[:2] == b"\x78\x5e"  # zlib level 5, as Java and C++ write it
            assert zlib.decompress(records[0].body) == big and len(records[0].body) < len(big) // 10
            assert records[2].body == below
            received = await pull_queue(rd, queue, sent[0].queue_offset)
            assert [m.body for m in received] == [big, threshold_body, below]

    run(scenario())


def test_a_compressed_body_that_does_not_inflate_is_handed_over_as_stored_and_the_queue_goes_on(
    server: StandaloneServer, caplog: pytest.LogCaptureFixture
) -> None:
    bomb = zlib.compress(bytes(65 * 1024 * 1024), 9)  # inflates past the 64 MiB bound

    async def scenario() -> None:
        await send_to_queue(server, "BadZip", 0, [b"not zlib data", bomb], sys_flag=0x1)
        await send_to_queue(server, "BadZip", 0, [b"after"])
        async with reader(server.namesrv) as rd:
            received = await pull_queue(rd, MessageQueue("BadZip", "broker-a", 0), 0)
            assert [m.body for m in received] == [b"not zlib data", bomb, b"after"]

    run(scenario())
    warnings = [r.getMessage() for r in caplog.records if "handed over as stored" in r.getMessage()]
    assert len(warnings) == 2
    assert "message 0 of BadZip queue 0: compressed body does not inflate" in warnings[0]


def test_batch_is_stored_at_contiguous_offsets_with_each_message_intact(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with Producer("PID_batch", server.namesrv) as producer, reader(server.namesrv) as rd:
            first = [
                Message("Batched", f"m{i}".encode(), tags=f"T{i % 2}", keys=f"k{i}", properties={"n": str(i)})
                for i in range(10)
            ]
            result = await producer.send_batch(first)
            assert result.status is SendStatus.SEND_OK
            ids, offset_ids = result.msg_id.split(","), result.offset_msg_id.split(",")
            assert len(set(ids)) == 10 and len(offset_ids) == 10
            second = await producer.send_batch(
                [Message("Batched", f"n{i}".encode()) for i in range(5)], queue=result.queue
            )
            assert second.queue == result.queue
            assert second.queue_offset == result.queue_offset + 10
            stored = await pull_queue(rd, result.queue, result.queue_offset)
            assert [m.queue_offset for m in stored] == list(
                range(result.queue_offset, result.queue_offset + 15)
            )
            assert [m.body for m in stored] == [f"m{i}".encode() for i in range(10)] + [
                f"n{i}".encode() for i in range(5)
            ]
            for i, message in enumerate(stored[:10]):
                assert message.msg_id == ids[i] and message.offset_msg_id == offset_ids[i]
                assert message.tags == f"T{i % 2}" and message.keys == [f"k{i}"]
                assert message.properties["n"] == str(i)

    run(scenario())


def test_a_sharding_key_keeps_its_messages_on_one_queue_in_send_order(server: StandaloneServer) -> None:
    keys = [f"customer-{k}" for k in range(6)]

    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("Ordered", queues=4)
        async with Producer("PID_order", server.namesrv) as producer, reader(server.namesrv) as rd:
            queue_of: dict[str, set[MessageQueue]] = defaultdict(set)
            for seq in range(8):
                for key in keys:
                    result = await producer.send(
                        Message("Ordered", f"{key}:{seq}".encode()), sharding_key=key
                    )
                    queue_of[key].add(result.queue)
            assert all(len(queues) == 1 for queues in queue_of.values())
            assert len({q for queues in queue_of.values() for q in queues}) > 1  # keys spread over queues
            per_key: dict[str, list[tuple[MessageQueue, int, int]]] = defaultdict(list)
            for message in await pull_topic(rd, "Ordered"):
                key, seq = message.body.decode().split(":")
                per_key[key].append((message.queue, message.queue_offset, int(seq)))
            assert sorted(per_key) == keys
            route_queues, _ = await rd.publish_queues("Ordered")
            for key, entries in per_key.items():
                (queue,) = queue_of[key]
                assert queue == select_by_hash(route_queues, key)  # Java's String.hashCode, by default
                assert {e[0] for e in entries} == {queue}
                assert [seq for _, _, seq in sorted(entries)] == list(range(8))

    run(scenario())


def test_every_send_kind_puts_a_sharding_key_on_the_queue_the_selector_picks(
    server: StandaloneServer,
) -> None:
    def next_to_number(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
        # Not int(key) % len(queues): for "0".."3" and 4 queues, Java's hash picks just that.
        return queues[(int(key) + 1) % len(queues)]

    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("Selected", queues=4)
        producer = Producer("PID_selector", server.namesrv, queue_selector=next_to_number)
        async with producer, reader(server.namesrv) as rd:
            for seq in range(3):
                for key in "0123":
                    await producer.send(Message("Selected", f"{key}:send-{seq}".encode()), sharding_key=key)
                    batch = [Message("Selected", f"{key}:batch-{seq}-{i}".encode()) for i in range(2)]
                    await producer.send_batch(batch, sharding_key=key)
                    await producer.send_oneway(
                        Message("Selected", f"{key}:oneway-{seq}".encode()), sharding_key=key
                    )
                    done: asyncio.Future[SendResult | BaseException] = (
                        asyncio.get_running_loop().create_future()
                    )
                    producer.send_with_callback(
                        Message("Selected", f"{key}:callback-{seq}".encode()),
                        done.set_result,
                        sharding_key=key,
                    )
                    assert isinstance(await done, SendResult)
            route_queues, _ = await rd.publish_queues("Selected")
            for key in "0123":
                expected = [
                    f"{key}:{kind}-{seq}{part}"
                    for seq in range(3)
                    for kind, part in (
                        ("send", ""),
                        ("batch", "-0"),
                        ("batch", "-1"),
                        ("oneway", ""),
                        ("callback", ""),
                    )
                ]

                async def stored(
                    queue: MessageQueue = route_queues[(int(key) + 1) % 4], count: int = len(expected)
                ) -> list[str] | None:
                    bodies = [m.body.decode() for m in await pull_queue(rd, queue)]
                    return bodies if len(bodies) >= count else None

                # The selector's queue holds the key's messages, in send order, and nothing else.
                assert await wait_until(stored, message=f"the messages of key {key}") == expected

            def elsewhere(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
                return MessageQueue("NotSelected", queues[0].broker_name, 0)

            producer.queue_selector = elsewhere
            with pytest.raises(InvalidMessageError, match="NotSelected"):
                await producer.send(Message("Selected", b"x"), sharding_key="1")

    run(scenario())


def test_a_delayed_message_is_parked_then_delivered_to_its_topic(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with Producer("PID_delay", server.namesrv) as producer, reader(server.namesrv) as rd:
            result = await producer.send(
                Message("Later", b"wait a second", tags="Late", keys="k-late", delay_level=1)
            )
            # Parked in SCHEDULE_TOPIC_XXXX queue level - 1 with DELAY and the real destination.
            parked = await pull_queue(rd, MessageQueue(SCHEDULE_TOPIC, result.queue.broker_name, 0))
            (mine,) = [m for m in parked if m.properties.get("UNIQ_KEY") == result.msg_id]
            assert mine.properties["DELAY"] == "1"
            assert mine.properties["REAL_TOPIC"] == "Later"
            assert mine.properties["REAL_QID"] == str(result.queue.queue_id)

            async def delivered() -> list[ReceivedMessage]:
                return await pull_queue(rd, result.queue)

            (message,) = await wait_until(delivered, message="delivery of the level-1 message")
            assert message.msg_id == result.msg_id and message.body == b"wait a second"
            assert message.tags == "Late" and message.keys == ["k-late"]
            assert "DELAY" not in message.properties
            assert message.store_timestamp - message.born_timestamp >= 1000  # level 1 = 1 s

    run(scenario())


def test_a_delay_level_above_the_brokers_highest_is_sent_and_the_broker_caps_it(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        async with Producer("PID_cap", server.namesrv) as producer, reader(server.namesrv) as rd:
            result = await producer.send(Message("LaterStill", b"capped", delay_level=25))
            # The default table has 18 levels: parked in the queue of level 18 (2 h).
            parked = await pull_queue(rd, MessageQueue(SCHEDULE_TOPIC, result.queue.broker_name, 17))
            assert [m.body for m in parked if m.properties.get("UNIQ_KEY") == result.msg_id] == [b"capped"]

    run(scenario())


def test_oneway_and_callback_sends_are_delivered(server: StandaloneServer) -> None:
    async def scenario() -> None:
        outcomes: list[SendResult | BaseException] = []
        async with Producer("PID_async", server.namesrv) as producer, reader(server.namesrv) as rd:
            await producer.send(Message("Fire", b"first"))  # creates the topic
            for i in range(10):
                await producer.send_oneway(Message("Fire", f"oneway-{i}".encode()))
            for i in range(10):
                assert (
                    producer.send_with_callback(Message("Fire", f"callback-{i}".encode()), outcomes.append)
                    is None
                )
            await wait_until(lambda: len(outcomes) == 10, message="10 callbacks")
            assert all(isinstance(o, SendResult) and o.status is SendStatus.SEND_OK for o in outcomes)

            async def everything() -> list[bytes] | None:
                bodies = sorted(m.body for m in await pull_topic(rd, "Fire"))
                return bodies if len(bodies) == 21 else None

            bodies = await wait_until(everything, message="21 stored messages")
            expected = [b"first"] + [f"oneway-{i}".encode() for i in range(10)]
            expected += [f"callback-{i}".encode() for i in range(10)]
            assert bodies == sorted(expected)
            callback_ids = {o.msg_id for o in outcomes if isinstance(o, SendResult)}
            stored_ids = {m.msg_id for m in await pull_topic(rd, "Fire") if m.body.startswith(b"callback-")}
            assert callback_ids == stored_ids

    run(scenario())


def test_close_waits_for_callback_sends(server: StandaloneServer) -> None:
    async def scenario() -> None:
        outcomes: list[SendResult | BaseException] = []
        producer = Producer("PID_close", server.namesrv)
        await producer.start()
        for i in range(5):
            producer.send_with_callback(Message("CloseWait", f"m{i}".encode()), outcomes.append)
        await producer.close()
        assert len(outcomes) == 5 and all(isinstance(o, SendResult) for o in outcomes)
        with pytest.raises(ClientStateError, match="closed"):
            await producer.send(Message("CloseWait", b"late"))

    run(scenario())


def _start_broker(tmp_path: Path, namesrv: str, name: str) -> ServerProcess:
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF)
    args = ["broker", "--namesrv-addr", namesrv, "-c", str(conf), "--data-dir", str(tmp_path / name)]
    args += ["--host", "127.0.0.1", "--port", "0", "--broker-name", name]
    broker = ServerProcess(args, tmp_path / f"{name}.log")
    try:
        broker.wait_ready("CometMQ broker ready:")
    except BaseException:
        broker.terminate()
        raise
    return broker


def test_sends_go_to_the_other_broker_when_one_stops(standalone: StandaloneServer, tmp_path: Path) -> None:
    broker_b = _start_broker(tmp_path, standalone.namesrv, "broker-b")
    try:

        async def scenario() -> None:
            async with AdminClient(standalone.namesrv) as admin:
                brokers = await admin.create_topic("Spread", queues=2)
                assert sorted(b.broker_name for b in brokers) == ["broker-a", "broker-b"]
            avoiding = Producer("PID_spread", standalone.namesrv)
            # Without fault avoidance every send that picks broker-b must be retried on broker-a.
            plain = Producer("PID_spread_plain", standalone.namesrv, fault_avoidance=False)
            async with avoiding, plain:
                for producer in (avoiding, plain):
                    used = {
                        (await producer.send(Message("Spread", b"warm"))).queue.broker_name for _ in range(8)
                    }
                    assert used == {"broker-a", "broker-b"}  # the route (both brokers) is cached
                assert broker_b.terminate() == 0
                for producer in (avoiding, plain):
                    results = [
                        await producer.send(Message("Spread", f"after-{i}".encode())) for i in range(12)
                    ]
                    assert {r.queue.broker_name for r in results} == {"broker-a"}
                    assert all(r.status is SendStatus.SEND_OK for r in results)
                assert not avoiding._faults.is_available("broker-b")  # learnt from the failed attempt
            async with reader(standalone.namesrv) as rd:
                stored = [m.body for m in await pull_topic(rd, "Spread") if m.body.startswith(b"after-")]
                assert sorted(stored) == sorted(f"after-{i}".encode() for i in range(12) for _ in range(2))

        run(scenario())
    finally:
        broker_b.terminate()


# ---------------------------------------------------------------------------------------------
# client-side validation: nothing reaches the network


def test_invalid_messages_raise_before_any_network_io() -> None:
    async def scenario() -> None:
        # Nothing listens there: any message that got as far as the network would fail to connect.
        producer = Producer("PID_invalid", f"127.0.0.1:{free_port()}", max_message_size=1024)
        with pytest.raises(ClientStateError, match="not started"):
            await producer.send(Message("T", b"x"))
        async with producer:
            cases: list[tuple[Message, type[Exception], str]] = [
                (Message("bad topic!", b"x"), InvalidMessageError, "illegal characters"),
                (Message("", b"x"), InvalidMessageError, "blank"),
                (Message("T" * 128, b"x"), InvalidMessageError, "longer than topic max length"),
                (Message(SCHEDULE_TOPIC, b"x"), InvalidMessageError, "system topic"),
                (Message("T", b""), InvalidMessageError, "body is empty"),
                (Message("T", b"x" * 1025), MessageTooLargeError, "1025 bytes, over max_message_size 1024"),
                (
                    Message("T", b"x", properties={"TAGS": "a"}),
                    InvalidMessageError,
                    r"\['TAGS'\] are reserved",
                ),
                (Message("T", b"x", properties={"DELAY": "1"}), InvalidMessageError, "reserved"),
                (Message("T", b"x", properties={" ": "v"}), InvalidMessageError, "must not be blank"),
                (Message("T", b"x", delay_level=-1), InvalidMessageError, "delay level -1 is negative"),
                (Message("T", b"x", tags="a\x01b"), InvalidMessageError, "must not contain"),
                (Message("T", b"x", properties={"k": "a\x02b"}), InvalidMessageError, "must not contain"),
                (Message("T", b"x", keys="k" * 40000), InvalidMessageError, "properties .* take"),
            ]
            for message, error, text in cases:
                with pytest.raises(error, match=text):
                    await producer.send(message)
                with pytest.raises(error, match=text):
                    producer.send_with_callback(message, lambda _: None)
                with pytest.raises(error, match=text):
                    await producer.send_oneway(message)
            batches: list[tuple[list[Message], type[Exception], str]] = [
                ([], InvalidMessageError, "at least one message"),
                ([Message("A", b"x"), Message("B", b"x")], InvalidMessageError, "one topic"),
                ([Message("A", b"x", delay_level=2)], InvalidMessageError, "cannot be delayed"),
                ([Message("A", b"x"), Message("A", b"")], InvalidMessageError, "message 1 .* empty body"),
                ([Message("%RETRY%G", b"x")], InvalidMessageError, "retry topics"),
                (
                    [Message("A", b"x" * 600), Message("A", b"x" * 600)],
                    MessageTooLargeError,
                    "smaller batches",
                ),
                ([Message("A", b"x", tags="\x02")], InvalidMessageError, "must not contain"),
            ]
            for batch, error, text in batches:
                with pytest.raises(error, match=text):
                    await producer.send_batch(batch)
            with pytest.raises(InvalidMessageError, match="queue is of 'Other'"):
                await producer.send(Message("T", b"x"), queue=MessageQueue("Other", "broker-a", 0))
            # A valid message does reach the network, which is not there.
            with pytest.raises(ConnectionClosedError):
                await producer.send(Message("T", b"x"))

    run(scenario())


def test_a_bad_producer_group_is_refused() -> None:
    with pytest.raises(Exception, match="illegal characters"):
        Producer("bad group", "127.0.0.1:9876")
    with pytest.raises(Exception, match="blank"):
        Producer("", "127.0.0.1:9876")


def test_store_statuses_map_to_send_status() -> None:
    async def scenario() -> None:
        script = [Code.FLUSH_DISK_TIMEOUT, Code.FLUSH_SLAVE_TIMEOUT, Code.SLAVE_NOT_AVAILABLE, Code.SUCCESS]
        async with scripted(script) as (namesrv, broker), Producer("PID_s", namesrv) as producer:
            statuses = [(await producer.send(Message("Scripted", b"x"))).status for _ in range(4)]
            assert statuses == [
                SendStatus.FLUSH_DISK_TIMEOUT,
                SendStatus.FLUSH_SLAVE_TIMEOUT,
                SendStatus.SLAVE_NOT_AVAILABLE,
                SendStatus.SEND_OK,
            ]
            assert len(broker.sends) == 4  # a stored-but-not-safe message is not sent again

    run(scenario())


def test_a_malformed_send_answer_is_a_protocol_error_naming_the_field() -> None:
    async def scenario() -> None:
        async with scripted([MALFORMED]) as (namesrv, broker), Producer("PID_m", namesrv) as producer:
            with pytest.raises(ProtocolError, match="queueOffset='later' is not a Java long"):
                await producer.send(Message("Scripted", b"x"))
            assert len(broker.sends) == 1  # stored or not, it is not the producer's to send again
            assert (await producer.send(Message("Scripted", b"y"))).status is SendStatus.SEND_OK

    run(scenario())


def test_send_header_is_the_v2_one_letter_header() -> None:
    async def scenario() -> None:
        async with scripted([]) as (namesrv, broker), Producer("PID_h", namesrv) as producer:
            result = await producer.send(Message("Scripted", b"x" * 5000, tags="T", flag=3))
            await producer.send_batch([Message("Scripted", b"a"), Message("Scripted", b"b")])
            single, batch = broker.sends
            assert single.code == RequestCode.SEND_MESSAGE_V2 and batch.code == RequestCode.SEND_BATCH_MESSAGE
            fields = single.ext_fields
            assert (fields["a"], fields["b"], fields["c"], fields["d"]) == (
                "PID_h",
                "Scripted",
                "TBW102",
                "4",
            )
            assert fields["e"] == str(result.queue.queue_id)
            assert (fields["f"], fields["h"], fields["j"], fields["k"], fields["m"]) == (
                "1",
                "3",
                "0",
                "false",
                "false",
            )
            assert abs(int(fields["g"]) - time.time() * 1000) < 600_000  # bornTimestamp, ms
            assert decode_properties(fields["i"]) == {"UNIQ_KEY": result.msg_id, "TAGS": "T"}
            assert zlib.decompress(single.body) == b"x" * 5000
            assert batch.ext_fields["m"] == "true" and batch.ext_fields["f"] == "0"
            assert [e.body for e in decode_batch_body(batch.body)] == [b"a", b"b"]

    run(scenario())


def test_retried_codes_are_retried_and_others_raise_at_once() -> None:
    async def scenario() -> None:
        retried = [Code.SERVICE_NOT_AVAILABLE, Code.SYSTEM_ERROR]
        async with scripted(retried) as (namesrv, broker), Producer("PID_r", namesrv) as producer:
            result = await producer.send(Message("Scripted", b"x"))
            assert result.status is SendStatus.SEND_OK
            assert len(broker.sends) == 3  # two refusals RocketMQ retries, then success
            assert {r.ext_fields["i"] for r in broker.sends} == {broker.sends[0].ext_fields["i"]}  # same id
        async with (
            scripted([Code.NO_PERMISSION] * 3) as (namesrv, broker),
            Producer("PID_r", namesrv, retry_times=2) as producer,
        ):
            with pytest.raises(BrokerError) as failure:
                await producer.send(Message("Scripted", b"x"))
            assert failure.value.code == Code.NO_PERMISSION
            assert "failed 3 time(s)" in "\n".join(failure.value.__notes__)
            assert len(broker.sends) == 3
        async with (
            scripted([Code.MESSAGE_ILLEGAL]) as (namesrv, broker),
            Producer("PID_r", namesrv) as producer,
        ):
            with pytest.raises(BrokerError, match="scripted failure 13") as failure:
                await producer.send(Message("Scripted", b"x"))
            assert failure.value.code == Code.MESSAGE_ILLEGAL
            assert len(broker.sends) == 1  # not a code RocketMQ retries
        async with (
            scripted([Code.SERVICE_NOT_AVAILABLE]) as (namesrv, broker),
            Producer("PID_r", namesrv) as producer,
        ):
            with pytest.raises(BrokerError):
                await producer.send(Message("Scripted", b"x"), sharding_key="k")
            assert len(broker.sends) == 1  # ordered sends are never retried elsewhere

    run(scenario())


def test_a_callback_send_is_written_before_send_with_callback_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[int] = []
    send = Connection.send

    def spy(self: Connection, cmd: RemotingCommand) -> None:
        written.append(cmd.code)
        send(self, cmd)

    monkeypatch.setattr(Connection, "send", spy)

    async def scenario() -> None:
        async with scripted([]) as (namesrv, broker), Producer("PID_w", namesrv) as producer:
            outcomes: list[SendResult | BaseException] = []
            # No route yet: the send's task looks it up and connects, so nothing is written now.
            producer.send_with_callback(Message("Scripted", b"first"), outcomes.append)
            assert RequestCode.SEND_MESSAGE_V2 not in written
            await wait_until(lambda: outcomes, message="the first callback")
            written.clear()
            # Route and connection known: the request is on the socket when the call returns.
            producer.send_with_callback(Message("Scripted", b"second"), outcomes.append)
            assert written == [RequestCode.SEND_MESSAGE_V2]
            await wait_until(lambda: len(outcomes) == 2, message="the second callback")
            assert all(isinstance(o, SendResult) and o.status is SendStatus.SEND_OK for o in outcomes)
            assert [r.body for r in broker.sends] == [b"first", b"second"]

    run(scenario())


def test_a_callback_send_written_at_once_is_retried_like_any_other() -> None:
    async def scenario() -> None:
        outcomes: list[SendResult | BaseException] = []
        refusals = [Code.SYSTEM_ERROR, Code.SERVICE_NOT_AVAILABLE]
        async with (
            scripted([Code.SUCCESS, *refusals]) as (namesrv, broker),
            Producer("PID_c", namesrv) as producer,
        ):
            await producer.send(Message("Scripted", b"route"))  # route and connection known from here
            producer.send_with_callback(Message("Scripted", b"x"), outcomes.append)
            await wait_until(lambda: outcomes, message="the callback")
            (result,) = outcomes
            assert isinstance(result, SendResult) and result.status is SendStatus.SEND_OK
            assert len(broker.sends) == 4  # the first send, then two refusals RocketMQ retries, then success
            assert {r.ext_fields["i"] for r in broker.sends[1:]} == {
                broker.sends[1].ext_fields["i"]
            }  # same id
        async with (
            scripted([Code.SUCCESS] + [Code.NO_PERMISSION] * 3) as (namesrv, broker),
            Producer("PID_c", namesrv, retry_times=2) as producer,
        ):
            await producer.send(Message("Scripted", b"route"))
            outcomes.clear()
            producer.send_with_callback(Message("Scripted", b"x"), outcomes.append)
            await wait_until(lambda: outcomes, message="the callback")
            (failure,) = outcomes
            assert isinstance(failure, BrokerError) and failure.code == Code.NO_PERMISSION
            assert "failed 3 time(s)" in "\n".join(failure.__notes__)
            assert len(broker.sends) == 4
        async with (
            scripted([Code.SUCCESS, DROP]) as (namesrv, broker),
            Producer("PID_c", namesrv) as producer,
        ):
            await producer.send(Message("Scripted", b"route"))
            outcomes.clear()
            producer.send_with_callback(Message("Scripted", b"x"), outcomes.append)
            await wait_until(lambda: outcomes, message="the callback")
            (result,) = outcomes
            # The written attempt's connection closed: the message goes again, on a new connection
            # (this broker is the only one), with the same id.
            assert isinstance(result, SendResult) and result.status is SendStatus.SEND_OK
            assert len(broker.sends) == 3
            assert broker.sends[1].ext_fields["i"] == broker.sends[2].ext_fields["i"]

    run(scenario())


def test_a_callback_send_that_cannot_be_written_reaches_the_callback() -> None:
    async def scenario() -> None:
        outcomes: list[SendResult | BaseException] = []
        big_options: dict[str, Any] = {"compress_over": 1 << 30, "max_message_size": 1 << 30}
        async with scripted([]) as (namesrv, broker), Producer("PID_big", namesrv, **big_options) as producer:
            await producer.send(Message("Scripted", b"route"))
            # Over the 16 MiB frame limit: refused by the frame encoder, after the producer's checks.
            producer.send_with_callback(Message("Scripted", bytes(MAX_FRAME_SIZE)), outcomes.append)
            await wait_until(lambda: outcomes, message="the callback")
            (failure,) = outcomes
            assert isinstance(failure, ProtocolError) and "exceeds" in str(failure)
            assert len(broker.sends) == 1

    run(scenario())


# ---------------------------------------------------------------------------------------------
# the batch body encoder against protocol/batch.py's decoder

_names = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12).filter(
    lambda n: n not in RESERVED_PROPERTIES and n != "UNIQ_KEY"
)
_values = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
_tags = st.one_of(
    st.none(),
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10
    ),
)
_messages = st.builds(
    Message,
    topic=st.just("Batch"),
    body=st.binary(min_size=1, max_size=64),
    tags=_tags,
    keys=st.one_of(st.none(), st.lists(_names, min_size=1, max_size=3)),
    properties=st.dictionaries(_names, _values, max_size=4),
    flag=st.integers(-(2**31), 2**31 - 1),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=8))
def test_batch_body_round_trips_through_the_broker_decoder(messages: list[Message]) -> None:
    producer = Producer("PID_hyp", "127.0.0.1:9876")
    topic, parts, size, ids = producer._encode_batch(messages)
    body = b"".join(parts)
    assert topic == "Batch" and size == len(body)
    entries = decode_batch_body(body)
    assert len(entries) == len(messages) and len(set(ids)) == len(ids)
    for entry, message, uniq in zip(entries, messages, ids, strict=True):
        assert entry.body == message.body and entry.flag == message.flag
        expected = {**message.properties, "UNIQ_KEY": uniq}
        if message.tags:
            expected["TAGS"] = message.tags
        if message.keys:
            expected["KEYS"] = " ".join(message.keys)
        assert decode_properties(entry.properties) == expected


@pytest.mark.parametrize("group", ["", "bad group", "G" * 256])
def test_an_illegal_producer_group_is_refused_when_the_producer_is_made(group: str) -> None:
    with pytest.raises(CometMQError, match=r"producer group .*: The specified name"):
        Producer(group, "127.0.0.1:9876")
