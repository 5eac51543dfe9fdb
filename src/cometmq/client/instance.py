"""A cluster as a 4.x client reaches it, for servers that act as one (the RocketMQ 5 proxy): the shared
:class:`ClientInstance` (routes from the name servers, one remoting connection per broker, heartbeats,
check-backs of transactions), the typed decoding of broker answers, the one send header, the
requests of offset-based consumers (a pull and the queue's offsets) and those of POP consumption (a
pop, an ack, a change of invisible time)."""

from cometmq.client._brokerapi import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    commit_offset,
    max_offset,
    min_offset,
    offset_for_timestamp,
    pull,
    query_offset,
    send_header,
)
from cometmq.client._instance import ClientInstance, ConsumerMember, TransactionMember, decode_answer
from cometmq.client._popapi import ack_header, change_invisible_header, changed_handle, pop_header, popped

__all__ = [
    "PULL_SUBSCRIPTION",
    "PULL_SUSPEND",
    "ClientInstance",
    "ConsumerMember",
    "TransactionMember",
    "ack_header",
    "change_invisible_header",
    "changed_handle",
    "commit_offset",
    "decode_answer",
    "max_offset",
    "min_offset",
    "offset_for_timestamp",
    "pop_header",
    "popped",
    "pull",
    "query_offset",
    "send_header",
]
