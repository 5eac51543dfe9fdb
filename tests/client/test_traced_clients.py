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
from cometmq.client._trace import TraceDispatcher
from cometmq.protocol.naming import TRACE_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.trace import MessageType, TraceBean, TraceContext, TraceType
from processes import TEST_BROKER_CONF, ServerProcess, broker_address, start_standalone
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
            polled: list[ReceivedMessage] = []
            while not polled:
                polled = await consumer.poll(1.0)
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
