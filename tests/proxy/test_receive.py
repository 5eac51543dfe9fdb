"""The proxy's consuming calls over gRPC (stubs from the generated code) against a real `cometmq standalone`:
QueryAssignment, ReceiveMessage (POP), AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
and the offset-based PullMessage, UpdateOffset, GetOffset and QueryOffset.

Messages are sent with CometMQ's own producer, so that these tests depend on the consuming calls alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from proxy_support import ProxiedStandalone, client_metadata, new_client_id

from cometmq.client import AdminClient, Message, Producer
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.proxy import ProxyConfig, ProxyServer, definition_pb2, service_pb2, service_pb2_grpc
from cometmq.proxy._convert import duration_of_ms
from waiting import wait_until

v2 = definition_pb2
pb = service_pb2
T = TypeVar("T")

METADATA = client_metadata(new_client_id())
_names = itertools.count()


def run(coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def seconds(value: float) -> Duration:
    return duration_of_ms(int(value * 1000))


@contextlib.asynccontextmanager
async def proxy_in_process(namesrv: str) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    """A proxy of this test's own, in this process, in front of the name server at *namesrv*, and a stub."""
    proxy = ProxyServer(ProxyConfig(namesrv_addr=namesrv, port=0))
    await proxy.start()
    try:
        async with grpc.aio.insecure_channel(proxy.address) as channel:
            yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        await proxy.stop()


@contextlib.asynccontextmanager
async def proxy_of(server: ProxiedStandalone) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    """An asyncio stub on a channel of its own to the standalone's proxy."""
    async with grpc.aio.insecure_channel(server.proxy) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


async def create_topic(server: ProxiedStandalone, topic: str, queues: int = 4) -> None:
    async with AdminClient(server.namesrv) as admin:
        await admin.create_topic(topic, queues)


async def topic_and_group(server: ProxiedStandalone, name: str, queues: int = 4) -> tuple[str, str]:
    """A topic of the test's own, created with *queues* queues, and a group name of its own."""
    topic, group = unique(name), unique(f"GID_{name}")
    await create_topic(server, topic, queues)
    return topic, group


# Where a client reached the proxy, as a QueryAssignment names it (the proxy answers with these endpoints).
SOME_ENDPOINTS = v2.Endpoints(addresses=[v2.Address(host="127.0.0.1", port=1)])


async def query_assignment(
    stub: service_pb2_grpc.MessagingServiceStub,
    group: str,
    topic: str,
    endpoints: v2.Endpoints = SOME_ENDPOINTS,
) -> pb.QueryAssignmentResponse:
    request = pb.QueryAssignmentRequest(topic=resource(topic), group=resource(group), endpoints=endpoints)
    answer: pb.QueryAssignmentResponse = await stub.QueryAssignment(request, metadata=METADATA, timeout=10)
    return answer


async def from_first_message(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str, queues: int = 4, broker: str = ""
) -> None:
    """Commit offset 0 of every queue (of *broker*, else of the first one assigned) for *group*: its
    receives start at the queues' first messages (a group with no offset starts where the broker's init
    mode says, which is not what is tested)."""
    assignment = await query_assignment(stub, group, topic)
    brokers = [a.message_queue.broker for a in assignment.assignments]
    assigned = next(b for b in brokers if b.name == broker) if broker else brokers[0]
    for queue_id in range(queues):
        queue = v2.MessageQueue(topic=resource(topic), id=queue_id, broker=assigned)
        update = pb.UpdateOffsetRequest(group=resource(group), message_queue=queue, offset=0)
        answer = await stub.UpdateOffset(update, metadata=METADATA, timeout=10)
        assert answer.status.code == v2.Code.OK, answer.status


async def send(server: ProxiedStandalone, *messages: Message) -> list[str]:
    async with Producer(unique("PID_recv"), server.namesrv) as producer:
        return [(await producer.send(message)).msg_id for message in messages]


def resource(name: str) -> v2.Resource:
    return v2.Resource(name=name)


def receive_request(
    group: str,
    topic: str,
    *,
    batch: int = 16,
    invisible_s: float = 30,
    polling_s: float = 5,
    tags: str = "*",
    broker: str = "",
) -> pb.ReceiveMessageRequest:
    return pb.ReceiveMessageRequest(
        group=resource(group),
        message_queue=v2.MessageQueue(topic=resource(topic), id=-1, broker=v2.Broker(name=broker)),
        filter_expression=v2.FilterExpression(type=v2.FilterType.TAG, expression=tags),
        batch_size=batch,
        invisible_duration=seconds(invisible_s),
        long_polling_timeout=seconds(polling_s),
    )


async def receive(
    stub: service_pb2_grpc.MessagingServiceStub, request: pb.ReceiveMessageRequest, deadline_s: float = 30
) -> tuple[v2.Status, list[v2.Message]]:
    """One ReceiveMessage; checks the stream's shape (a status, the messages, a delivery time last)."""
    call = stub.ReceiveMessage(request, metadata=METADATA, timeout=deadline_s)
    responses = [response async for response in call]
    kinds = [response.WhichOneof("content") for response in responses]
    assert kinds[0] == "status" and kinds[-1] == "delivery_timestamp", kinds
    assert set(kinds[1:-1]) <= {"message"}, kinds
    return responses[0].status, [response.message for response in responses[1:-1]]


async def receive_until(
    stub: service_pb2_grpc.MessagingServiceStub, request: pb.ReceiveMessageRequest, count: int
) -> list[v2.Message]:
    got: list[v2.Message] = []

    async def enough() -> bool:
        status, messages = await receive(stub, request)
        assert status.code in (v2.Code.OK, v2.Code.MESSAGE_NOT_FOUND), status
        got.extend(messages)
        return len(got) >= count

    await wait_until(enough, message=f"{count} messages received", interval=0)
    return got


async def ack(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str, *messages: v2.Message
) -> pb.AckMessageResponse:
    entries = [
        pb.AckMessageEntry(
            message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
        )
        for m in messages
    ]
    request = pb.AckMessageRequest(group=resource(group), topic=resource(topic), entries=entries)
    response: pb.AckMessageResponse = await stub.AckMessage(request, metadata=METADATA, timeout=10)
    return response


async def make_visible(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str, message: v2.Message
) -> None:
    """Hand *message* back to be delivered again a second from now (a consumer's negative ack)."""
    changed = await stub.ChangeInvisibleDuration(
        pb.ChangeInvisibleDurationRequest(
            group=resource(group),
            topic=resource(topic),
            receipt_handle=message.system_properties.receipt_handle,
            invisible_duration=seconds(1),
            message_id=message.system_properties.message_id,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert changed.status.code == v2.Code.OK, changed.status


# ReceiveMessage ----------------------------------------------------------------------------------------


def test_receive_streams_a_status_then_the_messages_with_their_system_properties(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvProps")
        sent = Message(
            topic,
            b"hello",
            tags="TagA",
            keys=["k1", "k2"],
            properties={"color": "red", "__SHARDINGKEY": "g1"},
        )
        [msg_id] = await send(proxied, sent)
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            [message] = await receive_until(stub, receive_request(group, topic), 1)
        system = message.system_properties
        assert message.topic.name == topic
        assert message.body == b"hello"
        assert message.user_properties["color"] == "red"
        assert "TAGS" not in message.user_properties and "UNIQ_KEY" not in message.user_properties
        assert system.message_id == msg_id
        assert system.tag == "TagA"
        assert list(system.keys) == ["k1", "k2"]
        assert system.message_group == "g1"
        assert system.message_type == v2.MessageType.FIFO
        assert system.body_digest.type == v2.DigestType.MD5
        assert system.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
        assert system.body_encoding == v2.Encoding.IDENTITY
        assert system.delivery_attempt == 1
        assert system.receipt_handle
        assert system.born_timestamp.ToMilliseconds() <= system.store_timestamp.ToMilliseconds()
        assert system.store_host

    run(scenario())


def test_receive_of_a_topic_with_nothing_to_deliver_answers_message_not_found(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvEmpty")
        async with proxy_of(proxied) as stub:
            status, messages = await receive(stub, receive_request(group, topic))
        assert status.code == v2.Code.MESSAGE_NOT_FOUND
        assert messages == []

    run(scenario())


def test_a_held_receive_answers_with_a_message_sent_while_it_waits(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvHeld")
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            held = asyncio.ensure_future(receive(stub, receive_request(group, topic, polling_s=20)))
            await asyncio.sleep(0)  # the receive is on its way before the send
            await send(proxied, Message(topic, b"late"))
            status, messages = await held
        assert status.code == v2.Code.OK
        assert [m.body for m in messages] == [b"late"]

    run(scenario())


def test_receive_delivers_only_the_tags_asked_for(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvTags", queues=1)
        await send(proxied, *(Message(topic, b"%d" % i, tags="TagA" if i % 2 else "TagB") for i in range(6)))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic, queues=1)
            got = await receive_until(stub, receive_request(group, topic, tags="TagA"), 3)
        assert sorted(m.body for m in got) == [b"1", b"3", b"5"]
        assert {m.system_properties.tag for m in got} == {"TagA"}

    run(scenario())


def empty_sql_filter(request: pb.ReceiveMessageRequest) -> None:
    request.filter_expression.CopyFrom(v2.FilterExpression(type=v2.FilterType.SQL, expression=" "))


def short_invisible_time(request: pb.ReceiveMessageRequest) -> None:
    request.invisible_duration.CopyFrom(seconds(1))


def topic_named(name: str) -> Callable[[pb.ReceiveMessageRequest], None]:
    def change(request: pb.ReceiveMessageRequest) -> None:
        request.message_queue.topic.name = name

    return change


def group_named(name: str) -> Callable[[pb.ReceiveMessageRequest], None]:
    def change(request: pb.ReceiveMessageRequest) -> None:
        request.group.name = name

    return change


@pytest.mark.parametrize(
    ("change", "deadline_s", "code"),
    [
        (topic_named("no topic"), 30, v2.Code.ILLEGAL_TOPIC),
        (group_named("no group"), 30, v2.Code.ILLEGAL_CONSUMER_GROUP),
        (topic_named("NoSuchTopicForRecv"), 30, v2.Code.TOPIC_NOT_FOUND),
        (short_invisible_time, 30, v2.Code.ILLEGAL_INVISIBLE_TIME),
        (empty_sql_filter, 30, v2.Code.ILLEGAL_FILTER_EXPRESSION),
        (None, 3, v2.Code.ILLEGAL_POLLING_TIME),  # less time left than the shortest long polling
    ],
)
def test_a_receive_the_proxy_cannot_serve_is_answered_with_the_code_clients_expect(
    proxied: ProxiedStandalone,
    change: Callable[[pb.ReceiveMessageRequest], None] | None,
    deadline_s: float,
    code: int,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvBad")
        request = receive_request(group, topic)
        if change is not None:
            change(request)
        async with proxy_of(proxied) as stub:
            status, messages = await receive(stub, request, deadline_s)
        assert status.code == code, status
        assert status.message
        assert messages == []

    run(scenario())


# AckMessage, ChangeInvisibleDuration -------------------------------------------------------------------


def test_ack_answers_each_entry_and_refuses_a_handle_it_cannot_read(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvAck")
        await send(proxied, Message(topic, b"a"), Message(topic, b"b"))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            first, second = await receive_until(stub, receive_request(group, topic), 2)
            answer = await ack(stub, group, topic, first)
            assert answer.status.code == v2.Code.OK
            assert [e.status.code for e in answer.entries] == [v2.Code.OK]
            assert answer.entries[0].message_id == first.system_properties.message_id

            forged = v2.Message()
            forged.CopyFrom(second)
            forged.system_properties.receipt_handle = "not a receipt handle"
            mixed = await ack(stub, group, topic, second, forged)
            assert mixed.status.code == v2.Code.MULTIPLE_RESULTS
            assert [e.status.code for e in mixed.entries] == [v2.Code.OK, v2.Code.INVALID_RECEIPT_HANDLE]
            assert "receipt handle" in mixed.entries[1].status.message

    run(scenario())


def test_change_invisible_duration_answers_a_new_handle_that_settles_the_message(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvChange")
        await send(proxied, Message(topic, b"slow"))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            [message] = await receive_until(stub, receive_request(group, topic), 1)
            old_handle = message.system_properties.receipt_handle
            changed = await stub.ChangeInvisibleDuration(
                pb.ChangeInvisibleDurationRequest(
                    group=resource(group),
                    topic=resource(topic),
                    receipt_handle=old_handle,
                    invisible_duration=seconds(60),
                    message_id=message.system_properties.message_id,
                ),
                metadata=METADATA,
                timeout=10,
            )
            assert changed.status.code == v2.Code.OK
            assert changed.receipt_handle and changed.receipt_handle != old_handle
            message.system_properties.receipt_handle = changed.receipt_handle
            answer = await ack(stub, group, topic, message)
            assert answer.status.code == v2.Code.OK

    run(scenario())


def test_a_message_not_acked_in_time_comes_again_with_its_delivery_attempt_counted(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvAgain")
        [msg_id] = await send(proxied, Message(topic, b"again"))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            [first] = await receive_until(stub, receive_request(group, topic), 1)
            assert first.system_properties.delivery_attempt == 1
            await make_visible(stub, group, topic, first)  # at once, not after its invisible time
            [again] = await receive_until(stub, receive_request(group, topic), 1)
            assert again.system_properties.message_id == msg_id
            assert again.body == b"again"
            assert again.system_properties.delivery_attempt == 2
            assert (await ack(stub, group, topic, again)).status.code == v2.Code.OK

    run(scenario())


# ForwardMessageToDeadLetterQueue -----------------------------------------------------------------------


def test_forward_to_the_dead_letter_queue_moves_the_message_to_the_groups_dlq(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvDlq")
        [msg_id] = await send(proxied, Message(topic, b"poison"))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            [message] = await receive_until(stub, receive_request(group, topic), 1)
            forwarded = await stub.ForwardMessageToDeadLetterQueue(
                pb.ForwardMessageToDeadLetterQueueRequest(
                    group=resource(group),
                    topic=resource(topic),
                    receipt_handle=message.system_properties.receipt_handle,
                    message_id=msg_id,
                    delivery_attempt=1,
                    max_delivery_attempts=1,
                ),
                metadata=METADATA,
                timeout=10,
            )
            assert forwarded.status.code == v2.Code.OK
        async with AdminClient(proxied.namesrv) as admin:
            letters = await wait_until(lambda: admin.dead_letters(group), message="the dead letter")
        assert [letter.body for letter in letters] == [b"poison"]

    run(scenario())


def test_forward_of_a_handle_without_its_commit_log_offset_is_refused(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvDlqBad")
        async with proxy_of(proxied) as stub:
            forwarded = await stub.ForwardMessageToDeadLetterQueue(
                pb.ForwardMessageToDeadLetterQueueRequest(
                    group=resource(group),
                    topic=resource(topic),
                    receipt_handle="0 1700000000000 30000 0 0 broker-a 0 0",
                    message_id="id",
                ),
                metadata=METADATA,
                timeout=10,
            )
        assert forwarded.status.code == v2.Code.INVALID_RECEIPT_HANDLE

    run(scenario())


# QueryAssignment ---------------------------------------------------------------------------------------


def test_query_assignment_gives_a_group_that_is_not_fifo_one_queue_per_broker(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvAssign")
        endpoints = v2.Endpoints(
            scheme=v2.AddressScheme.IPv4, addresses=[v2.Address(host="127.0.0.1", port=8081)]
        )
        async with proxy_of(proxied) as stub:
            answer = await query_assignment(stub, group, topic, endpoints)
            missing = await query_assignment(stub, group, "NoSuchTopicForAssign", endpoints)
        assert answer.status.code == v2.Code.OK
        [assignment] = answer.assignments
        queue = assignment.message_queue
        assert queue.topic.name == topic
        assert queue.id == -1
        assert queue.permission == v2.Permission.READ_WRITE
        assert queue.broker.id == 0 and queue.broker.name
        assert queue.broker.endpoints == endpoints
        assert missing.status.code == v2.Code.TOPIC_NOT_FOUND

    run(scenario())


# PullMessage, UpdateOffset, GetOffset, QueryOffset -----------------------------------------------------


def test_offsets_and_pulls_of_one_queue(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvPull", queues=1)
        await send(proxied, *(Message(topic, b"m%d" % i) for i in range(5)))
        async with proxy_of(proxied) as stub:
            route = await query_assignment(stub, group, topic)
            queue = v2.MessageQueue()
            queue.CopyFrom(route.assignments[0].message_queue)
            queue.id = 0

            async def offset_at(policy: int) -> int:
                answer = await stub.QueryOffset(
                    pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=policy),  # type: ignore[arg-type]
                    metadata=METADATA,
                    timeout=10,
                )
                assert answer.status.code == v2.Code.OK
                return int(answer.offset)

            assert await offset_at(v2.QueryOffsetPolicy.BEGINNING) == 0
            assert await offset_at(v2.QueryOffsetPolicy.END) == 5

            pulled = [
                r
                async for r in stub.PullMessage(
                    pb.PullMessageRequest(
                        group=resource(group),
                        message_queue=queue,
                        offset=2,
                        batch_size=10,
                        filter_expression=v2.FilterExpression(type=v2.FilterType.TAG, expression="*"),
                        long_polling_timeout=seconds(1),
                    ),
                    metadata=METADATA,
                    timeout=10,
                )
            ]
            assert [r.WhichOneof("content") for r in pulled] == [
                "status",
                "message",
                "message",
                "message",
                "next_offset",
            ]
            assert pulled[0].status.code == v2.Code.OK
            assert [r.message.body for r in pulled[1:4]] == [b"m2", b"m3", b"m4"]
            assert [r.message.system_properties.queue_offset for r in pulled[1:4]] == [2, 3, 4]
            assert pulled[-1].next_offset == 5

            beyond = [
                r
                async for r in stub.PullMessage(
                    pb.PullMessageRequest(
                        group=resource(group), message_queue=queue, offset=100, batch_size=10
                    ),
                    metadata=METADATA,
                    timeout=10,
                )
            ]
            assert [r.WhichOneof("content") for r in beyond] == ["status", "next_offset"]
            assert beyond[0].status.code == v2.Code.ILLEGAL_OFFSET

            updated = await stub.UpdateOffset(
                pb.UpdateOffsetRequest(group=resource(group), message_queue=queue, offset=3),
                metadata=METADATA,
                timeout=10,
            )
            assert updated.status.code == v2.Code.OK
            committed = await stub.GetOffset(
                pb.GetOffsetRequest(group=resource(group), message_queue=queue), metadata=METADATA, timeout=10
            )
            assert committed.status.code == v2.Code.OK
            assert committed.offset == 3

    run(scenario())


# FIFO groups -------------------------------------------------------------------------------------------


async def assigned_queue_ids(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str
) -> list[int]:
    answer = await query_assignment(stub, group, topic)
    assert answer.status.code == v2.Code.OK, answer.status
    return [assignment.message_queue.id for assignment in answer.assignments]


async def fifo_queue(proxied: ProxiedStandalone, name: str, count: int) -> tuple[str, str]:
    """A topic of one queue holding *count* messages of one message group, and a FIFO group on it."""
    topic, group = await topic_and_group(proxied, name, queues=1)
    await create_fifo_group(proxied, group, topic)
    await send(
        proxied, *(Message(topic, b"m%d" % i, properties={"__SHARDINGKEY": "g"}) for i in range(count))
    )
    return topic, group


async def create_fifo_group(proxied: ProxiedStandalone, group: str, topic: str) -> None:
    """Create *group* as a FIFO group, and wait until the proxy, which reads the groups' settings anew
    every few seconds, assigns it queue by queue."""
    async with AdminClient(proxied.namesrv) as admin:
        await admin.create_group(SubscriptionGroupConfig(group_name=group, consume_message_orderly=True))
    async with proxy_of(proxied) as stub:

        async def queue_by_queue() -> bool:
            return -1 not in await assigned_queue_ids(stub, group, topic)

        await wait_until(queue_by_queue, message="a FIFO group's assignment", interval=0.5)


def test_query_assignment_gives_a_fifo_group_each_queue(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvFifoAssign", queues=3)
        async with proxy_of(proxied) as stub:
            assert await assigned_queue_ids(stub, group, topic) == [-1]
        await create_fifo_group(proxied, group, topic)
        async with proxy_of(proxied) as stub:
            assert await assigned_queue_ids(stub, group, topic) == [0, 1, 2]

    run(scenario())


def test_a_fifo_group_gets_a_queue_in_order_and_nothing_more_of_it_until_it_acks(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await fifo_queue(proxied, "RecvFifo", 3)
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic, queues=1)
            first = await receive_until(stub, receive_request(group, topic, batch=2), 2)
            assert [m.body for m in first] == [b"m0", b"m1"]
            assert {m.system_properties.message_group for m in first} == {"g"}
            # The queue is the consumer's until it settles what it holds: the third waits.
            status, held_back = await receive(stub, receive_request(group, topic))
            assert status.code == v2.Code.MESSAGE_NOT_FOUND and held_back == []
            assert (await ack(stub, group, topic, *first)).status.code == v2.Code.OK
            [third] = await receive_until(stub, receive_request(group, topic), 1)
            assert third.body == b"m2"
            assert third.system_properties.delivery_attempt == 1

    run(scenario())


def test_a_fifo_message_not_acked_in_time_comes_again_first_with_its_attempt_counted(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await fifo_queue(proxied, "RecvFifoAgain", 2)
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic, queues=1)
            [first] = await receive_until(stub, receive_request(group, topic, batch=1), 1)
            assert first.body == b"m0"
            await make_visible(stub, group, topic, first)  # at once, not after its invisible time
            [again] = await receive_until(stub, receive_request(group, topic, batch=1), 1)
            assert again.body == b"m0"
            assert again.system_properties.delivery_attempt == 2

    run(scenario())


def test_a_message_past_its_groups_attempts_goes_to_the_dead_letter_queue(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RecvTries")
        async with AdminClient(proxied.namesrv) as admin:
            await admin.create_group(SubscriptionGroupConfig(group_name=group, retry_max_times=1))
        [msg_id] = await send(proxied, Message(topic, b"fails twice"))
        async with proxy_of(proxied) as stub:
            await from_first_message(stub, group, topic)
            for attempt in (1, 2):
                [message] = await receive_until(stub, receive_request(group, topic), 1)
                assert message.system_properties.delivery_attempt == attempt
                await make_visible(stub, group, topic, message)
        async with AdminClient(proxied.namesrv) as admin:
            letters = await wait_until(lambda: admin.dead_letters(group), message="the dead letter")
        assert [letter.body for letter in letters] == [b"fails twice"]
        assert {letter.topic for letter in letters} == {f"%DLQ%{group}"}
        async with proxy_of(proxied) as stub:
            status, messages = await receive(stub, receive_request(group, topic))
        assert (status.code, messages) == (v2.Code.MESSAGE_NOT_FOUND, []), msg_id

    run(scenario())
