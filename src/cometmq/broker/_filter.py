"""SQL92 property filters on the broker: compiled once per subscription, applied on pull, and the
CHECK_CLIENT_CONFIG (46) request the Java client sends to validate one before it starts.

SQL92 needs each message's properties, so the pull hands the store :func:`record_filter`, which
decodes the properties of each stored record the store reads and keeps the matching ones (RocketMQ's
isMatchedByCommitLog). Filtered-out messages still move ``nextBeginOffset`` past them, and one pull
scans as many consume-queue units as a tag-filtered one, as in RocketMQ.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from cometmq.broker.sql92 import Sql92Filter, compile_sql92
from cometmq.errors import RequestRefused, Sql92Error
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.jsonbody import as_object, java_string, json_object
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import BORNHOST_V6_FLAG, FIXED_HEAD_SIZE, STOREHOST_V6_FLAG
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SubscriptionData
from cometmq.remoting import Connection

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

_I32: Final = struct.Struct(">i")
_U16: Final = struct.Struct(">H")


# What ``MessageStore.get_messages`` takes as ``record_filter``: keep this stored record?
RecordFilter = Callable[[memoryview], bool]


def sql92_disabled_remark(expression_type: str) -> str:
    # RocketMQ's exact remark (PullMessageProcessor, ClientManageProcessor).
    return f"The broker does not support consumer to filter message by {expression_type}"


def parse_failed_remark(error: Sql92Error, group: str, topic: str) -> str:
    # RocketMQ's remark, plus where and what is wrong: RocketMQ says only the first half.
    return f"parse the consumer's subscription failed: group {group}, topic {topic}: {error}"


def check_heartbeat_subscriptions(group: str, subscriptions: Iterable[SubscriptionData]) -> None:
    """Compile the SQL92 subscriptions of a heartbeat's consumer group; an unparsable one refuses the
    heartbeat with SUBSCRIPTION_PARSE_FAILED. (RocketMQ accepts such a heartbeat and answers the
    group's pulls with FILTER_DATA_NOT_EXIST instead; failing where the expression arrives names the
    problem.)"""
    for sub in subscriptions:
        if sub.expression_type != EXPRESSION_SQL92:
            continue
        try:
            compiled_sql92(sub.sub_string)
        except Sql92Error as exc:
            raise RequestRefused(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, parse_failed_remark(exc, group, sub.topic)
            ) from None


@functools.lru_cache(maxsize=1024)
def compiled_sql92(expression: str) -> Sql92Filter:
    """``compile_sql92(expression)``, once per expression rather than per pull (a compiled filter holds
    no state, so all groups share it). Bounded: a client that sends a new expression per pull must not
    grow the broker's memory. Raises :class:`Sql92Error` (not cached) for an expression RocketMQ would
    refuse."""
    return compile_sql92(expression)


def record_properties(record: memoryview) -> dict[str, str]:
    """The properties of one stored message record (layout in ``protocol/record.py``), without copying
    its body. Decoding the properties costs more than evaluating a filter on them
    (``bench/sql92.py``)."""
    sys_flag = _I32.unpack_from(record, 36)[0]
    at = FIXED_HEAD_SIZE  # BODYLENGTH, with IPv4 hosts; each IPv6 host is 12 bytes longer
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG):
        at += 12 * bool(sys_flag & BORNHOST_V6_FLAG) + 12 * bool(sys_flag & STOREHOST_V6_FLAG)
    at += 4 + _I32.unpack_from(record, at)[0]  # TOPICLENGTH
    at += 1 + record[at]  # PROPERTIESLENGTH
    (length,) = _U16.unpack_from(record, at)
    at += 2
    return decode_properties(str(record[at : at + length], "utf-8"))


def record_filter(flt: Sql92Filter) -> RecordFilter:
    """*flt* as the store's ``record_filter``: applied to the properties of each stored record."""
    matches = flt.matches
    return lambda record: matches(record_properties(record))


class CheckClientConfigProcessor:
    """CHECK_CLIENT_CONFIG (46): the Java client asks whether its subscription would work here, and
    refuses to start when not. Codes and remarks as RocketMQ's ClientManageProcessor."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def check_client_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        what = "CheckClientRequestBody"
        body = json_object(request.body, what) if request.body else {}
        subscription = body.get("subscriptionData")
        if subscription is None:
            return request.response()  # nothing to check
        subscription = as_object(subscription, "SubscriptionData")
        expression_type = java_string(subscription, "expressionType", "SubscriptionData", default="")
        expression_type = expression_type or EXPRESSION_TAG
        expression = java_string(subscription, "subString", "SubscriptionData", default="")
        topic = java_string(subscription, "topic", "SubscriptionData", default="")
        group = java_string(body, "group", what, default="")
        if expression_type == EXPRESSION_TAG:
            return request.response()
        if not self._broker.config.enable_property_filter:
            return request.response(ResponseCode.SYSTEM_ERROR, sql92_disabled_remark(expression_type))
        if expression_type != EXPRESSION_SQL92:
            return request.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"unknown expression type {expression_type}"
            )
        try:
            compiled_sql92(expression)
        except Sql92Error as exc:
            remark = parse_failed_remark(exc, group, topic)
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark)
        return request.response()
