"""What the transaction producer's tests share: a name server with broker groups in this process (each
broker in a cluster of its own, so a topic can be put on one broker), a push consumer collecting what
it receives, and a checker that counts its calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from cometmq.broker import Broker, BrokerConfig
from cometmq.client import (
    AdminClient,
    ConsumeResult,
    Message,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
    TransactionState,
)
from cometmq.client.transaction import ExecuteFn
from cometmq.namesrv import NameServer
from waiting import wait_until

T = TypeVar("T")

GROUP = "PID_tx"

# Half messages are checked back soon after they are stored, and often.
TRANSACTION_SETTINGS: dict[str, Any] = {"transactionTimeOut": 1000, "transactionCheckInterval": 300}


def run(coro: Coroutine[Any, Any, T], timeout: float = 180.0) -> T:
    """Run one test coroutine on a fresh event loop, failing (not hanging) after ``timeout`` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def cluster(
    data_dir: Path, broker_names: tuple[str, ...] = ("broker-a",), **settings: Any
) -> AsyncIterator[tuple[str, dict[str, Broker]]]:
    """A name server and one broker per name, broker ``b`` in cluster ``cluster-b``: the name server's
    address and the brokers by name. *settings* are broker.conf keys for every broker."""
    namesrv = NameServer("127.0.0.1", 0)
    await namesrv.start()
    addr = f"127.0.0.1:{namesrv.port}"
    brokers: dict[str, Broker] = {}
    try:
        for name in broker_names:
            config = BrokerConfig()
            config.update(
                {
                    "storePathRootDir": str(data_dir / name),
                    "listenPort": 0,
                    "listenHost": "127.0.0.1",
                    "mappedFileSizeCommitLog": 1 << 20,
                    "mappedFileSizeConsumeQueue": 20 * 1000,
                    "namesrvAddr": addr,
                    "brokerName": name,
                    "brokerClusterName": f"cluster-{name}",
                    **TRANSACTION_SETTINGS,
                    **settings,
                }
            )
            broker = Broker(config)
            await broker.start()
            brokers[name] = broker
        yield addr, brokers
    finally:
        for broker in brokers.values():
            await broker.stop()
        await namesrv.stop()


async def create_topic(namesrv: str, topic: str, broker_name: str = "broker-a") -> None:
    """*topic* with one queue, on one broker."""
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, queues=1, cluster=f"cluster-{broker_name}")


class Received:
    """A push consumer's messages, by body."""

    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []

    def listen(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        self.messages.extend(messages)
        return ConsumeResult.SUCCESS

    @property
    def bodies(self) -> Counter[bytes]:
        return Counter(message.body for message in self.messages)

    async def wait_for(self, *bodies: bytes) -> None:
        await wait_until(
            lambda: all(self.bodies[body] for body in bodies),
            message=f"{bodies} delivered",
            timeout=60,
        )


@contextlib.asynccontextmanager
async def consuming(namesrv: str, group: str, *topics: str) -> AsyncIterator[Received]:
    """A push consumer of *topics* from their first message, collecting what it receives."""
    received = Received()
    consumer = PushConsumer(group, namesrv, consume_from="first")
    for topic in topics:
        consumer.subscribe(topic)
    consumer.listen(received.listen)
    async with consumer:
        yield received


@contextlib.asynccontextmanager
async def transacting(
    data_dir: Path, checker: Checker, topics: Mapping[str, str] | None = None, **settings: Any
) -> AsyncIterator[tuple[TransactionProducer, Received, dict[str, Broker]]]:
    """*topics* (topic: broker name; ``TxOrders`` on ``broker-a`` by default) on a cluster of their
    brokers, a transaction producer asking *checker* and a consumer of the topics: the producer, what the
    consumer received and the brokers by name. *settings* are broker.conf keys for every broker."""
    topics = topics or {"TxOrders": "broker-a"}
    async with cluster(data_dir, tuple(dict.fromkeys(topics.values())), **settings) as (namesrv, brokers):
        for topic, broker_name in topics.items():
            await create_topic(namesrv, topic, broker_name)
        async with (
            TransactionProducer(GROUP, namesrv, check=checker) as producer,
            consuming(namesrv, "GID_tx", *topics) as received,
        ):
            yield producer, received, brokers


class Checker:
    """A check callback answering *state*, counting its calls per transaction id."""

    def __init__(self, state: TransactionState) -> None:
        self.state = state
        self.calls: Counter[str] = Counter()
        self.messages: list[ReceivedMessage] = []

    def __call__(self, message: ReceivedMessage) -> TransactionState:
        self.calls[message.transaction_id] += 1
        self.messages.append(message)
        return self.state


def answer(state: TransactionState) -> ExecuteFn:
    """A local transaction answering *state*."""

    def execute(message: Message) -> TransactionState:
        return state

    return execute


async def commit_marker(producer: TransactionProducer, *topics: str) -> list[bytes]:
    """A committed message on each of *topics*: their bodies, as the consumer will see them."""
    bodies = []
    async with producer.transaction() as transaction:
        for topic in topics:
            body = f"marker {transaction.transaction_id} {topic}".encode()
            await transaction.send(Message(topic, body))
            bodies.append(body)
    return bodies
