"""Uses of the blocking clients that mypy must accept, and misuses it must reject: a line that must fail
carries ``# E: <error code>``. Never run; tests/client/test_blocking_types.py type-checks it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import assert_type

from cometmq.client.blocking import AdminClient, LitePullConsumer, Producer, PushConsumer, TransactionProducer
from cometmq.client.consumer import ConsumeResult
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult
from cometmq.client.transaction import TransactionSendResult, TransactionState
from cometmq.protocol.route import BrokerData, TopicRouteData


def on_sent(result: SendResult | BaseException) -> None:
    print(result)


def handle(messages: list[ReceivedMessage]) -> ConsumeResult:
    return ConsumeResult.SUCCESS


def count(messages: list[ReceivedMessage]) -> int:
    return len(messages)


def produce(namesrv: str, msg: Message, queue: MessageQueue) -> None:
    with Producer("GID_sample", namesrv, send_timeout=5.0) as producer:
        assert_type(producer, Producer)
        assert_type(producer.client_id, str)
        assert_type(producer.send(msg, sharding_key="order-1"), SendResult)
        producer.send_oneway(msg, sharding_key="order-1")
        producer.send_with_callback(msg, on_sent, queue=queue)
        _sent: int = producer.send_oneway(msg)  # E: func-returns-value, assignment
        producer.send_with_callback(msg, lambda result: print(result.msg_id))  # E: union-attr
    Producer("GID_sample", namesrv, queue_selector=lambda queues, key: queues[len(key) % len(queues)])
    Producer("GID_sample", namesrv, retries=3)  # E: call-arg
    Producer("GID_sample", namesrv, poll_name_server_interval=5.0)
    Producer("GID_sample", namesrv, poll_name_server_interval="5")  # E: arg-type


def checked(message: ReceivedMessage) -> TransactionState:
    return TransactionState.COMMIT


def transact(namesrv: str, msg: Message) -> None:
    with TransactionProducer("GID_sample", namesrv, check=checked, send_timeout=5.0) as producer:
        result = producer.send_in_transaction(msg, lambda message: TransactionState.COMMIT)
        assert_type(result, TransactionSendResult)
        assert_type(producer.send(msg), SendResult)
        with producer.transaction() as transaction:
            assert_type(transaction.send(msg), SendResult)
            assert_type(transaction.transaction_id, str)
        producer.send_in_transaction(msg, lambda message: True)  # E: arg-type, return-value
    TransactionProducer("GID_sample", namesrv)  # E: call-arg
    TransactionProducer("GID_sample", namesrv, check=count)  # E: arg-type


def consume(namesrv: str, queue: MessageQueue) -> None:
    push = PushConsumer("GID_sample", namesrv, consume_from="first", offsets_dir=Path("/tmp"))
    push.subscribe("Orders", "created || paid")
    push.listen(handle)
    push.listen(count)  # E: arg-type
    assert_type(push.offsets_path, Path | None)
    for message in push:
        assert_type(message, ReceivedMessage)
        push.retry_later(message)
    PushConsumer("GID_sample", namesrv, consume_from="yesterday")  # E: arg-type
    PushConsumer("GID_sample", namesrv, poll_name_server_interval=5.0)

    with LitePullConsumer("GID_sample", namesrv, poll_name_server_interval=5.0) as lite:
        lite.assign(lite.fetch_queues("Orders"))
        assert_type(lite.poll(timeout=1.0), list[ReceivedMessage])
        assert_type(lite.committed(queue), int | None)
        assert_type(lite.read(queue, 0, 100, max_batch=10), Iterator[list[ReceivedMessage]])
        lite.poll(timeout="5")  # E: arg-type


def administer(namesrv: str) -> None:
    with AdminClient(namesrv, timeout=2.0) as admin:
        assert_type(admin.create_topic("Orders", 4), list[BrokerData])
        assert_type(admin.topic_route("Orders"), TopicRouteData)
        admin.reset_offsets("GID_sample", "Orders", to="earliest")
        admin.create_topic(123)  # E: arg-type
        _route: int = admin.topic_route("Orders")  # E: assignment
