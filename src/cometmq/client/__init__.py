"""Clients of a CometMQ (or RocketMQ) cluster."""

from cometmq.client._brokerapi import PullResult, PullStatus
from cometmq.client._lifecycle import ClientState
from cometmq.client._options import load_tls_context, security_options
from cometmq.client.admin import AdminClient
from cometmq.client.consumer import ConsumeResult, PushConsumer
from cometmq.client.litepull import LitePullConsumer
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.client.producer import Producer, QueueSelector, select_by_hash
from cometmq.client.simple import SimpleConsumer
from cometmq.client.transaction import (
    Transaction,
    TransactionProducer,
    TransactionSendResult,
    TransactionState,
)
from cometmq.errors import (
    ClientStateError,
    DataLossError,
    InvalidMessageError,
    MessageTooLargeError,
    NoRouteError,
)

__all__ = [
    "AdminClient",
    "ClientState",
    "ClientStateError",
    "ConsumeResult",
    "DataLossError",
    "InvalidMessageError",
    "LitePullConsumer",
    "Message",
    "MessageQueue",
    "MessageTooLargeError",
    "NoRouteError",
    "Producer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueSelector",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "Transaction",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
    "load_tls_context",
    "security_options",
    "select_by_hash",
]
