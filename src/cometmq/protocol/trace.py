"""Message trace records, as RocketMQ's clients write them (docs/protocol.md#message-trace).

A trace message's body is a run of records, each ended by ``\\x02``; a record's fields are separated by
``\\x01``; the first field names its type. A client with tracing on writes a ``Pub`` record after each
send, a ``SubBefore`` and a ``SubAfter`` record per message around each consumed batch, and an
``EndTransaction`` record after each END_TRANSACTION. Missing strings (no tags, no keys) are written
``null``, as Java's StringBuilder renders a null; they decode back to None.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cometmq.errors import ProtocolError
from cometmq.protocol.properties import KEY_SEPARATOR

__all__ = [
    "CONTENT_SEPARATOR",
    "DEFAULT_REGION",
    "FIELD_SEPARATOR",
    "ConsumeReturnType",
    "MessageType",
    "TraceBean",
    "TraceContext",
    "TraceEvent",
    "TraceType",
    "decode_trace_contexts",
    "encode_trace_context",
    "encode_trace_contexts",
    "trace_event",
    "trace_keys",
]

CONTENT_SEPARATOR = "\x01"  # between the fields of a record (TraceConstants.CONTENT_SPLITOR)
FIELD_SEPARATOR = "\x02"  # after each record (TraceConstants.FIELD_SPLITOR)
DEFAULT_REGION = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID: a broker's regionId by default
_NULL = "null"


class TraceType(enum.Enum):
    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """RocketMQ's MessageType, written as its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3


class ConsumeReturnType(enum.IntEnum):
    """How a consumed batch ended (a SubAfter record's context code, the ordinal)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceBean:
    """One message of a trace record. ``msg_id`` is the client's unique id (UNIQ_KEY);
    ``offset_msg_id`` the broker's. ``client_host`` is not in 4.x records: a reader fills it in from
    the trace message's born host. ``transaction_state`` is LocalTransactionState's name
    (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW)."""

    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    client_host: str = ""
    retry_times: int = 0
    body_length: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    transaction_id: str | None = None
    transaction_state: str = ""
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """One trace record (several for a SubBefore or SubAfter of a batch: one per bean).
    ``timestamp`` is ms since the epoch; ``cost_time`` ms (per message for a consumed batch)."""

    trace_type: TraceType
    timestamp: int = 0
    region_id: str = DEFAULT_REGION
    group_name: str = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)


def _text(value: str | None) -> str:
    return _NULL if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_trace_context(ctx: TraceContext) -> str:
    """The records of *ctx*, each ended by FIELD_SEPARATOR (TraceDataEncoder.encoderFromContextBean).
    Pub and EndTransaction write their first bean only, as RocketMQ does."""
    kind = ctx.trace_type
    if not ctx.beans:
        return ""
    if kind is TraceType.Pub:
        bean = ctx.beans[0]
        fields: Sequence[str] = (
            kind.value, str(ctx.timestamp), ctx.region_id, ctx.group_name, bean.topic, bean.msg_id,
            _text(bean.tags), _text(bean.keys), bean.store_host, str(bean.body_length), str(ctx.cost_time),
            str(int(bean.msg_type)), bean.offset_msg_id, _bool(ctx.success),
        )  # fmt: skip
        return CONTENT_SEPARATOR.join(fields) + FIELD_SEPARATOR
    if kind is TraceType.EndTransaction:
        bean = ctx.beans[0]
        fields = (
            kind.value, str(ctx.timestamp), ctx.region_id, ctx.group_name, bean.topic, bean.msg_id,
            _text(bean.tags), _text(bean.keys), bean.store_host, str(int(bean.msg_type)),
            _text(bean.transaction_id), bean.transaction_state, _bool(bean.from_transaction_check),
        )  # fmt: skip
        return CONTENT_SEPARATOR.join(fields) + FIELD_SEPARATOR
    records = []
    for bean in ctx.beans:
        if kind is TraceType.SubBefore:
            fields = (
                kind.value, str(ctx.timestamp), ctx.region_id, ctx.group_name, ctx.request_id,
                bean.msg_id, str(bean.retry_times), _text(bean.keys),
            )  # fmt: skip
        else:
            fields = (
                kind.value, ctx.request_id, bean.msg_id, str(ctx.cost_time), _bool(ctx.success),
                _text(bean.keys), str(ctx.context_code), str(ctx.timestamp), ctx.group_name,
            )  # fmt: skip
        records.append(CONTENT_SEPARATOR.join(fields) + FIELD_SEPARATOR)
    return "".join(records)


def encode_trace_contexts(contexts: Iterable[TraceContext]) -> bytes:
    """A trace message's body: the records of *contexts* one after the other, in UTF-8."""
    return "".join(encode_trace_context(ctx) for ctx in contexts).encode()


# What each record says happened.
_EVENTS = {
    TraceType.Pub: "sent",
    TraceType.EndTransaction: "transaction ended",
    TraceType.SubBefore: "consume started",
    TraceType.SubAfter: "consumed",
}


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One record of a message's trace as a line of its timeline (``cometmq message trace``, the
    dashboard's trace page). ``timestamp`` is ms since the epoch, 0 when the record has none;
    ``cost`` and ``status`` are empty for the records that have neither (SubBefore, EndTransaction).
    Groups, hosts and the details hold what clients wrote: shown as text, escaped."""

    trace_type: TraceType
    timestamp: int
    event: str
    group: str
    client: str
    cost: str
    status: str
    details: str


def trace_event(ctx: TraceContext) -> TraceEvent:
    """The timeline line of *ctx*'s first bean (a context of :meth:`AdminClient.message_trace` holds
    the one message's bean)."""
    bean = ctx.beans[0]
    timed = ctx.trace_type in (TraceType.Pub, TraceType.SubAfter)
    return TraceEvent(
        trace_type=ctx.trace_type,
        timestamp=ctx.timestamp,
        event=_EVENTS[ctx.trace_type],
        group=ctx.group_name or "-",
        client=bean.client_host or "-",
        cost=f"{ctx.cost_time} ms" if timed else "",
        status=("success" if ctx.success else "failed") if timed else "",
        details=_details(ctx.trace_type, bean),
    )


def _details(kind: TraceType, bean: TraceBean) -> str:
    parts: list[str] = []
    if kind is TraceType.Pub:
        parts.append(f"topic {bean.topic}")
        if bean.tags:
            parts.append(f"tags {bean.tags}")
        if bean.keys:
            parts.append(f"keys {bean.keys}")
        parts += [f"stored at {bean.store_host or '-'}", f"offset id {bean.offset_msg_id or '-'}"]
        parts += [f"{bean.body_length} bytes", bean.msg_type.name]
    elif kind is TraceType.EndTransaction:
        parts += [bean.transaction_state, f"transaction {bean.transaction_id or '-'}"]
        parts.append(f"at {bean.store_host or '-'}")
        if bean.from_transaction_check:
            parts.append("answering a check-back")
    elif kind is TraceType.SubBefore:
        parts.append(f"retry {bean.retry_times}" if bean.retry_times else "first delivery")
    return ", ".join(parts)


def trace_keys(ctx: TraceContext) -> set[str]:
    """The keys a trace message carrying *ctx* is indexed by: each message's id and its own keys, so
    that QUERY_MESSAGE on the trace topic by a message id (or key) finds its records."""
    keys: set[str] = set()
    for bean in ctx.beans:
        keys.add(bean.msg_id)
        if bean.keys:
            keys.update(key for key in bean.keys.split(KEY_SEPARATOR) if key)
    return keys


def decode_trace_contexts(body: bytes | str) -> list[TraceContext]:
    """The records of a trace message's body, one context (of one bean) each
    (TraceDataEncoder.decoderFromTraceDataString). Records of an unknown type are skipped, as RocketMQ
    skips them; a record too short or with a bad number raises :class:`ProtocolError`."""
    text = body if isinstance(body, str) else body.decode("utf-8", "replace")
    contexts = []
    for record in text.split(FIELD_SEPARATOR):
        line = record.split(CONTENT_SEPARATOR)
        try:
            ctx = _decode_record(line)
        except (IndexError, ValueError) as exc:
            raise ProtocolError(f"trace record {record[:80]!r} cannot be decoded: {exc}") from None
        if ctx is not None:
            contexts.append(ctx)
    return contexts


def _nullable(text: str) -> str | None:
    return None if text == _NULL else text


def _parse_bool(text: str) -> bool:
    return text.lower() == "true"  # Java's Boolean.parseBoolean


def _decode_record(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == "Pub":
        pub = TraceContext(TraceType.Pub, int(line[1]), line[2], line[3], cost_time=int(line[10]))
        bean = TraceBean(
            topic=line[4],
            msg_id=line[5],
            tags=_nullable(line[6]),
            keys=_nullable(line[7]),
            store_host=line[8],
            body_length=int(line[9]),
            msg_type=MessageType(int(line[11])),
        )
        if len(line) == 13:  # a RocketMQ client older than offsetMsgId in Pub records
            pub.success = _parse_bool(line[12])
        elif len(line) >= 14:
            bean.offset_msg_id = line[12]
            pub.success = _parse_bool(line[13])
            if len(line) >= 15:  # RocketMQ 5 adds the client's host
                bean.client_host = line[14]
        pub.beans.append(bean)
        return pub
    if kind == "SubBefore":
        before = TraceContext(TraceType.SubBefore, int(line[1]), line[2], line[3], request_id=line[4])
        before.beans.append(TraceBean(msg_id=line[5], retry_times=int(line[6]), keys=_nullable(line[7])))
        return before
    if kind == "SubAfter":
        after = TraceContext(
            TraceType.SubAfter,
            request_id=line[1],
            cost_time=int(line[3]),
            success=_parse_bool(line[4]),
            region_id="",
        )
        after.beans.append(TraceBean(msg_id=line[2], keys=_nullable(line[5])))
        if len(line) >= 7:
            after.context_code = int(line[6])
        if len(line) >= 9:  # absent from older clients' records
            after.timestamp = int(line[7])
            after.group_name = line[8]
        return after
    if kind == "EndTransaction":
        end = TraceContext(TraceType.EndTransaction, int(line[1]), line[2], line[3])
        end.beans.append(
            TraceBean(
                topic=line[4],
                msg_id=line[5],
                tags=_nullable(line[6]),
                keys=_nullable(line[7]),
                store_host=line[8],
                msg_type=MessageType(int(line[9])),
                transaction_id=_nullable(line[10]),
                transaction_state=line[11],
                from_transaction_check=_parse_bool(line[12]),
            )
        )
        return end
    return None
