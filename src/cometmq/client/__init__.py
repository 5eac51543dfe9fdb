"""Clients of a CometMQ (or RocketMQ) cluster."""

from cometmq.client.admin import AdminClient
from cometmq.client.consumer import ConsumeResult, PushConsumer
from cometmq.client.litepull import DataLossError, LitePullConsumer
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.client.producer import (
    InvalidMessageError,
    MessageTooLargeError,
    NoRouteError,
    Producer,
    ProducerStateError,
    QueueSelector,
    select_by_hash,
)

__all__ = [
    "AdminClient",
    "ConsumeResult",
    "DataLossError",
    "InvalidMessageError",
    "LitePullConsumer",
    "Message",
    "MessageQueue",
    "MessageTooLargeError",
    "NoRouteError",
    "Producer",
    "ProducerStateError",
    "PushConsumer",
    "QueueSelector",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "select_by_hash",
]
