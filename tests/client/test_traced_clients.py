"""Message trace (``trace=True``) against a real `cometmq standalone`: the records sends, consumed
batches and transactions leave in the trace topic, read back through AdminClient.message_trace."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest
from client_support import run

from cometmq.client import (
    AdminClient,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TransactionProducer,
    TransactionState,
    blocking,
)
from cometmq.client._trace import CLOSE_MAX_S, TraceDispatcher
from cometmq.errors import OptionError
from cometmq.protocol.naming import TRACE_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.trace import MessageType, TraceBean, TraceContext, TraceType
from processes import TEST_BROKER_CONF, ServerProcess, broker_address, start_standalone
from traced_messages import poll_until_some
from waiting import wait_until


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A standalone server (its trace topic on) whose retries come back after 1 s."""
    conf = tmp_path_factory.mktemp("conf") / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "messageDelayLevel=1s 1s 1s 1s 1s\n")
    server, namesrv = start_standalone(tmp_path_factory.mktemp("traced") / "data", conf)
    yield server, namesrv
    server.terminate()


@pytest.fixture
def namesrv(traced_server: tuple[ServerProcess, str]) -> str:
    return traced_server[1]


async def records(
    namesrv: str, msg_id: str, *kinds: TraceType, topic: str = TRACE_TOPIC
) -> list[TraceContext]:
    """The trace of ``msg_id`` once it holds a record of each of ``kinds`` (as many as listed)."""

    async def complete() -> list[TraceContext] | None:
        found = await admin.message_trace(msg_id, topic)
        got = [ctx.trace_type for ctx in found]
        return found if all(got.count(kind) >= list(kinds).count(kind) for kind in kinds) else None

    async with AdminClient(namesrv) as admin:
        return await wait_until(complete, message=f"trace records {kinds} of {msg_id}")


def only(contexts: list[TraceContext], kind: TraceType) -> list[TraceContext]:
    return [ctx for ctx in contexts if ctx.trace_type is kind]


def bean(ctx: TraceContext) -> TraceBean:
    (one,) = ctx.beans
    return one


def test_a_send_and_its_consumption_with_a_retry_are_traced(traced_server: tuple[ServerProcess, str]) -> None:
    server, namesrv = traced_server

    async def go() -> None:
        async with Producer("PID_traced", namesrv, trace=True) as producer:
            sent = await producer.send(
                Message("TracedOrders", b"order 1", tags="created", keys=["o-1", "alice"])
            )
        calls: list[int] = []

        def listen(messages: list[ReceivedMessage]) -> ConsumeResult:
            calls.append(messages[0].reconsume_times)
            return ConsumeResult.RECONSUME_LATER if len(calls) == 1 else ConsumeResult.SUCCESS

        consumer = PushConsumer("GID_traced", namesrv, consume_from="first", trace=True)
        consumer.subscribe("TracedOrders")
        consumer.listen(listen)
        async with consumer:
            await wait_until(lambda: len(calls) >= 2, message="the message consumed again after a failure")
        trace = await records(
            namesrv, sent.msg_id, TraceType.Pub, TraceType.SubBefore, TraceType.SubBefore,
            TraceType.SubAfter, TraceType.SubAfter,
        )  # fmt: skip

        (pub,) = only(trace, TraceType.Pub)
        assert (pub.group_name, pub.region_id, pub.success) == ("PID_traced", "DefaultRegion", True)
        assert pub.cost_time >= 0
        assert bean(pub) == TraceBean(
            topic="TracedOrders",
            msg_id=sent.msg_id,
            offset_msg_id=sent.offset_msg_id,
            tags="created",
            keys="o-1 alice",
            store_host=broker_address(server),
            client_host=bean(pub).client_host,
            body_length=len(b"order 1"),
            msg_type=MessageType.Normal_Msg,
        )
        assert bean(pub).client_host
        befores = only(trace, TraceType.SubBefore)
        afters = only(trace, TraceType.SubAfter)
        assert [bean(ctx).retry_times for ctx in befores] == [0, 1]
        assert [ctx.success for ctx in afters] == [False, True]
        assert [ctx.context_code for ctx in afters] == [4, 0]  # FAILED, SUCCESS
        assert {ctx.group_name for ctx in befores + afters} == {"GID_traced"}
        # A consumption's two records share their request id; each consumption has its own.
        assert [ctx.request_id for ctx in befores] == [ctx.request_id for ctx in afters]
        assert befores[0].request_id != befores[1].request_id
        assert trace == sorted(trace, key=lambda ctx: ctx.timestamp)
        assert trace[0] is pub

    run(go())


def test_batches_callback_sends_and_blocking_sends_are_traced_per_message(namesrv: str) -> None:
    async def go() -> tuple[SendResult, SendResult]:
        async with Producer("PID_batch_traced", namesrv, trace=True) as producer:
            batch = await producer.send_batch([Message("TracedBatch", f"m{i}".encode()) for i in range(3)])
            called: asyncio.Future[SendResult | BaseException] = asyncio.get_running_loop().create_future()
            producer.send_with_callback(Message("TracedBatch", b"cb", delay_level=1), called.set_result)
            by_callback = await called
            assert isinstance(by_callback, SendResult)
        for msg_id, offset_id in zip(batch.msg_id.split(","), batch.offset_msg_id.split(","), strict=True):
            (pub,) = await records(namesrv, msg_id, TraceType.Pub)
            assert (bean(pub).offset_msg_id, bean(pub).topic) == (offset_id, "TracedBatch")
        (pub,) = await records(namesrv, by_callback.msg_id, TraceType.Pub)
        assert bean(pub).msg_type is MessageType.Delay_Msg
        return batch, by_callback

    run(go())
    with blocking.Producer("PID_blocking_traced", namesrv, trace=True) as producer:
        sent = producer.send(Message("TracedBatch", b"blocking"))
    (pub,) = run(records(namesrv, sent.msg_id, TraceType.Pub))
    assert pub.group_name == "PID_blocking_traced"


def test_messages_a_lite_pull_consumer_polls_are_traced(namesrv: str) -> None:
    async def go() -> None:
        async with Producer("PID_lite_traced", namesrv) as producer:  # no trace: consumption only
            sent = await producer.send(Message("TracedLite", b"pulled"))
        consumer = LitePullConsumer("GID_lite_traced", namesrv, consume_from="first", trace=True)
        consumer.subscribe("TracedLite")
        async with consumer:
            await poll_until_some(consumer)
        trace = await records(namesrv, sent.msg_id, TraceType.SubBefore, TraceType.SubAfter)
        assert [ctx.trace_type for ctx in trace] == [TraceType.SubBefore, TraceType.SubAfter]
        assert trace[1].success and trace[1].group_name == "GID_lite_traced"

    run(go())


def test_a_transaction_traces_its_half_and_its_end(traced_server: tuple[ServerProcess, str]) -> None:
    server, namesrv = traced_server

    async def go() -> None:
        async with TransactionProducer(
            "PID_tx_traced", namesrv, check=lambda _: TransactionState.COMMIT, trace=True
        ) as producer:
            result = await producer.send_in_transaction(
                Message("TracedTx", b"paid", tags="paid", keys="order-9"), lambda _: TransactionState.COMMIT
            )
        trace = await records(namesrv, result.msg_id, TraceType.Pub, TraceType.EndTransaction)
        (pub,) = only(trace, TraceType.Pub)
        (end,) = only(trace, TraceType.EndTransaction)
        assert bean(pub).msg_type is MessageType.Trans_Msg_Half
        assert (end.group_name, bean(end).topic, bean(end).tags, bean(end).keys) == (
            "PID_tx_traced", "TracedTx", "paid", "order-9",
        )  # fmt: skip
        assert (bean(end).transaction_state, bean(end).transaction_id) == (
            "COMMIT_MESSAGE",
            result.transaction_id,
        )
        assert bean(end).store_host == broker_address(server) and not bean(end).from_transaction_check

    run(go())


def test_a_chosen_trace_topic_gets_the_records_and_trace_sends_trace_nothing(namesrv: str) -> None:
    async def go() -> None:
        async with AdminClient(namesrv) as admin:
            await admin.create_topic("MyTraces", queues=1)
            async with Producer("PID_own_topic", namesrv, trace=True, trace_topic="MyTraces") as producer:
                sent = await producer.send(Message("TracedElsewhere", b"x"))
            (pub,) = await records(namesrv, sent.msg_id, TraceType.Pub, topic="MyTraces")
            assert await admin.message_trace(sent.msg_id) == []  # not in RMQ_SYS_TRACE_TOPIC
            # The trace message itself has no trace: its producer does not trace.
            (trace_message,) = await admin.query_message("MyTraces", sent.msg_id)
            trace_msg_id = decode_properties(trace_message.properties)["UNIQ_KEY"]
            assert await admin.message_trace(trace_msg_id, "MyTraces") == []
            assert pub.group_name == "PID_own_topic"

    run(go())


def test_a_full_trace_queue_drops_records_and_close_sends_those_queued(namesrv: str) -> None:
    def context(n: int) -> TraceContext:
        return TraceContext(
            TraceType.Pub, n, group_name="PID_queue", beans=[TraceBean(topic="T", msg_id=f"QUEUED{n}")]
        )

    async def go() -> None:
        dispatcher = TraceDispatcher(Producer("PID_trace_queue", namesrv), None, queue_size=2)
        for n in range(5):  # nothing takes them yet: the queue fills up
            dispatcher.append(context(n))
        assert dispatcher.dropped == 3
        await dispatcher.start()
        await dispatcher.close(10.0)
        assert dispatcher.failed == 0
        for n in range(2):
            (pub,) = await records(namesrv, f"QUEUED{n}", TraceType.Pub)
            assert pub.timestamp == n
        async with AdminClient(namesrv) as admin:
            assert await admin.message_trace("QUEUED2") == []

    run(go())


def test_sends_a_broker_asks_not_to_trace_and_sends_to_the_trace_topic_record_nothing() -> None:
    dispatcher = TraceDispatcher(Producer("PID_unstarted", "127.0.0.1:9876"), "MyTraces")
    answered = SendResult(SendStatus.SEND_OK, "ID1", "OFFSET1", MessageQueue("T", "broker-a", 0), 0)
    untraced = dataclasses.replace(answered, trace_on=False)
    dispatcher.sent("PID", [Message("T", b"x")], untraced, 0, "127.0.0.1:10911")
    dispatcher.sent("PID", [Message("MyTraces", b"x")], answered, 0, "127.0.0.1:10911")
    assert dispatcher.waiting == 0
    dispatcher.sent("PID", [Message("T", b"x", keys=[])], answered, 0, "127.0.0.1:10911")
    assert dispatcher.waiting == 1


async def one_queue_topic_of(namesrv: str, topic: str, count: int, *, trace: bool = False) -> list[str]:
    """The msg ids of ``count`` messages sent in one batch to ``topic``, made with one queue so that a
    pull of 1024 takes them in one go."""
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, queues=1)
    async with Producer(f"PID_{topic}", namesrv, trace=trace) as producer:
        result = await producer.send_batch([Message(topic, f"m{i}".encode()) for i in range(count)])
        if trace:
            assert producer._trace is not None and producer._trace.dropped == 0
    return result.msg_id.split(",")


def test_a_batch_of_more_messages_than_the_trace_queue_holds_is_traced_whole(namesrv: str) -> None:
    async def go() -> None:
        msg_ids = await one_queue_topic_of(namesrv, "TracedHugeBatch", 1500, trace=True)
        for msg_id in (msg_ids[0], msg_ids[-1]):
            (pub,) = await records(namesrv, msg_id, TraceType.Pub)
            assert bean(pub).topic == "TracedHugeBatch"

    run(go())


def test_a_lite_pull_poll_of_1024_messages_is_traced(namesrv: str) -> None:
    async def go() -> None:
        await one_queue_topic_of(namesrv, "TracedBigPoll", 1500)
        consumer = LitePullConsumer(
            "GID_big_poll", namesrv, consume_from="first", pull_batch_size=1024, trace=True
        )
        consumer.subscribe("TracedBigPoll")
        async with consumer:
            polled = await poll_until_some(consumer)
            assert consumer._trace is not None
        assert len(polled) == 1024  # one pull, handed over whole: its keys are more than a message's
        assert consumer._trace.failed == 0
        for msg in (polled[0], polled[-1]):
            trace = await records(namesrv, msg.msg_id, TraceType.SubBefore, TraceType.SubAfter)
            assert [ctx.trace_type for ctx in trace] == [TraceType.SubBefore, TraceType.SubAfter]

    run(go())


def test_a_push_consumer_batch_of_1024_messages_is_traced(namesrv: str) -> None:
    async def go() -> None:
        await one_queue_topic_of(namesrv, "TracedBigBatch", 1500)
        batches: list[list[ReceivedMessage]] = []
        consumer = PushConsumer(
            "GID_big_batch",
            namesrv,
            consume_from="first",
            pull_batch_size=1024,
            consume_batch_size=1024,
            trace=True,
        )
        consumer.subscribe("TracedBigBatch")
        consumer.listen(batches.append)
        async with consumer:
            await wait_until(lambda: sum(map(len, batches)) >= 1500, message="every message consumed")
            assert consumer._trace is not None
        biggest = max(batches, key=len)
        assert len(biggest) == 1024
        assert consumer._trace.failed == 0
        for msg in (biggest[0], biggest[-1]):
            trace = await records(namesrv, msg.msg_id, TraceType.SubBefore, TraceType.SubAfter)
            assert [ctx.trace_type for ctx in trace] == [TraceType.SubBefore, TraceType.SubAfter]
            assert trace[1].success and trace[1].context_code == 0

    run(go())


def test_a_message_with_more_keys_than_a_trace_message_holds_is_found_by_its_id(namesrv: str) -> None:
    many_keys = " ".join(f"key-{n:05}" for n in range(4000))  # 40 000 bytes of keys

    async def go() -> None:
        dispatcher = TraceDispatcher(Producer("PID_many_keys", namesrv), None)
        await dispatcher.start()
        dispatcher.append(
            TraceContext(
                TraceType.Pub,
                1,
                group_name="PID_many_keys",
                beans=[TraceBean(msg_id="MANYKEYS", keys=many_keys)],
            )
        )
        await dispatcher.close(10.0)
        assert dispatcher.failed == 0
        (pub,) = await records(namesrv, "MANYKEYS", TraceType.Pub)
        assert bean(pub).keys == many_keys

    run(go())


def test_records_appended_after_close_are_counted_as_dropped() -> None:
    async def go() -> None:
        dispatcher = TraceDispatcher(Producer("PID_closed_trace", "127.0.0.1:9876"), None)
        await dispatcher.close(1.0)
        dispatcher.append(TraceContext(TraceType.Pub, 1, beans=[TraceBean(msg_id="LATE")]))
        dispatcher.append(
            [TraceContext(TraceType.Pub, 1, beans=[TraceBean(msg_id=f"LATE{n}")]) for n in range(3)]
        )
        assert (dispatcher.dropped, dispatcher.waiting) == (4, 0)

    run(go())


def test_closing_a_traced_producer_gives_its_trace_sends_at_most_what_is_left_capped(namesrv: str) -> None:
    async def go() -> None:
        producer = Producer("PID_close_traced", namesrv, trace=True)
        await producer.start()
        assert producer._trace is not None
        trace_producer = producer._trace._producer
        given: list[float] = []
        close = trace_producer.close

        async def recording_close(timeout: float = 0.0) -> None:
            given.append(timeout)
            await close(timeout)

        trace_producer.close = recording_close  # type: ignore[method-assign]
        await producer.send(Message("TracedClose", b"x"))
        await producer.close(30.0)
        assert len(given) == 1 and 0 < given[0] <= CLOSE_MAX_S

    run(go())


def test_a_listener_that_raises_is_traced_as_an_exception(namesrv: str) -> None:
    async def go() -> None:
        async with Producer("PID_raising", namesrv) as producer:
            sent = await producer.send(Message("TracedRaising", b"x"))
        calls: list[int] = []

        def listen(messages: list[ReceivedMessage]) -> None:
            calls.append(messages[0].reconsume_times)
            if len(calls) == 1:
                raise RuntimeError("the listener fails once")

        consumer = PushConsumer("GID_raising", namesrv, consume_from="first", trace=True)
        consumer.subscribe("TracedRaising")
        consumer.listen(listen)
        async with consumer:
            await wait_until(lambda: len(calls) >= 2, message="the message consumed again after a failure")
        trace = await records(namesrv, sent.msg_id, TraceType.SubAfter, TraceType.SubAfter)
        afters = only(trace, TraceType.SubAfter)
        assert [(ctx.success, ctx.context_code) for ctx in afters] == [(False, 2), (True, 0)]  # EXCEPTION

    run(go())


def test_a_bad_trace_topic_or_a_group_too_long_to_trace_is_refused_naming_the_users_option() -> None:
    with pytest.raises(OptionError, match="trace_topic 'bad topic'"):
        Producer("PID_bad_trace_topic", "127.0.0.1:9876", trace=True, trace_topic="bad topic")
    long_group = "G" * 240
    for make in (
        lambda: Producer(long_group, "127.0.0.1:9876", trace=True),
        lambda: PushConsumer(long_group, "127.0.0.1:9876", trace=True),
        lambda: LitePullConsumer(long_group, "127.0.0.1:9876", trace=True),
    ):
        with pytest.raises(OptionError) as refused:
            make()
        assert f"group {long_group!r} is too long for message trace" in str(refused.value)
        assert "_INNER_TRACE_PRODUCER" not in str(refused.value)
    Producer(long_group, "127.0.0.1:9876")  # legal without trace
