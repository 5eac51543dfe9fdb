"""A cluster as a 4.x client reaches it, for servers that act as one (the RocketMQ 5 proxy): the shared
:class:`ClientInstance` (routes from the name servers, one remoting connection per broker, heartbeats,
check-backs of transactions), the typed decoding of broker answers and the one send header."""

from cometmq.client._brokerapi import send_header
from cometmq.client._instance import ClientInstance, ConsumerMember, TransactionMember, decode_answer

__all__ = ["ClientInstance", "ConsumerMember", "TransactionMember", "decode_answer", "send_header"]
