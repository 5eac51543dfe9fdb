"""What every client class shares: the life cycle (start, close(timeout), async with, ClientState and
ClientStateError), the constructor option check (OptionError naming the option and its range), and
SQL92 subscriptions on the lite pull consumer as on the push consumer."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from client_support import SILENT, ScriptedBroker, run, scripted, serving, standalone_with_conf

from cometmq.client import (
    AdminClient,
    ClientState,
    ClientStateError,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendResult,
    SimpleConsumer,
    TransactionProducer,
    TransactionState,
    blocking,
)
from cometmq.errors import OptionError
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import Connection
from processes import StandaloneServer
from waiting import wait_until

Client = Producer | PushConsumer | LitePullConsumer | SimpleConsumer | AdminClient


@dataclass(frozen=True)
class Kind:
    """One client class: how to make one, and a call that needs it running."""

    name: str  # as its messages call it
    make: Callable[[str], Client]
    use: Callable[[Any], Awaitable[object]]


async def _next_message(consumer: PushConsumer) -> object:
    return await consumer.__anext__()


async def _listen(consumer: PushConsumer) -> None:
    consumer.listen(lambda messages: None)


def _push_consumer(namesrv: str) -> PushConsumer:
    consumer = PushConsumer("GID_conv_push", namesrv)
    consumer.subscribe("ConvTopic")
    return consumer


KINDS = [
    Kind("producer", lambda ns: Producer("PID_conv", ns), lambda p: p.send(Message("ConvTopic", b"x"))),
    Kind("push consumer", _push_consumer, _next_message),
    Kind("lite pull consumer", lambda ns: LitePullConsumer("GID_conv_lite", ns), lambda c: c.poll(0)),
    Kind(
        "simple consumer",
        lambda ns: SimpleConsumer("GID_conv_simple", ns, subscriptions={"ConvTopic": "*"}),
        lambda c: c.receive(1, await_duration=0),
    ),
    Kind("admin client", AdminClient, lambda a: a.topic_list()),
    Kind(
        "transaction producer",
        lambda ns: TransactionProducer("PID_conv_tx", ns, check=lambda m: TransactionState.UNKNOWN),
        lambda p: p.send_in_transaction(Message("ConvTopic", b"x"), lambda m: TransactionState.COMMIT),
    ),
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_client_used_before_start_says_to_start_it(server: StandaloneServer, kind: Kind) -> None:
    async def scenario() -> None:
        client = kind.make(server.namesrv)
        assert client.state is ClientState.CREATED
        with pytest.raises(ClientStateError, match=rf"^this {kind.name} is not started: await start\(\)"):
            await kind.use(client)
        await client.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_closed_client_refuses_use_and_restart_and_closes_again_quietly(
    server: StandaloneServer, kind: Kind
) -> None:
    # The push consumer's use after close is a listener: ``async for`` over a closed one just ends.
    use_closed = _listen if kind.name == "push consumer" else kind.use

    async def scenario() -> None:
        async with kind.make(server.namesrv) as client:
            assert client.state is ClientState.RUNNING
            await client.start()  # starting a running client changes nothing
            assert client.state is ClientState.RUNNING
        assert client.state is ClientState.CLOSED
        with pytest.raises(ClientStateError, match=rf"^this {kind.name} is closed"):
            await use_closed(client)
        with pytest.raises(ClientStateError, match=rf"^this {kind.name} is closed: make a new one"):
            await client.start()
        await client.close(timeout=1.0)
        assert client.state is ClientState.CLOSED

    run(scenario())


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_close_before_start_is_final(kind: Kind) -> None:
    async def scenario() -> None:
        client = kind.make("127.0.0.1:1")  # never contacted
        await client.close()
        assert client.state is ClientState.CLOSED
        with pytest.raises(ClientStateError, match=rf"^this {kind.name} is closed: make a new one"):
            await client.start()

    run(scenario())


def test_a_push_consumer_without_subscriptions_is_not_started_and_may_start_later(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        consumer = PushConsumer("GID_conv_nosub", server.namesrv)
        with pytest.raises(ClientStateError, match="subscribe to at least one topic before start"):
            await consumer.start()
        assert consumer.state is ClientState.CREATED
        consumer.subscribe("ConvTopic")
        consumer.listen(lambda messages: None)
        async with consumer:
            assert consumer.state is ClientState.RUNNING

    run(scenario())


# ---------------------------------------------------------------------------------------------
# options

MAKERS: dict[str, Callable[..., object]] = {
    "Producer": lambda **options: Producer("PID_opts", "127.0.0.1:1", **options),
    "PushConsumer": lambda **options: PushConsumer("GID_opts", "127.0.0.1:1", **options),
    "LitePullConsumer": lambda **options: LitePullConsumer("GID_opts", "127.0.0.1:1", **options),
    "SimpleConsumer": lambda **options: SimpleConsumer("GID_opts", "127.0.0.1:1", **options),
    "AdminClient": lambda **options: AdminClient("127.0.0.1:1", **options),
}

BAD_OPTIONS = [
    ("Producer", "send_timeout", 0, "more than 0 seconds"),
    ("Producer", "retry_times", -1, "at least 0"),
    ("Producer", "compress_over", -1, "at least 0"),
    ("Producer", "max_message_size", 0, "at least 1"),
    ("Producer", "busy_poll_us", -1, "within 0..100000"),
    ("LitePullConsumer", "busy_poll_us", 100_001, "within 0..100000"),
    ("Producer", "poll_name_server_interval", 0, "within 0.1..3600"),
    ("PushConsumer", "message_model", "fanout", "one of 'broadcasting', 'clustering'"),
    ("PushConsumer", "consume_from", "earliest", "one of 'first', 'last', 'timestamp'"),
    ("PushConsumer", "allocate", "random", "one of 'averagely', 'consistent_hash'"),
    ("PushConsumer", "pull_batch_size", 1025, "within 1..1024"),
    ("PushConsumer", "consume_batch_size", 0, "within 1..1024"),
    ("PushConsumer", "max_cached_messages_per_queue", 0, "within 1..65535"),
    ("PushConsumer", "max_offset_span", 65536, "within 1..65535"),
    ("PushConsumer", "max_reconsume_times", -2, "at least -1"),
    ("PushConsumer", "concurrency", 1001, "within 1..1000"),
    ("PushConsumer", "poll_name_server_interval", 3601.0, "within 0.1..3600"),
    ("LitePullConsumer", "pull_batch_size", 0, "within 1..1024"),
    ("LitePullConsumer", "pull_threshold_per_queue", 0, "at least 1"),
    ("LitePullConsumer", "max_poll_messages", 0, "at least 1"),
    ("LitePullConsumer", "poll_timeout", -1.0, "at least 0"),
    ("LitePullConsumer", "auto_commit_interval", 0.0, "more than 0 seconds"),
    ("LitePullConsumer", "request_timeout", float("nan"), "more than 0 seconds"),
    ("LitePullConsumer", "consume_from", "earliest", "one of 'first', 'last', 'timestamp'"),
    ("LitePullConsumer", "poll_name_server_interval", float("nan"), "within 0.1..3600"),
    ("SimpleConsumer", "await_duration", -1.0, "within 0..120.0"),
    ("SimpleConsumer", "consume_from", "timestamp", "one of 'first', 'last'"),
    ("SimpleConsumer", "request_timeout", 0.0, "more than 0 seconds"),
    ("AdminClient", "timeout", 0.0, "more than 0 seconds"),
    ("AdminClient", "connect_timeout", -1.0, "more than 0 seconds"),
]


@pytest.mark.parametrize(
    ("cls", "option", "value", "allowed"), BAD_OPTIONS, ids=[f"{c}-{o}" for c, o, _, _ in BAD_OPTIONS]
)
def test_a_bad_option_raises_a_value_error_naming_it_and_its_range(
    cls: str, option: str, value: object, allowed: str
) -> None:
    async def make() -> object:  # on a loop, as clients are made
        return MAKERS[cls](**{option: value})

    with pytest.raises(ValueError, match=rf"^{option} must be {re.escape(allowed)}, not ") as raised:
        run(make())
    assert isinstance(raised.value, OptionError)


@pytest.mark.parametrize(
    "cls", [Producer, PushConsumer, LitePullConsumer, SimpleConsumer], ids=lambda cls: cls.__name__
)
def test_a_bad_group_name_is_an_option_error(
    cls: type[Producer | PushConsumer | LitePullConsumer | SimpleConsumer],
) -> None:
    async def make() -> object:
        return cls("bad group!", "127.0.0.1:1")

    with pytest.raises(OptionError, match=r"group 'bad group!': "):
        run(make())


# ---------------------------------------------------------------------------------------------
# close(timeout)


class SilentBroker(ScriptedBroker):
    """Leaves pulls and offset commits unanswered, keeping the commits it got; answers the rest as
    :class:`ScriptedBroker` does (sends by its script)."""

    def __init__(self, script: list[int]) -> None:
        super().__init__("broker-s", script)
        self.commits: list[dict[str, str]] = []

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.commits.append(dict(request.ext_fields))
            return None
        if request.code == RequestCode.PULL_MESSAGE:
            return None
        return super().handle(conn, request)


def test_lite_pull_close_gives_up_an_unanswered_last_commit_after_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with serving(SilentBroker([])) as (namesrv, broker):
            # Without close's timeout the commit would wait for the request timeout, past run()'s.
            consumer = LitePullConsumer("GID_conv_close", namesrv, request_timeout=600.0)
            queue = MessageQueue("Scripted", "broker-s", 0)
            consumer.assign([queue])
            consumer.seek(queue, 7)
            await consumer.start()
            closing = asyncio.create_task(consumer.close(timeout=2.0))
            await wait_until(lambda: bool(broker.commits), message="the last commit sent")
            await closing
            assert consumer.state is ClientState.CLOSED
            assert broker.commits[0]["commitOffset"] == "7"

    with caplog.at_level(logging.WARNING, logger="cometmq.client"):
        run(scenario())
    assert "cannot commit offsets on close" in caplog.text


def test_producer_close_ends_callback_sends_still_unanswered_after_its_timeout() -> None:
    async def scenario() -> None:
        async with scripted([SILENT]) as (namesrv, broker):
            producer = Producer("PID_conv_close", namesrv, send_timeout=600.0)
            await producer.start()
            outcomes: list[SendResult | BaseException] = []
            producer.send_with_callback(Message("Scripted", b"never answered"), outcomes.append)
            await wait_until(lambda: bool(broker.sends), message="the send written")
            await producer.close(timeout=0.5)
            [outcome] = outcomes
            assert isinstance(outcome, ClientStateError)
            assert "closed before this send had its answer" in str(outcome)

    run(scenario())


class CloseRecorder:
    """A stand-in asyncio client that keeps the timeouts it was closed with."""

    timeouts: list[float] = []

    async def close(self, timeout: float = 10.0) -> None:
        CloseRecorder.timeouts.append(timeout)


class BlockingCloseRecorder(blocking._BlockingClient):
    _target = f"{__name__}:CloseRecorder"


def test_the_blocking_facade_passes_close_timeout_through_and_closes_once() -> None:
    CloseRecorder.timeouts.clear()
    BlockingCloseRecorder().close(timeout=2.5)
    recorder = BlockingCloseRecorder()
    recorder.close()
    recorder.close(timeout=1.0)  # closed already: nothing more
    assert CloseRecorder.timeouts == [2.5, 10.0]


# ---------------------------------------------------------------------------------------------
# SQL92 on the lite pull consumer


@pytest.fixture
def sql_server(tmp_path: Path) -> Iterator[StandaloneServer]:
    with standalone_with_conf(tmp_path, "enablePropertyFilter=true\n") as server:
        yield server


def test_a_lite_pull_consumer_subscribed_with_sql92_receives_only_the_matching_messages(
    sql_server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        async with AdminClient(sql_server.namesrv) as admin:
            await admin.create_topic("LpSql", 2)
        async with Producer("PID_lp_sql", sql_server.namesrv) as producer:
            for i in range(20):
                props = {"color": ["red", "blue"][i % 2], "size": str(i)}
                await producer.send(Message("LpSql", b"s-%d" % i, properties=props))
        consumer = LitePullConsumer("GID_lp_sql", sql_server.namesrv, consume_from="first")
        consumer.subscribe("LpSql", "color = 'red' AND size >= 10", sql92=True)
        received: list[ReceivedMessage] = []
        async with consumer:

            async def read_to_the_end() -> bool:
                received.extend(await consumer.poll(timeout=0.2))
                queues = consumer.assignment()
                ends = [await consumer.end_offset(q) for q in queues]
                return len(queues) == 2 and all(
                    consumer.position(q) == end for q, end in zip(queues, ends, strict=True)
                )

            await wait_until(read_to_the_end, message="the consumer at the end of both queues", timeout=60)
        assert sorted(m.body for m in received) == sorted(b"s-%d" % i for i in range(10, 20, 2))

    run(scenario())
