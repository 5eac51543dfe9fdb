"""A cluster as a 4.x client reaches it, for servers that act as one (the RocketMQ 5 proxy): the shared
:class:`ClientInstance` (routes from the name servers, one remoting connection per broker, heartbeats,
check-backs of transactions) and the typed decoding of broker answers."""

from cometmq.client._instance import ClientInstance, TransactionMember, decode_answer

__all__ = ["ClientInstance", "TransactionMember", "decode_answer"]
