"""Inner-batch topics (``queue.type`` BatchCQ) end to end against a real `cometmq standalone`: a batch
stored as one record covering N offsets, split by CometMQ's consumers with every per-message offset
exact (poll, seek into a batch, read ranges that cut batches, commit, offsets, the time search), what a
4.x-style pull sees, and ordinary topics unchanged."""

from __future__ import annotations

from collections import Counter

from client_support import poll_until, run

from cometmq.client import (
    AdminClient,
    ConsumeResult,
    LitePullConsumer,
    Message,
    Producer,
    PushConsumer,
    _brokerapi,
    blocking,
)
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.errors import CometMQError
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, decode_records
from cometmq.protocol.subscription import SubscriptionData
from processes import StandaloneServer
from waiting import wait_until


async def create_batch_topic(server: StandaloneServer, topic: str, queues: int = 1) -> None:
    async with AdminClient(server.namesrv) as admin:
        await admin.create_topic(topic, queues, attributes="+queue.type=BatchCQ")


async def send_batches(server: StandaloneServer, topic: str, batches: int, size: int) -> list[int]:
    """Send *batches* batches of *size* messages to queue 0; the queue offsets the results name."""
    offsets = []
    async with Producer("PID_inner_batch", server.namesrv) as producer:
        queue = (await producer.fetch_publish_queues(topic))[0]
        for b in range(batches):
            msgs = [
                Message(topic, b"b%d-m%d" % (b, i), tags=f"t{i % 2}", keys=[f"k{b}-{i}"]) for i in range(size)
            ]
            result = await producer.send_batch(msgs, queue=queue)
            offsets.append(result.queue_offset)
    return offsets


def bodies(first: int, end: int, size: int = 10) -> list[bytes]:
    return [b"b%d-m%d" % divmod(offset, size) for offset in range(first, end)]


def test_a_batch_is_one_record_and_consumers_get_each_message_at_its_own_offset(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbPoll")
        assert await send_batches(server, "IbPoll", 3, 10) == [0, 10, 20]
        async with LitePullConsumer("GID_ib_poll", server.namesrv, consume_from="first") as consumer:
            (queue,) = await consumer.fetch_queues("IbPoll")
            assert (await consumer.begin_offset(queue), await consumer.end_offset(queue)) == (0, 30)
            consumer.assign([queue])
            got = await poll_until(consumer, 30)
            assert [m.queue_offset for m in got] == list(range(30))
            assert [m.body for m in got] == bodies(0, 30)
            assert [m.tags for m in got] == [f"t{i % 2}" for i in range(10)] * 3
            assert got[13].keys == ["k1-3"]
            assert all(m.is_inner_batch for m in got)
            # Each message has its own UNIQ_KEY; the ten of a batch share the record's offset id.
            assert len({m.msg_id for m in got}) == 30
            assert len({m.offset_msg_id for m in got}) == 3
            assert consumer.position(queue) == 30

            consumer.seek(queue, 13)  # inside the second batch
            again = await poll_until(consumer, 17)
            assert [m.queue_offset for m in again] == list(range(13, 30))
            assert [m.body for m in again] == bodies(13, 30)

    run(scenario())


def test_read_ranges_that_start_and_end_inside_batches_are_exact(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbRead")
        await send_batches(server, "IbRead", 4, 10)
        async with LitePullConsumer("GID_ib_read", server.namesrv) as consumer:
            (queue,) = await consumer.fetch_queues("IbRead")
            for start, end in [(5, 17), (0, 40), (10, 20), (39, 40), (12, 13)]:
                read = [m async for batch in consumer.read(queue, start, end, max_batch=4) for m in batch]
                assert [m.queue_offset for m in read] == list(range(start, end)), (start, end)
                assert [m.body for m in read] == bodies(start, end)

    run(scenario())


def test_commit_inside_a_batch_resumes_at_the_committed_message(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbCommit")
        await send_batches(server, "IbCommit", 2, 10)
        group = "GID_ib_commit"
        async with LitePullConsumer(group, server.namesrv, auto_commit=False, consume_from="first") as first:
            (queue,) = await first.fetch_queues("IbCommit")
            first.assign([queue])
            await poll_until(first, 20)
            await first.commit({queue: 7})
        async with LitePullConsumer(group, server.namesrv, auto_commit=False) as second:
            second.assign([queue])
            resumed = await poll_until(second, 13)
            assert [m.queue_offset for m in resumed] == list(range(7, 20))
        async with AdminClient(server.namesrv) as admin:
            (progress,) = (await admin.consume_progress(group, "IbCommit")).queues
            assert (progress.broker_offset, progress.consumer_offset, progress.lag) == (20, 7, 13)

    run(scenario())


def test_the_time_search_answers_the_first_offset_of_a_batch(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbTime")
        await send_batches(server, "IbTime", 3, 10)
        async with LitePullConsumer("GID_ib_time", server.namesrv, consume_from="first") as consumer:
            (queue,) = await consumer.fetch_queues("IbTime")
            consumer.assign([queue])
            got = await poll_until(consumer, 30)
            stamps = [got[0].store_timestamp, got[10].store_timestamp, got[20].store_timestamp]
            assert all(m.store_timestamp == stamps[m.queue_offset // 10] for m in got)
            offset = await consumer.offset_for_timestamp(queue, stamps[2])
            assert offset in (10, 19, 20) if stamps[1] == stamps[2] else offset == 20
            assert await consumer.offset_for_timestamp(queue, stamps[2] + 1000) == 29

    run(scenario())


def test_a_plain_pull_gets_the_batch_record_whole_as_a_4x_client_does(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbRaw")
        await send_batches(server, "IbRaw", 2, 10)
        async with LitePullConsumer("GID_ib_raw", server.namesrv) as consumer:
            (queue,) = await consumer.fetch_queues("IbRaw")
            result = await _brokerapi.pull(
                consumer.instance, queue, "GID_ib_raw", SubscriptionData("IbRaw"), 15, 32, decode=False
            )
            records = decode_records(bytes(result.body))
            assert [r.queue_offset for r in records] == [10]
            (record,) = records
            assert (
                record.sys_flag & (INNER_BATCH_FLAG | NEED_UNWRAP_FLAG) == INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
            )
            properties = decode_properties(record.properties)
            assert (properties["INNER_NUM"], properties["INNER_BASE"]) == ("10", "10")
            assert result.next_begin_offset == 20

    run(scenario())


def test_a_batch_to_an_ordinary_topic_stays_a_record_per_message(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("IbPlain", 1)
        await send_batches(server, "IbPlain", 1, 5)
        async with LitePullConsumer("GID_ib_plain", server.namesrv, consume_from="first") as consumer:
            (queue,) = await consumer.fetch_queues("IbPlain")
            consumer.assign([queue])
            got = await poll_until(consumer, 5)
            assert [m.queue_offset for m in got] == list(range(5))
            assert not any(m.is_inner_batch for m in got)
            assert len({m.offset_msg_id for m in got}) == 5
            assert len({m.msg_id for m in got}) == 5

    run(scenario())


def test_queue_type_cannot_change_once_the_topic_exists(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_batch_topic(server, "IbFixed")
        async with AdminClient(server.namesrv) as admin:
            try:
                await admin.create_topic("IbFixed", 1, attributes="+queue.type=SimpleCQ")
            except Exception as exc:  # the broker refuses: the queues' files differ
                assert "unchangeable attribute queue.type" in str(exc)
            else:
                raise AssertionError("queue.type was changed")

    run(scenario())


def test_one_failing_message_of_a_batch_is_retried_alone_then_dead_lettered(
    quick_retries: StandaloneServer,
) -> None:
    async def scenario() -> None:
        server = quick_retries
        group = "GID_ib_retry"
        await create_batch_topic(server, "IbRetry")
        await send_batches(server, "IbRetry", 2, 10)
        deliveries: list[ReceivedMessage] = []

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            deliveries.extend(messages)
            failing = any(m.body == b"b1-m3" for m in messages)
            return ConsumeResult.RECONSUME_LATER if failing else ConsumeResult.SUCCESS

        # A message of an inner batch goes back as a copy (RocketMQ's sendMessageBackAsNormalMessage); its
        # retries come back as ordinary messages: with 2, two retries, then the DLQ.
        consumer = PushConsumer(group, server.namesrv, consume_from="first", max_reconsume_times=2)
        consumer.subscribe("IbRetry", "*")
        consumer.listen(listener)
        async with consumer, LitePullConsumer("GID_ib_dlq_reader", server.namesrv) as reader:
            await wait_until(
                lambda: [m.reconsume_times for m in deliveries if m.body == b"b1-m3"] == [0, 1, 2],
                message="the failing message delivered, then retried twice",
            )

            async def dead_letter_queue() -> MessageQueue | None:
                try:
                    (queue,) = await reader.fetch_queues(f"%DLQ%{group}")
                except CometMQError:  # not routed yet
                    return None
                return queue if await reader.end_offset(queue) == 1 else None

            dlq = await wait_until(dead_letter_queue, message="the message in the DLQ")
            others = Counter(m.body for m in deliveries if m.body != b"b1-m3")
            assert others == Counter(bodies(0, 20)) - Counter([b"b1-m3"])
            original, retried, _ = [m for m in deliveries if m.body == b"b1-m3"]
            assert original.queue_offset == 13
            assert retried.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
            assert retried.tags == "t1" and retried.keys == ["k1-3"]
            (dead,) = [m async for batch in reader.read(dlq, 0, 1) for m in batch]
            assert dead.body == b"b1-m3"
            assert not dead.is_inner_batch

    run(scenario())


def test_a_tag_subscription_gets_no_inner_batch_as_with_rocketmq(server: StandaloneServer) -> None:
    """RocketMQ's broker filters a batch unit by the record's own tag (a batch carries none), and its
    client filters the split messages again: a tag subscription gets no message of an inner batch, a
    subscription to everything gets all. A single message to the topic is its own record with its tag."""

    async def scenario() -> None:
        await create_batch_topic(server, "IbTags")
        await send_batches(server, "IbTags", 1, 10)
        async with Producer("PID_ib_tags", server.namesrv) as producer:
            await producer.send(Message("IbTags", b"single", tags="t1"))
        async with LitePullConsumer("GID_ib_tags", server.namesrv, consume_from="first") as tagged:
            tagged.subscribe("IbTags", "t1")
            got = await poll_until(tagged, 1)
            assert [(m.body, m.queue_offset, m.is_inner_batch) for m in got] == [(b"single", 10, False)]
        async with LitePullConsumer("GID_ib_all", server.namesrv, consume_from="first") as everything:
            everything.subscribe("IbTags", "*")
            got = await poll_until(everything, 11)
            assert [m.queue_offset for m in got] == list(range(11))

    run(scenario())


def test_the_blocking_facade_sends_and_reads_inner_batches(server: StandaloneServer) -> None:
    run(create_batch_topic(server, "IbBlocking"))
    with blocking.Producer("PID_ib_blocking", server.namesrv) as producer:
        (queue,) = producer.fetch_publish_queues("IbBlocking")
        sent = producer.send_batch([Message("IbBlocking", b"x%d" % i) for i in range(6)], queue=queue)
        assert sent.queue_offset == 0
    with blocking.LitePullConsumer("GID_ib_blocking", server.namesrv) as consumer:
        (queue,) = consumer.fetch_queues("IbBlocking")
        read = [m for batch in consumer.read(queue, 2, 5) for m in batch]
        assert [(m.queue_offset, m.body) for m in read] == [(2, b"x2"), (3, b"x3"), (4, b"x4")]


def test_a_producer_without_inner_batches_sends_a_batch_as_messages_with_their_own_ids(
    server: StandaloneServer,
) -> None:
    """``inner_batches=False`` (for Apache RocketMQ brokers) sends no batch UNIQ_KEY: even a BatchCQ topic
    stores such a batch one record per message, each with its own id, as RocketMQ stores it."""

    async def scenario() -> None:
        await create_batch_topic(server, "IbNoInner")
        async with Producer("PID_ib_no_inner", server.namesrv, inner_batches=False) as producer:
            (queue,) = await producer.fetch_publish_queues("IbNoInner")
            sent = [Message("IbNoInner", b"m%d" % i) for i in range(4)]
            await producer.send_batch(sent, queue=queue)
        async with LitePullConsumer("GID_ib_no_inner", server.namesrv, consume_from="first") as consumer:
            consumer.assign([queue])
            got = await poll_until(consumer, 4)
            assert [(m.queue_offset, m.body) for m in got] == [(i, b"m%d" % i) for i in range(4)]
            assert not any(m.is_inner_batch for m in got)
            assert len({m.offset_msg_id for m in got}) == len({m.msg_id for m in got}) == 4

    run(scenario())
