"""The values a client application handles: messages to send, messages received, queues, send results."""

from __future__ import annotations

import enum
import logging
import struct
from dataclasses import dataclass, field

from cometmq.errors import ProtocolError, RecordError
from cometmq.protocol.batch import batch_spans
from cometmq.protocol.pop import POP_CK
from cometmq.protocol.properties import KEY_SEPARATOR, decode_properties
from cometmq.protocol.record import (
    INNER_BATCH_FLAG,
    MAX_TOPIC_SIZE,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    NEED_UNWRAP_FLAG,
    DecodedRecord,
    decode_host,
    inflate_body,
    iter_records,
    offset_msg_id,
)
from cometmq.protocol.transaction import TRANSACTION_ID

log = logging.getLogger(__name__)

__all__ = [
    "Message",
    "MessageQueue",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "decode_pulled",
]

# Property names (docs/protocol.md#properties).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_DELAY = "DELAY"
# RocketMQ 5's timer messages: the delivery time asked for (epoch ms), and the one the broker parked the
# message until (also for a delay asked relative to the send).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"

# The only bit C++ and JS consumers test; zlib is implied (docs/protocol.md#message-sysflag).
SYSFLAG_COMPRESSED = 0x1


@dataclass(slots=True)
class Message:
    """A message to send.

    ``keys`` are what the broker indexes for lookups (``cometmq message query --key``): one string,
    or several given as a list (stored space-separated, as RocketMQ does). ``properties`` are user
    properties; names RocketMQ reserves (``KEYS``, ``TAGS``, ``DELAY``, ``UNIQ_KEY``, …) are set through
    the other fields. ``delay_level`` 1 to 18 parks the message until its level's delay has passed
    (1s 5s 10s 30s 1m … 2h). ``deliver_at_ms`` (epoch ms, RocketMQ 5's delivery timestamp) parks it
    until then instead: consumers get it not before that time, which may be up to the broker's
    ``timerMaxDelaySec`` (3 days by default) ahead; a time already past delivers at once. ``delay_ms``
    (RocketMQ's TIMER_DELAY_MS) parks it for that long after the broker stores it, whatever the
    sender's clock says.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    deliver_at_ms: int | None = None
    delay_ms: int | None = None


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; the unit of ordering, of offsets and of rebalancing."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class SendStatus(enum.IntEnum):
    """How a send ended. Anything but SEND_OK means the message is stored but not as safe as asked:
    the broker could not flush (SYNC_FLUSH) or replicate it in time."""

    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


@dataclass(slots=True)
class SendResult:
    """What the broker answered. ``msg_id`` is the client's unique id (UNIQ_KEY), as RocketMQ's
    clients report it; ``offset_msg_id`` is the broker's id (store host + commit-log offset). For a
    batch both are comma-separated, one per message. ``region_id`` and ``trace_on`` are the broker's
    regionId and traceOn settings (a broker with traceOn=false asks clients not to trace its sends)."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    region_id: str = "DefaultRegion"
    trace_on: bool = True


# flag, commitlog offset, born timestamp, born host, store timestamp, store host (docs/protocol.md#record).
_HeadFields = tuple[int, int, int, bytes, int, bytes]


class ReceivedMessage:
    """A message as a consumer receives it.

    Properties are decoded on first use, and so are the head fields a consumer rarely reads (``flag``,
    ``commitlog_offset``, the timestamps and hosts): a consumer that only reads ``body`` pays for
    neither.
    """

    __slots__ = (
        "_head",
        "_properties",
        "_properties_raw",
        "body",
        "broker_name",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "sys_flag",
        "topic",
    )

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    sys_flag: int
    reconsume_times: int
    broker_name: str
    # The record's bytes from FLAG to STOREHOST, or (once read, or from the general decoder) the
    # fields themselves, as _HeadFields orders them.
    _head: bytes | _HeadFields
    _properties_raw: bytes | str
    _properties: dict[str, str] | None

    def __init__(self, record: DecodedRecord, broker_name: str) -> None:
        self.topic = record.topic
        body = record.body
        if record.sys_flag & SYSFLAG_COMPRESSED:
            body = _inflated(body, record.topic, record.queue_id, record.queue_offset)
        self.body = body
        self.queue_id = record.queue_id
        self.queue_offset = record.queue_offset
        self.sys_flag = record.sys_flag
        self.reconsume_times = record.reconsume_times
        self.broker_name = broker_name
        self._head = (
            record.flag,
            record.commitlog_offset,
            record.born_timestamp,
            record.born_host,
            record.store_timestamp,
            record.store_host,
        )
        self._properties_raw = record.properties
        self._properties = None

    def _fields(self) -> _HeadFields:
        head = self._head
        if isinstance(head, bytes):
            head = self._head = _LAZY_HEAD.unpack(head)
        return head

    @property
    def flag(self) -> int:
        """The producer's flag (``Message.flag``)."""
        return self._fields()[0]

    @property
    def commitlog_offset(self) -> int:
        """Where the record starts in the broker's commit log."""
        return self._fields()[1]

    @property
    def born_timestamp(self) -> int:
        """When the producer sent the message, in ms since the epoch (the producer's clock)."""
        return self._fields()[2]

    @property
    def born_host_raw(self) -> bytes:
        """The producer's address as the record stores it (see ``born_host``)."""
        return self._fields()[3]

    @property
    def store_timestamp(self) -> int:
        """When the broker stored the message, in ms since the epoch (the broker's clock)."""
        return self._fields()[4]

    @property
    def store_host_raw(self) -> bytes:
        """The broker's address as the record stores it (see ``store_host``)."""
        return self._fields()[5]

    @property
    def properties(self) -> dict[str, str]:
        """Every property, system ones included (``TAGS``, ``KEYS``, ``UNIQ_KEY``, …)."""
        props = self._properties
        if props is None:
            raw = self._properties_raw
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
            props = self._properties = decode_properties(text)
        return props

    @property
    def tags(self) -> str | None:
        """The TAGS property: the one tag the producer set, or None."""
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split at spaces (only spaces, as the broker's index splits it: each key
        listed here finds the message in ``AdminClient.query_message``)."""
        return [key for key in self.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if key]

    @property
    def is_inner_batch(self) -> bool:
        """Whether the message was stored inside an inner batch (a BatchCQ topic's record holding many
        messages: ``commitlog_offset`` and ``offset_msg_id`` are then the whole record's)."""
        return self.sys_flag & INNER_BATCH_FLAG != 0

    @property
    def offset_msg_id(self) -> str:
        """The broker's id of the stored record: store host and commit-log offset, 32 hex digits."""
        return offset_msg_id(self.store_host_raw, self.commitlog_offset)

    @property
    def msg_id(self) -> str:
        """The client's unique id when the producer set one (every RocketMQ client but JS does),
        else the broker's offset id: what RocketMQ's clients show as the message id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def transaction_id(self) -> str:
        """The transaction the message was sent in: its ``__transactionId__`` property (every message
        of a CometMQ transaction of several messages carries it), else its UNIQ_KEY (what RocketMQ's
        clients use as a single message's transaction id)."""
        props = self.properties
        return props.get(TRANSACTION_ID) or props.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def queue(self) -> MessageQueue:
        """The queue the message was read from, as ``topic``, ``broker_name``, ``queue_id`` name it (for
        a retried message: its original topic with the retry queue's id)."""
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def delay_level(self) -> int:
        """The DELAY property (0 when the message was not delayed)."""
        return int(self.properties.get(PROPERTY_DELAY, "0") or 0)

    @property
    def deliver_at_ms(self) -> int | None:
        """When a timer message was to be delivered (epoch ms): the time its producer asked for, or
        the broker's reckoning of a delay asked relative to the send; None for any other message."""
        properties = self.properties
        text = properties.get(PROPERTY_TIMER_DELIVER_MS) or properties.get(PROPERTY_TIMER_OUT_MS)
        try:
            return int(text) if text else None
        except ValueError:
            return None

    @property
    def receipt_handle(self) -> str | None:
        """What settles a message a :class:`~cometmq.client.SimpleConsumer` received (its ``POP_CK``
        property, RocketMQ's receipt handle); None for a message pulled or pushed."""
        return self.properties.get(POP_CK)

    def set_receipt_handle(self, handle: str) -> None:
        """Replace the receipt handle (a changed invisible duration gives a new one)."""
        self.properties[POP_CK] = handle

    @property
    def delivery_attempt(self) -> int:
        """How many times the message has been delivered, this time included: its reconsume times + 1
        (RocketMQ 5's deliveryAttempt)."""
        return self.reconsume_times + 1

    @property
    def born_host(self) -> str:
        """``ip:port`` of the producer's connection."""
        host, port = decode_host(self.born_host_raw)
        return f"{host}:{port}"

    @property
    def store_host(self) -> str:
        """``ip:port`` of the broker that stored the message."""
        host, port = decode_host(self.store_host_raw)
        return f"{host}:{port}"

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, queue={self.broker_name}:{self.queue_id}, "
            f"offset={self.queue_offset}, tags={self.tags!r}, body={self.body[:32]!r})"
        )


# The record head up to BODYLENGTH with IPv4 hosts (docs/protocol.md#record), as protocol/record.py lays it
# out: the fields decode_pulled reads at once (TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, SYSFLAG,
# RECONSUMETIMES, BODYLENGTH), the others skipped as pad bytes (no int or bytes objects for them).
_HEAD = struct.Struct(">iI4xi4xq8xi32xi8xi")
# FLAG to STOREHOST: the bytes a message keeps and unpacks only when one of these fields is read.
_LAZY_HEAD = struct.Struct(">i8xq4xq8sq8s")
_LAZY_START = 16
_LAZY_END = _LAZY_START + _LAZY_HEAD.size
_HOST_V6_FLAGS = 0x30
_UNWRAP_FLAGS = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


def _inflated(stored: bytes | memoryview, topic: str, queue_id: int, queue_offset: int) -> bytes:
    """The body of a message stored compressed. One that does not inflate (a producer's bug, or a body
    inflating past the bound) is handed over as stored, with a warning: refusing it would stop every
    consumer of its queue at that message for ever (RocketMQ's clients skip such a record)."""
    try:
        return inflate_body(stored)
    except RecordError as exc:
        log.warning(
            "message %d of %s queue %d: %s; handed over as stored", queue_offset, topic, queue_id, exc
        )
        return bytes(stored)


def decode_pulled(body: bytes | memoryview, broker_name: str, first_offset: int = 0) -> list[ReceivedMessage]:
    """The messages in a pull response body (stored records laid end to end). A record holding an inner
    batch (a BatchCQ topic's) is split into its messages, the i-th at the record's queue offset + i, as
    RocketMQ 5's PullAPIWrapper does; those before *first_offset* (the pull's offset, which a batch may
    straddle) are left out.

    Malformed bytes raise :class:`cometmq.protocol.record.RecordError`.
    """
    # Consumer hot path (consume-from-start benchmark, 1 KiB messages): one struct unpack per record
    # of the fields every consumer reads, straight into the message's slots; one slice for the head
    # fields few read; slices of ``bytes`` (one copy, no memoryview objects); the topic decoded once
    # per body; properties decoded only when read. Anything unusual (IPv6 hosts, 5.x magic, blank
    # fillers, inconsistent lengths) goes through the general decoder in record.py.
    data = body if isinstance(body, bytes) else bytes(body)
    unpack = _HEAD.unpack_from
    new = ReceivedMessage.__new__
    startswith = data.startswith
    messages: list[ReceivedMessage] = []
    append = messages.append
    topic = ""
    topic_raw = b"\xff"  # no topic starts like this: the first record decodes its topic
    pos = 0
    end = len(data)
    last_start = end - MIN_RECORD_SIZE  # a record starting later cannot be whole
    while pos <= last_start:
        m = new(ReceivedMessage)
        total, magic, m.queue_id, m.queue_offset, sys_flag, m.reconsume_times, n = unpack(data, pos)
        limit = pos + total
        at = pos + 88 + n
        if magic != MESSAGE_MAGIC_CODE or sys_flag & _HOST_V6_FLAGS or n < 0 or at + 3 > limit or limit > end:
            messages.extend(_decode_slow(data, pos, end, broker_name, first_offset))
            return messages
        t = data[at]
        tp = at + 1 + t
        if t > MAX_TOPIC_SIZE or tp + 2 > limit or (data[tp] << 8 | data[tp + 1]) != limit - tp - 2:
            messages.extend(_decode_slow(data, pos, end, broker_name, first_offset))
            return messages
        if t != len(topic_raw) or not startswith(topic_raw, at + 1):
            topic_raw = data[at + 1 : tp]
            try:
                topic = topic_raw.decode()
            except UnicodeDecodeError as exc:
                raise RecordError(f"record at {pos}: {exc}") from None
        m.topic = topic
        m.sys_flag = sys_flag
        m.body = data[pos + 88 : at]
        if sys_flag & SYSFLAG_COMPRESSED:
            m.body = _inflated(m.body, topic, m.queue_id, m.queue_offset)
        m._head = data[pos + _LAZY_START : pos + _LAZY_END]
        m._properties_raw = data[tp + 2 : limit]
        m._properties = None
        m.broker_name = broker_name
        if sys_flag & _UNWRAP_FLAGS == _UNWRAP_FLAGS:
            messages += _unwrapped(m, first_offset)
        else:
            append(m)
        pos = limit
    if pos < end:
        messages.extend(_decode_slow(data, pos, end, broker_name, first_offset))
    return messages


def _decode_slow(
    data: bytes, pos: int, end: int, broker_name: str, first_offset: int
) -> list[ReceivedMessage]:
    messages: list[ReceivedMessage] = []
    for record in iter_records(memoryview(data)[pos:end]):
        m = ReceivedMessage(record, broker_name)
        if m.sys_flag & _UNWRAP_FLAGS == _UNWRAP_FLAGS:
            messages += _unwrapped(m, first_offset)
        else:
            messages.append(m)
    return messages


def _unwrapped(batch: ReceivedMessage, first_offset: int) -> list[ReceivedMessage]:
    """The messages of an inner-batch record from *first_offset* on: each its own flag, body and
    properties, the record's everything else (RocketMQ 5's MessageDecoder.decodeMessage), the record's
    sys flag included, which tells such a message (``is_inner_batch``). A record whose body is not a
    well-formed batch is delivered whole, one message, with a warning.

    Hot path of inner-batch consume (``cometmq bench consume --inner-batch``): per message, an object, a
    tuple and two slices."""
    data = batch.body
    _flag, coff, born_ts, born_host, store_ts, store_host = batch._fields()
    topic = batch.topic
    queue_id = batch.queue_id
    sys_flag = batch.sys_flag
    reconsume_times = batch.reconsume_times
    broker_name = batch.broker_name
    offset = batch.queue_offset
    new = ReceivedMessage.__new__
    messages: list[ReceivedMessage] = []
    append = messages.append
    try:
        for flag, body_start, body_end, props_end in batch_spans(data):
            if offset >= first_offset:
                m = new(ReceivedMessage)
                m.topic = topic
                m.queue_id = queue_id
                m.queue_offset = offset
                m.sys_flag = sys_flag
                m.reconsume_times = reconsume_times
                m.body = data[body_start:body_end]
                m._head = (flag, coff, born_ts, born_host, store_ts, store_host)
                m._properties_raw = data[body_end + 2 : props_end]
                m._properties = None
                m.broker_name = broker_name
                append(m)
            offset += 1
    except ProtocolError as exc:
        # Delivered whole, as one message (``is_inner_batch``), rather than wedging the queue.
        log.warning(
            "%s/%d: the inner batch at queue offset %d (commit-log offset %d) cannot be split (%s); "
            "delivered as one message",
            topic,
            queue_id,
            batch.queue_offset,
            coff,
            exc,
        )
        return [batch]
    return messages
