"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from cometmq.broker._groups import max_reconsume_times
from cometmq.broker._schedule import delay_level_of, is_delayable
from cometmq.broker._timer import TIMER_REQUEST_PROPERTIES, drop_timer_properties
from cometmq.broker._transaction import to_half
from cometmq.errors import ProtocolError, RequestRefused
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.batch import BatchEntry, batch_spans, count_batch_entries, decode_batch_body
from cometmq.protocol.broker_headers import SendMessageRequestHeader, SendMessageResponseHeader
from cometmq.protocol.naming import (
    DEFAULT_TOPIC,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_FORBIDDEN_TOPICS,
)
from cometmq.protocol.properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    decode_properties,
    encode_properties,
    property_finder,
)
from cometmq.protocol.record import (  # the store enforces MAX_PROPERTIES_SIZE
    BORNHOST_V6_FLAG,
    INNER_BATCH_FLAG,
    INNER_NUM_PROPERTY,
    MAX_PROPERTIES_SIZE,
    NEED_UNWRAP_FLAG,
    STOREHOST_V6_FLAG,
)
from cometmq.protocol.taghash import java_string_hash
from cometmq.protocol.topic_config import TopicConfig
from cometmq.protocol.transaction import (
    TRANSACTION_PREPARED,
    TRANSACTION_TYPE_MASK,
    TransactionType,
    transaction_type,
)
from cometmq.remoting import Connection
from cometmq.store import MessageBatch, MessageToStore, PutResult, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker


def _refused_batch(malformed: ProtocolError | None) -> RequestRefused:
    """The refusal of a batch body that does not decode (``malformed``) or holds no message (None)."""
    if malformed is None:
        return RequestRefused(ResponseCode.MESSAGE_ILLEGAL, "the batch body holds no message")
    return RequestRefused(ResponseCode.MESSAGE_ILLEGAL, f"the batch body is malformed: {malformed}")


# Properties the store indexes or keeps per message: a batch whose request carries them takes the
# general path, where they are merged name by name.
_INDEXED_NAMES = (
    frozenset({"TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TRAN_MSG", "WAIT"}) | TIMER_REQUEST_PROPERTIES
)
_SEPARATOR = PROPERTY_SEPARATOR.encode()
_KEY_SEPARATOR = KEY_SEPARATOR.encode()
_find_indexed_properties = property_finder("TAGS", "KEYS", "UNIQ_KEY")
_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_NOT_SEPARATORS = bytes(b for b in range(256) if b not in _NAME_VALUE + _SEPARATOR)


def _pairs_well_formed(properties: bytes) -> bool:
    """Whether *properties* are pairs of name, one name-value separator and value, joined by the
    property separator: with every other byte deleted, the separators alternate (one
    ``bytes.translate`` per batch, not a scan per message)."""
    separators = properties.translate(None, _NOT_SEPARATORS)
    return separators == (_NAME_VALUE + _SEPARATOR) * (len(separators) // 2) + _NAME_VALUE


_FAILURE_REMARKS = {
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (
        f"the message properties length is over the max value {MAX_PROPERTIES_SIZE} bytes (with the "
        "record CRC, if the broker adds one: enabledAppendPropCRC)"
    ),
    PutStatus.SERVICE_NOT_AVAILABLE: "the store is not available (shutting down)",
    PutStatus.CREATE_MAPPED_FILE_FAILED: (
        "create mapped file failed: the broker has no file descriptor left to open the queue's file "
        "(raise its RLIMIT_NOFILE: ulimit -n, systemd's LimitNOFILE)"
    ),
}

_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,  # as RocketMQ answers it
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
# Answers for a message that is stored: the reply carries its msgId and queue offset (RocketMQ).
_STORED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)


def _pending(
    flushed: asyncio.Future[bool] | None, replicated: asyncio.Future[PutStatus] | None
) -> asyncio.Future[Any] | None:
    """Which of a send's waits (its flush, its slave's acknowledgement) is still pending, if any."""
    if replicated is not None and not replicated.done():
        return replicated
    if flushed is not None and not flushed.done():
        return flushed
    return None


@lru_cache(maxsize=4096)
def host_bytes(address: str) -> bytes:
    """``ip:port`` as the 8 bytes of a record's host field (IPv4 address, int32 port)."""
    host, _, port = address.rpartition(":")
    try:
        packed = socket.inet_aton(host)
    except OSError:
        packed = bytes(4)  # IPv6 or unknown peers: C++ clients can only read IPv4 hosts
    return packed + int(port or 0).to_bytes(4, "big")


# Failover mode: a send stored while this master could not be sure it still is one (the fence).
LEASE_LAPSED: Final = "this broker's mastership lease lapsed; the message was stored but is not acknowledged"
MASTERSHIP_NOT_TRUSTED: Final = (
    "this broker's mastership lease in etcd is not renewed (it may no longer be the master), and no other "
    "in-sync member can vouch for a message; the message was not stored"
)
_HOST_V6_FLAGS: Final = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
# Flags only the broker sets: the layout of the host fields, and an inner batch (its own send path below),
# whose flag makes every reader unwrap the body.
_BROKER_FLAGS: Final = _HOST_V6_FLAGS | INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


def _is_transactional(properties: dict[str, str]) -> bool:
    """Whether a message is sent as a half message (RocketMQ reads TRAN_MSG, not the sys flag)."""
    return properties.get(TRANSACTION_PREPARED, "").lower() == "true"


@dataclass(slots=True)
class _SendHeader:
    """What every message of one send request shares."""

    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes
    reconsume_times: int


def _batch_columns(data: bytes, header: _SendHeader, suffix: bytes) -> MessageBatch | None:
    """The batch of a SEND_BATCH_MESSAGE body without decoding each message's properties: the
    request's properties (*suffix*, the broker's CLUSTER at least) are appended to each message's,
    which keeps Java's merge (a later name wins) without a dict per message, and TAGS, KEYS and
    UNIQ_KEY are found in the bytes (one regex scan of a message's properties, cheaper than three
    ``rfind`` searches). None when the general path must decide: properties that are not UTF-8, or a
    message that may name WAIT, DELAY, TRAN_MSG or a timer property (TIMER_DELIVER_MS, TIMER_DELAY_SEC,
    TIMER_DELAY_MS, all starting with TIMER_DEL). bench/broker_send.py measures this path against
    one MessageToStore per message."""
    batch = MessageBatch(
        header.topic,
        header.queue_id,
        header.sys_flag,
        header.born_timestamp,
        header.born_host,
        header.store_host,
        [],
        [],
        [],
        [],
        reconsume_times=header.reconsume_times,
    )
    flags = batch.flags
    bodies = batch.bodies
    stored = batch.properties
    tags_codes = batch.tags_codes
    index_keys = batch.index_keys
    owners = batch.index_owners
    view = memoryview(data)
    tail = _SEPARATOR + suffix
    find_indexed = _find_indexed_properties
    for i, (flag, body_start, body_end, end) in enumerate(batch_spans(data)):
        flags.append(flag)
        bodies.append(view[body_start:body_end])
        # Java and C++ clients end a message's properties with a separator.
        properties = data[body_end + 2 : end].rstrip(_SEPARATOR)
        if not properties:
            stored.append(suffix)
            tags_codes.append(0)
            continue
        stored.append(properties + tail)
        tags = uniq_key = keys = b""
        for name, value in find_indexed(properties):  # a name given twice: its last value, as decoding
            if name == b"UNIQ_KEY":
                uniq_key = value
            elif name == b"TAGS":
                tags = value
            else:
                keys = value
        tags_codes.append(_tags_code(tags) if tags else 0)
        if uniq_key:
            index_keys.append(uniq_key)
            owners.append(i)
        if keys:
            for key in keys.split(_KEY_SEPARATOR):
                if key:
                    index_keys.append(key)
                    owners.append(i)
    # Checked on all messages at once (a separator between them keeps a cut UTF-8 sequence invalid).
    # The store refuses properties that are not UTF-8 too; the general path says which entry.
    everything = _SEPARATOR.join(stored)
    if (
        b"WAIT\x01" in everything
        or b"DELAY\x01" in everything
        or b"TRAN_MSG\x01" in everything
        or b"TIMER_DEL" in everything
    ):
        return None  # maybe only a name ending in one of these; the general path tells
    if not _pairs_well_formed(everything):
        # A pair without its one name-value separator, or with two: the general path skips or
        # refuses it (Java drops such a pair), where the bytes above would be stored as they are.
        return None
    try:
        everything.decode()
    except UnicodeDecodeError:
        return None
    return batch


@lru_cache(maxsize=1024)
def _tags_code(tags: bytes) -> int:
    return java_string_hash(tags.decode("utf-8", "replace"))  # not UTF-8: refused after the walk


class SendProcessor:
    """SEND_MESSAGE with the send header's long names; SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE with its
    compact ones (the ``batch`` field tells a batch)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def send_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._send(conn, request, SendMessageRequestHeader.decode(request.ext_fields))

    def send_message_v2(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._send(conn, request, SendMessageRequestHeader.decode(request.ext_fields, compact=True))

    def _send(
        self, conn: Connection, request: RemotingCommand, sent: SendMessageRequestHeader
    ) -> RemotingCommand | None:
        broker = self._broker
        config = broker.config
        if not config.broker_permission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{config.broker_ip1}] sending message is forbidden"
            )
        if broker.election is not None:
            mastership_refusal = broker.mastership_refusal()
            if mastership_refusal is not None:
                return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, mastership_refusal)
            in_sync_refusal = broker.in_sync_refusal()
            if in_sync_refusal is not None:
                return request.response(ResponseCode.SYSTEM_ERROR, in_sync_refusal)
        topic = sent.topic
        if topic in SEND_FORBIDDEN_TOPICS:
            return request.response(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        queue_id = sent.queue_id
        properties = decode_properties(sent.properties or "")
        transactional = _is_transactional(properties)
        # A plain send pays the TRAN_MSG lookup above and this flag test, nothing more.
        if transactional or sent.sys_flag & TRANSACTION_TYPE_MASK:
            refused = self._transaction_refusal(sent, transactional)
            if refused is not None:
                return request.response(*refused)
        delay_level = delay_level_of(properties)
        if delay_level > 0:  # the level wins over a delivery time (RocketMQ's checkIfTimerMessage)
            drop_timer_properties(properties)
            deliver_ms = None
        else:  # a half message's delivery time is checked now and applies when it is committed
            deliver_ms = broker.timer.delivery_time(properties)
        wait_store = properties.pop("WAIT", "true").lower() != "false"
        properties["CLUSTER"] = config.broker_cluster_name
        # Everything above is checked before an unknown topic is auto-created.
        topic_config = self._topic_config(sent)
        if not topic_config.perm & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        if transactional and topic_config.is_batch_cq:
            # A BatchCQ topic takes no half message: its commit, a copy into a batch queue, could not be
            # stored, and the message would be lost after the producer heard SEND_OK.
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the topic[{topic}] is a BatchCQ topic (queue.type=BatchCQ), which takes no transactional "
                "message; send it to a topic whose queue.type is SimpleCQ",
            )
        queue_nums = topic_config.queue_nums
        if queue_id < 0:
            queue_id = random.randrange(topic_config.write_queue_nums or 1)
        elif queue_id >= queue_nums:  # raised: the transport logs it as malformed input
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal: topic {topic} has queues 0..{queue_nums - 1}",
            )
        header = _SendHeader(
            topic=topic,
            queue_id=queue_id,
            # The host flags describe the record's layout, which the broker decides (IPv4 hosts); the
            # inner-batch flags are set by ``_put_to_batch_queue`` only, never taken from a client.
            sys_flag=sent.sys_flag & ~_BROKER_FLAGS,
            born_timestamp=sent.born_timestamp or int(time.time() * 1000),
            born_host=host_bytes(conn.remote_address),
            store_host=broker.store_host,
            reconsume_times=sent.reconsume_times or 0,
        )
        deduplicated = broker.deduplicator.enabled_for(topic)
        # Counted under the topic the record is stored in, as RocketMQ's store counts: a delayed or half
        # message under SCHEDULE_TOPIC_XXXX or the half topic, its delivery or commit under its topic.
        stored_topic = topic
        if sent.batch and topic_config.is_batch_cq:
            result = self._put_to_batch_queue(request, header, sent.flag, properties)
        elif sent.batch:
            # The batch's own UNIQ_KEY (RocketMQ 5's producers set one) asks for an inner batch, which
            # only a BatchCQ topic stores; each message keeps its own.
            properties.pop("UNIQ_KEY", None)
            batch = self._batch(request, header, properties)
            if deduplicated:
                result, queue_id = broker.deduplicator.put_batch(batch)
            else:
                result = broker.store.put_batch(batch)
        else:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and self._is_dead(request, sent, header):
                # RocketMQ's handleRetryAndDLQ: a retry past the group's max goes to %DLQ%<group>.
                group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
                broker.stats.count_dlq(group, topic)
                header.topic = broker.topics.dead_letter_topic(group).topic_name
                queue_id = header.queue_id = 0
                delay_level = 0
                deliver_ms = None
                properties.pop("DELAY", None)
            message = self._message(header, request.body, sent.flag, properties)
            if transactional:  # a DELAY applies when it is committed
                message = to_half(message, sent.producer_group)
            elif delay_level > 0 and is_delayable(header.sys_flag):
                # Parked in SCHEDULE_TOPIC_XXXX; the reply still names the real queue (RocketMQ).
                message = broker.schedule.to_schedule(message, delay_level)
            elif deliver_ms is not None and is_delayable(header.sys_flag):
                # Parked in rmq_sys_wheel_timer; the reply names the real queue, as for DELAY.
                message = broker.timer.to_timer(message, deliver_ms)
            stored_topic = message.topic
            if deduplicated:
                result, queue_id = broker.deduplicator.put(message, queue_id)
            else:
                result = broker.store.put(message)
        if result.status is PutStatus.PUT_OK:
            broker.stats.count_put(stored_topic, result.count, result.wrote_bytes)
            if wait_store and (broker.sync_flush or broker.sync_master):
                return self._reply_when_stored(conn, request, result, queue_id)
        return self._reply(request, result, result.status, queue_id)

    def _transaction_refusal(
        self, sent: SendMessageRequestHeader, transactional: bool
    ) -> tuple[ResponseCode, str] | None:
        """The answer refusing a send with a transaction type or TRAN_MSG, or None for a half
        message the broker takes. A PREPARED or ROLLBACK record gets no consume-queue unit: sent
        with either type outside a half message, a message would be stored and never delivered."""
        config = self._broker.config
        if transactional and sent.batch:
            return ResponseCode.MESSAGE_ILLEGAL, "a batch cannot be a transaction message"
        kind = transaction_type(sent.sys_flag)
        if kind is TransactionType.ROLLBACK:
            return (
                ResponseCode.MESSAGE_ILLEGAL,
                "a message sent with the transaction type ROLLBACK (sysFlag 0xC) can never be delivered",
            )
        if kind is TransactionType.PREPARED and not transactional:
            return (
                ResponseCode.MESSAGE_ILLEGAL,
                "a message with the transaction type PREPARED (sysFlag 0x4) needs the property TRAN_MSG=true "
                "to be stored as a half message",
            )
        if config.reject_transaction_message:
            return (
                ResponseCode.NO_PERMISSION,
                f"the broker[{config.broker_ip1}] sending transaction message is forbidden",
            )
        return None

    def _is_dead(self, request: RemotingCommand, sent: SendMessageRequestHeader, header: _SendHeader) -> bool:
        """Whether a send to ``%RETRY%<group>`` has used up the group's retries."""
        group = sent.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_config = self._broker.groups.find_or_create(group)
        if group_config is None:
            raise RequestRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        limit = max_reconsume_times(group_config, request.version, sent.max_reconsume_times)
        return header.reconsume_times >= limit

    def _topic_config(self, sent: SendMessageRequestHeader) -> TopicConfig:
        topics = self._broker.topics
        topic = sent.topic
        topic_config = topics.get(topic)
        if topic_config is not None:
            return topic_config
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic_config = topics.create_retry_topic(topic)
        else:
            topic_config = topics.create_in_send(
                topic, sent.default_topic or DEFAULT_TOPIC, sent.default_topic_queue_nums
            )
        if topic_config is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please! (auto-create is "
                f"{'on' if self._broker.config.auto_create_topic_enable else 'off'} on this broker)",
            )
        return topic_config

    def _message(
        self, header: _SendHeader, body: bytes, flag: int, properties: dict[str, str]
    ) -> MessageToStore:
        """What the store gets for one message of a send (a batch's too, on the general path)."""
        try:
            text = encode_properties(properties)
        except ValueError as exc:
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL, f"the message properties are malformed: {exc}"
            ) from None
        limit = self._broker.config.max_message_size
        if len(body) > limit:
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} is over the max value {limit} bytes",
            )
        tags = properties.get("TAGS", "")
        return MessageToStore(
            header.topic,
            header.queue_id,
            flag,
            body,
            text,
            header.sys_flag,
            header.born_timestamp,
            header.born_host,
            header.store_host,
            header.reconsume_times,
            0,  # prepared_transaction_offset
            java_string_hash(tags) if tags else 0,
            properties.get("KEYS", ""),
            properties.get("UNIQ_KEY", ""),
        )

    def _put_to_batch_queue(
        self, request: RemotingCommand, header: _SendHeader, flag: int, properties: dict[str, str]
    ) -> PutResult:
        """A batch sent to a BatchCQ topic. With the batch's UNIQ_KEY (what a RocketMQ 5 client, and
        CometMQ's, sets on every batch), an inner batch, as RocketMQ 5's SendMessageProcessor stores it:
        ONE record whose body is the batch body as sent, sys flag INNER_BATCH and NEED_UNWRAP, property
        INNER_NUM; the store gives it one unit covering its messages' offsets. Per batch, not per message:
        the entries are counted, not decoded. Without a UNIQ_KEY (an older client), each message is its
        own record, one unit each, as RocketMQ stores such a batch (not all or nothing then)."""
        store = self._broker.store
        data = request.body
        self._check_batch_size(data)
        if "UNIQ_KEY" not in properties:
            results = [store.put(msg) for msg in self._batch_messages(data, header, properties)]
            failed = [r for r in results if r.status is not PutStatus.PUT_OK]
            return failed[0] if failed else results[0]
        try:
            count = count_batch_entries(data)
        except ProtocolError as exc:
            raise _refused_batch(exc) from None
        if not count:
            raise _refused_batch(None)
        if count > 0x7FFF:  # the batch unit's count is a Java short
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL, f"an inner batch holds at most 32767 messages, not {count}"
            )
        properties[INNER_NUM_PROPERTY] = str(count)
        header.sys_flag |= INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
        message = self._message(header, data, flag, properties)
        return store.put_inner_batch(message, count)

    def _check_batch_size(self, data: bytes) -> None:
        limit = self._broker.config.max_message_size
        if len(data) > limit:  # RocketMQ's limit is on the whole batch, which bounds its count too
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the batch body size {len(data)} is over the max value {limit} bytes",
            )

    def _batch(
        self, request: RemotingCommand, header: _SendHeader, properties: dict[str, str]
    ) -> MessageBatch:
        data = request.body
        self._check_batch_size(data)
        if _INDEXED_NAMES.isdisjoint(properties):
            try:
                batch = _batch_columns(data, header, encode_properties(properties).encode())
            except ProtocolError as exc:
                raise _refused_batch(exc) from None
            if batch is not None:
                if not batch.bodies:
                    raise _refused_batch(None)
                return batch
        batch = MessageBatch.of(self._batch_messages(data, header, properties))
        if batch is None:
            raise _refused_batch(None)
        return batch

    def _batch_messages(
        self, data: bytes, header: _SendHeader, properties: dict[str, str]
    ) -> list[MessageToStore]:
        """Each message of a batch body, decoded one by one: the batch path for indexed properties."""
        try:
            messages = [self._batch_message(entry, header, properties) for entry in decode_batch_body(data)]
        except ProtocolError as exc:
            raise _refused_batch(exc) from None
        if not messages:
            raise _refused_batch(None)
        return messages

    def _batch_message(
        self, entry: BatchEntry, header: _SendHeader, properties: dict[str, str]
    ) -> MessageToStore:
        """One message of a batch, its properties decoded, merged with the request's and re-encoded."""
        merged = decode_properties(entry.properties)
        if _is_transactional(merged):  # RocketMQ refuses transactional batches
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL, "a message of the batch is a transaction message (TRAN_MSG)"
            )
        merged.pop("WAIT", None)
        merged.update(properties)
        if delay_level_of(merged) > 0:  # RocketMQ refuses delayed batches (MESSAGE_ILLEGAL)
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"a message of the batch has delay level {merged['DELAY']}: batches cannot be delayed",
            )
        asked = sorted(TIMER_REQUEST_PROPERTIES.intersection(merged))
        if asked:  # RocketMQ would ignore them and deliver at once; refused, so nothing comes early
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"a message of the batch names {', '.join(asked)}: batches cannot be timer messages; "
                "send timer messages one by one",
            )
        return self._message(header, entry.body, entry.flag, merged)

    def _reply_when_stored(
        self, conn: Connection, request: RemotingCommand, result: PutResult, queue_id: int
    ) -> RemotingCommand | None:
        """SYNC_FLUSH and SYNC_MASTER: the reply, once the flush that covers the message and a
        slave's acknowledgement of it are in, both waited for at once (RocketMQ). Returned if both are
        in already, else sent by a callback of the one still pending (no task per send: 16 producers
        waiting for one group commit are 16 callbacks of one loop step)."""
        broker = self._broker
        end = result.commitlog_end_offset
        flushed = broker.store.when_flushed(end) if broker.sync_flush else None
        ha_server = broker.ha_server
        replicated = ha_server.when_replicated(end) if broker.sync_master and ha_server is not None else None
        waiting = _pending(flushed, replicated)
        if waiting is None:
            return self._stored_reply(request, result, queue_id, flushed, replicated)

        def answer(_: asyncio.Future[Any]) -> None:
            waiting = _pending(flushed, replicated)
            if waiting is not None:
                waiting.add_done_callback(answer)
            else:
                conn.reply_with(
                    request, lambda: self._stored_reply(request, result, queue_id, flushed, replicated)
                )

        conn.answer_later(request)
        if flushed is not None and not flushed.done():
            conn.hold_polling_until(flushed)  # the flush thread needs the GIL to get it done
        waiting.add_done_callback(answer)
        return None

    def _stored_reply(
        self,
        request: RemotingCommand,
        result: PutResult,
        queue_id: int,
        flushed: asyncio.Future[bool] | None,
        replicated: asyncio.Future[PutStatus] | None,
    ) -> RemotingCommand:
        status = PutStatus.PUT_OK
        if flushed is not None and (flushed.cancelled() or not flushed.result()):
            status = PutStatus.FLUSH_DISK_TIMEOUT
        if replicated is not None and replicated.result() is not PutStatus.PUT_OK:
            status = replicated.result()  # the replica's status wins over the flush's (RocketMQ)
        return self._reply(request, result, status, queue_id)

    def _reply(
        self, request: RemotingCommand, result: PutResult, status: PutStatus, queue_id: int
    ) -> RemotingCommand:
        code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code not in _STORED_CODES:
            # The store says why it refuses writes (disk full and how full, or shutting down).
            refusal = self._broker.store.write_refusal if status is PutStatus.SERVICE_NOT_AVAILABLE else None
            return request.response(
                code, refusal or _FAILURE_REMARKS.get(status, f"storing the message failed: {status.name}")
            )
        broker = self._broker
        if (
            code == ResponseCode.SUCCESS
            and broker.election is not None
            and broker.mastership_lapsed(result.commitlog_end_offset)
        ):
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, LEASE_LAPSED)
        config = broker.config
        remark = None
        if code == ResponseCode.FLUSH_DISK_TIMEOUT:
            # A failed flush says why (the disk), not just that time ran out.
            remark = self._broker.store.flush_failure or "the message is stored but its disk flush timed out"
        answer = SendMessageResponseHeader(
            msg_id=result.msg_id_text,
            queue_id=queue_id,
            queue_offset=result.queue_offset,
            msg_region=config.region_id,
            trace_on=config.trace_on,
        )
        return request.response(code, remark, answer.encode())
