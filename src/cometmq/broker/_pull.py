"""PULL_MESSAGE (11): read a queue from an offset, filtered by tag or SQL92, with long polling."""

from __future__ import annotations

import asyncio
import os
import struct
from typing import TYPE_CHECKING, Final

from cometmq.broker._filter import (
    RecordFilter,
    compiled_sql92,
    parse_failed_remark,
    record_filter,
    sql92_disabled_remark,
)
from cometmq.broker._longpoll import HeldPull
from cometmq.errors import Sql92Error
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.broker_headers import PullMessageRequestHeader, PullMessageResponseHeader
from cometmq.protocol.naming import PERM_READ
from cometmq.protocol.route import MASTER_ID
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SubscriptionData
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import Connection
from cometmq.store import GetResult, GetStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

# Clients time a pull out after 30 s; never hold one longer than this.
MAX_HOLD_S = 25.0

# Results that come from reading the queue's units, where RocketMQ's store tells whether the consumer
# reads far behind the commit log's end.
_READ_UNITS = frozenset({GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE})
# Results of a pull ahead of what a slave has copied: held on a slave until the copy reaches it. (An
# offset below the slave's first message is not held: the copy never brings it.)
_NOT_COPIED_YET = frozenset(
    {GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_BADLY}
)
# Results whose next offset the store corrects (RocketMQ's nextOffsetCorrection), which a slave
# leaves as asked unless offsetCheckInSlave.
_CORRECTED = frozenset(
    {
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
        GetStatus.NO_MESSAGE_IN_QUEUE,
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        GetStatus.OFFSET_FOUND_NULL,
    }
)


def physical_memory_bytes() -> int:
    """The machine's RAM (RocketMQ's TOTAL_PHYSICAL_MEMORY_SIZE); 0 when the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _status_code(result: GetResult, requested: int) -> int:
    status = result.status
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
        return ResponseCode.PULL_OFFSET_MOVED
    if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    return ResponseCode.PULL_NOT_FOUND  # OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL


# A stored record's queue offset and commit-log offset (protocol/record.py's layout).
_OFFSETS_AT: Final = 20
_OFFSETS: Final = struct.Struct(">qq")


def _confirmed_part(result: GetResult, confirmed: int) -> GetResult | int:
    """*result* up to its first record that ends past the commit-log offset *confirmed* (RocketMQ 5's
    confirmOffset); when that is its first record, the commit-log offset the confirmed offset must
    reach for it. A consumer never reads a message a newly elected master may lack, so it never moves
    past queue offsets that master fills with other messages."""
    if result.status is not GetStatus.FOUND:
        return result
    last = result.buffers[-1]
    if _OFFSETS.unpack_from(last, _OFFSETS_AT)[1] + len(last) <= confirmed:  # the usual case
        return result
    kept: list[memoryview] = []
    count = size = 0
    for buffer in result.buffers:
        start: int = _OFFSETS.unpack_from(buffer, _OFFSETS_AT)[1]
        pos = 0
        while pos < len(buffer):
            end = pos + int.from_bytes(buffer[pos : pos + 4], "big")
            if start + end > confirmed:
                if not count and not pos:
                    return start + end
                if pos:
                    kept.append(buffer[:pos])
                    size += pos
                next_begin = _OFFSETS.unpack_from(buffer, pos + _OFFSETS_AT)[0]
                return GetResult(
                    GetStatus.FOUND, next_begin, result.min_offset, result.max_offset, kept, count, size
                )
            pos = end
            count += 1
        kept.append(buffer)
        size += len(buffer)
    return result


class PullProcessor:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        config = broker.config
        # The role's part of each answer, settled once (docs/operations.md, "Roles").
        self._slave = broker.is_slave
        self._slave_read = config.slave_read_enable
        # A consumer reading more commit-log bytes than this behind its end counts as far behind (its
        # reads likely miss the page cache): accessMessageInMemoryMaxRatio of the machine's RAM.
        ram = physical_memory_bytes() or 1 << 62  # unknown: nobody is far behind
        self._in_memory_bytes = ram * config.access_message_in_memory_max_ratio // 100
        self._keeps_offsets = self._slave and not config.offset_check_in_slave

    def pull_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        broker = self._broker
        pull = PullMessageRequestHeader.decode(request.ext_fields)
        group = pull.consumer_group
        topic = pull.topic
        queue_id = pull.queue_id
        offset = pull.queue_offset
        max_nums = pull.max_msg_nums
        sys_flag = pull.sys_flag

        def refuse(code: int, remark: str) -> RemotingCommand:
            return self._refusal(request, code, remark, offset, topic, queue_id)

        if not broker.config.broker_permission & PERM_READ:
            return refuse(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] pulling message is forbidden",
            )
        group_config = broker.groups.find_or_create(group)
        if group_config is None:
            return refuse(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
            )
        if not group_config.consume_enable:  # RocketMQ's code and remark
            return refuse(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        members = broker.consumers.groups.get(group)
        if (
            not group_config.consume_broadcast_enable
            and members is not None
            and members.message_model == "BROADCASTING"
        ):
            # RocketMQ checks only pulls without FLAG_SUBSCRIPTION; C++ always sets it, so here for all.
            return refuse(
                ResponseCode.NO_PERMISSION, f"the consumer group[{group}] can not consume by broadcast way"
            )
        topic_config = broker.topics.get(topic)
        if topic_config is None and self._slave:
            topic_config = self._copied_topic(topic, queue_id)
        if topic_config is None:
            return refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & PERM_READ:
            return refuse(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        read_queues = topic_config.read_queue_nums
        if queue_id >= read_queues:
            return refuse(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal: topic {topic} has read queues 0..{read_queues - 1}",
            )
        if sys_flag & FLAG_SUBSCRIPTION:
            subscription = SubscriptionData.from_expression(topic, pull.subscription, pull.expression_type)
        else:
            registered = broker.consumers.subscription(group, topic)
            if registered is None:
                return refuse(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription of {topic} in group {group} does not exist",
                )
            if registered.sub_version < pull.sub_version:
                return refuse(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription of {topic} in group {group} is not the latest",
                )
            subscription = registered
        # The SQL92 filter as the store applies it to each record; None for tag subscriptions.
        accept: RecordFilter | None = None
        if subscription.expression_type == EXPRESSION_SQL92:
            # Compiled before the enablePropertyFilter check, in RocketMQ's order. RocketMQ itself lets
            # a pull with an unparsable expression through unfiltered; we refuse it instead.
            try:
                accept = record_filter(compiled_sql92(subscription.sub_string))
            except Sql92Error as exc:
                return refuse(ResponseCode.SUBSCRIPTION_PARSE_FAILED, parse_failed_remark(exc, group, topic))
            if not broker.config.enable_property_filter:
                return refuse(ResponseCode.SYSTEM_ERROR, sql92_disabled_remark(EXPRESSION_SQL92))
        elif subscription.expression_type != EXPRESSION_TAG:
            return refuse(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"unknown expression type {subscription.expression_type}",
            )
        # A slave keeps only offsets committed to it on their own (RocketMQ's storeOffsetEnable).
        if sys_flag & FLAG_COMMIT_OFFSET and pull.commit_offset >= 0 and not self._slave:
            broker.offsets.commit(group, topic, queue_id, pull.commit_offset)
        codes = subscription.codes
        result = broker.store.get_messages(topic, queue_id, offset, max_nums, codes, record_filter=accept)
        result, needed = self._confirmed(result, offset)
        code = _status_code(result, offset)
        # A slave that keeps a consumer's offset past its queue's end (below, offsetCheckInSlave off)
        # answers PULL_RETRY_IMMEDIATELY, which clients pull again on at once: it holds such a pull like
        # one that found nothing, so a consumer ahead of what the slave has copied waits for the copy (or
        # the hold's end) instead of spinning thousands of pulls a second while the master is away.
        if sys_flag & FLAG_SUSPEND and (
            code == ResponseCode.PULL_NOT_FOUND or (self._keeps_offsets and result.status in _NOT_COPIED_YET)
        ):
            timeout_ms = pull.suspend_timeout_millis
            if not broker.config.long_polling_enable:
                timeout_ms = broker.config.short_polling_time_mills
            self._hold(
                conn,
                request,
                topic,
                queue_id,
                offset,
                max_nums,
                codes,
                accept,
                timeout_ms,
                group_config,
                needed,
            )
            return None  # answered later, by the hold
        return self._found(request, result, code, offset, topic, queue_id, group_config)

    def _hold(
        self,
        conn: Connection,
        request: RemotingCommand,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        codes: frozenset[int] | None,
        accept: RecordFilter | None,
        timeout_ms: int,
        group: SubscriptionGroupConfig,
        needed: int,
    ) -> None:
        """Park a pull that found nothing, in the same loop step as that read: a matching arrival
        answers it (``answer``), or the confirmed offset reaching *needed* (≥ 0: the read found only
        messages past it), else its deadline or shutdown does (``expire``), each through
        ``conn.reply``. Nothing is returned, so the dispatcher sends nothing now."""
        broker = self._broker
        loop = asyncio.get_running_loop()
        hold_s = min(timeout_ms / 1000, MAX_HOLD_S)
        deadline = loop.time() + hold_s

        def read(held: HeldPull) -> tuple[GetResult, int]:
            result = broker.store.get_messages(
                topic, queue_id, held.offset, max_nums, codes, record_filter=accept
            )
            return self._confirmed(result, held.offset)

        def found(held: HeldPull, result: GetResult) -> RemotingCommand:
            code = _status_code(result, held.offset)
            return self._found(request, result, code, held.offset, topic, queue_id, group)

        # Both answer the pull exactly once, with an error response if anything fails on the way (a
        # store read, an encoding), as the dispatcher does for a handler that raises (reply_with).
        def answer(held: HeldPull) -> bool:
            if not conn.is_open:
                return True  # nobody to answer: forget it without reading
            try:
                result, needed = read(held)
                if needed >= 0:
                    # Only messages past the confirmed offset: held until it reaches them (an
                    # acknowledgement is no arrival).
                    broker.pull_holds.wait_confirmed(held, needed)
                    return False
                if (
                    accept is not None
                    and result.status is GetStatus.NO_MATCHED_MESSAGE
                    and result.next_begin_offset >= result.max_offset
                    and loop.time() < deadline
                ):
                    # Everything that arrived failed the SQL92 filter: hold on past it instead of
                    # making the consumer spin on PULL_RETRY_IMMEDIATELY (RocketMQ evaluates the filter
                    # before waking a held pull, to the same effect).
                    held.offset = result.next_begin_offset  # (a SQL92 subscription has no tag codes)
                    return False
                conn.reply(request, found(held, result))
            except Exception as exc:
                conn.reply_error(request, exc)
            return True

        def expire(held: HeldPull) -> None:
            conn.reply_with(request, lambda: found(held, read(held)[0]))

        conn.answer_later(request, long_polling=True)
        held = broker.pull_holds.park(conn, topic, queue_id, offset, codes, answer, expire, hold_s)
        if needed >= 0:
            broker.pull_holds.wait_confirmed(held, needed)

    def _confirmed(self, result: GetResult, offset: int) -> tuple[GetResult, int]:
        """Failover mode: what of a read at *offset* a consumer may have (``_confirmed_part``), and the
        commit-log offset the confirmed offset must reach before it has anything (-1: it has)."""
        limit = self._broker.read_limit()
        if limit is None or result.status is not GetStatus.FOUND:
            return result, -1
        confirmed = _confirmed_part(result, limit)
        if isinstance(confirmed, int):  # answered as a pull at the queue's end: held, or pulled again
            empty = GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, result.min_offset, result.max_offset)
            return empty, confirmed
        return confirmed, -1

    def _found(
        self,
        request: RemotingCommand,
        result: GetResult,
        code: int,
        requested: int,
        topic: str,
        queue_id: int,
        group: SubscriptionGroupConfig,
    ) -> RemotingCommand:
        next_begin = result.next_begin_offset
        suggested = MASTER_ID
        if self._slave_read:
            # RocketMQ 4.9.8's rule: a consumer far behind is sent to the group's slave for reads
            # (whichBrokerWhenConsumeSlowly), any other to the group's brokerId (the master).
            far_behind = (
                result.status in _READ_UNITS
                and next_begin > requested
                and self._far_behind(topic, queue_id, next_begin - 1)
            )
            suggested = group.which_broker_when_consume_slowly if far_behind else group.broker_id
        if self._keeps_offsets and result.status in _CORRECTED:
            next_begin = requested
            if code == ResponseCode.PULL_OFFSET_MOVED:
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
                suggested = group.broker_id
        answer = PullMessageResponseHeader(
            suggest_which_broker_id=suggested,
            next_begin_offset=next_begin,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )
        response = request.response(code, result.status.name, answer.encode())
        if code == ResponseCode.SUCCESS:
            response.body_parts = result.buffers
            broker = self._broker
            broker.stats.count_got(group.group_name, topic, result.message_count, result.buffer_total_size)
            broker.offsets.pulled[(group.group_name, topic, queue_id)] = next_begin
        return response

    def _copied_topic(self, topic: str, queue_id: int) -> TopicConfig | None:
        """A topic a slave holds messages of in its commit log before its metadata copy (every 10 s)
        brought its config: readable, so that consumers of a master that died just after creating it
        read what was copied (RocketMQ's slave answers TOPIC_NOT_EXIST until the copy)."""
        broker = self._broker
        queues = broker.store.queue_ids(topic)
        if not queues or topic in broker.topics.dropped_by_master:
            return None
        return TopicConfig(topic, read_queue_nums=max(queues[-1], queue_id) + 1, perm=PERM_READ)

    def _far_behind(self, topic: str, queue_id: int, last_read: int) -> bool:
        """Whether the commit log holds more than the in-memory share of RAM past the record of queue
        offset *last_read* (RocketMQ's suggestPullingFromSlave)."""
        store = self._broker.store
        unit = store.queue_unit(topic, queue_id, last_read)
        return unit is not None and store.commitlog_max_offset - unit[0] > self._in_memory_bytes

    def _refusal(
        self, request: RemotingCommand, code: int, remark: str, offset: int, topic: str, queue_id: int
    ) -> RemotingCommand:
        store = self._broker.store
        # Every pull answer carries all four fields: Java clients unbox them without null checks.
        answer = PullMessageResponseHeader(
            suggest_which_broker_id=MASTER_ID,
            next_begin_offset=offset,
            min_offset=store.min_offset(topic, queue_id),
            max_offset=store.max_offset(topic, queue_id),
        )
        return request.response(code, remark, answer.encode())
