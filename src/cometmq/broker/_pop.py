"""POP consumption (RocketMQ 5): POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION and POLLING_INFO, and the revive of messages
whose invisible time passed without an ack (docs/protocol.md, "POP consumption").

A pop hands a group's messages out and keeps them in flight (:mod:`_popstate`): invisible to other
pops until acked or until their invisible time passes. Then a message popped plainly is revived: a
copy with its reconsume times + 1 goes to the group's POP retry topic ``%RETRY%<group>_<topic>``,
which pops of the topic read beside it; a message that already had the group's retryMaxTimes
redeliveries goes to ``%DLQ%<group>`` instead. An order pop (FIFO groups) hands a queue's messages to
one consumer and blocks the queue for the group until they are settled; one not acked in time is
handed out again, in its place in the queue, until it too has had retryMaxTimes redeliveries (then it
goes to the DLQ and the queue moves on), as RocketMQ's ConsumerOrderInfoManager does.

A pop that finds nothing is held up to its pollTime and answered when a message arrives in the
topic or its retry topic, or an order queue is unblocked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from cometmq.broker._filter import (
    RecordFilter,
    compiled_sql92,
    parse_failed_remark,
    record_filter,
    sql92_disabled_remark,
)
from cometmq.broker._popstate import InFlight, PopJournal, QueueKey, QueueState
from cometmq.broker._schedule import copy_of_record
from cometmq.broker._sendback import ORIGIN_MESSAGE_ID, RETRY_TOPIC
from cometmq.errors import RecordError, RequestRefused, Sql92Error
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.naming import PERM_READ, RETRY_GROUP_TOPIC_PREFIX
from cometmq.protocol.pop import (
    FIRST_POP_TIME,
    MAX_POP_MESSAGES,
    POP_CK,
    POP_ORDER_REVIVE_QUEUE,
    TIMEOUT_TOO_MUCH,
    AckMessageRequestHeader,
    BatchAck,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumeInitMode,
    ExtraInfo,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PollingInfoResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    batch_ack_request_body,
    pop_retry_topic,
    real_topic,
    retry_mark,
)
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import (
    DecodedRecord,
    decode_record_at,
    encode_record_into,
    iter_records,
    record_size,
)
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SubscriptionData
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import Connection
from cometmq.store import GetResult, GetStatus, MessageToStore, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

# The invisible time a pop or a change may ask for: RocketMQ's proxy allows up to 12 hours.
MAX_INVISIBLE_TIME_MS: Final = 12 * 3600 * 1000
# A pop or notification is held at most this long, whatever its pollTime.
MAX_POLL_TIME_MS: Final = 120_000
# RocketMQ's popPollingSize: pops held at once per topic, group and queue; more are answered POLLING_FULL.
MAX_HELD_PER_QUEUE: Final = 1024
# RocketMQ's maxPopPollingSize: pops and notifications held at once on the broker; more: POLLING_FULL.
MAX_HELD: Final = 100_000
# RocketMQ's popInflightMessageThreshold (which RocketMQ applies only when enablePopMessageThreshold is
# set; here always): a group's queue with this many messages in flight is skipped by its pops.
MAX_IN_FLIGHT_PER_QUEUE: Final = 10_000
# The longest attemptId an order pop may name (RocketMQ's clients send a UUID).
MAX_ATTEMPT_ID_CHARS: Final = 128
# RocketMQ's popFromRetryProbability: the share of pops (%) that read the retry topic first.
POP_FROM_RETRY_PERCENT: Final = 20
# RocketMQ refuses a pop whose pollTime ran out on its way by more than this (isTimeoutTooMuch).
MAX_POP_LATENESS_MS: Final = 500
# A revive that could not store its copy is tried again this much later.
REVIVE_RETRY_MS: Final = 1000
# The revive heap is rebuilt once it holds more than twice the messages in flight plus this many.
REVIVE_HEAP_SLACK: Final = 1024
# The most revive-heap entries one loop step takes: a backlog (a broker down past many invisible
# times) does not hold up requests.
REVIVE_BATCH: Final = 1000
# A group without a config (deleted while messages were in flight) gets RocketMQ's default.
DEFAULT_RETRY_MAX_TIMES: Final = 16

# Properties RocketMQ 5 sets on a dead-lettered message.
DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
_RECORD_CRC_PROPERTY: Final = "__CRC32#"
# A property's name as it appears in a properties text (RocketMQ's name\x01value\x02...).
_POP_CK_NAME: Final = f"{POP_CK}\x01"
_FIRST_POP_TIME_NAME: Final = f"{FIRST_POP_TIME}\x01"


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class _Pop:
    """One pop's request as the broker runs it (a held pop runs it again on each wake)."""

    group: str
    topic: str
    queue_id: int
    max_nums: int
    invisible_time: int
    order: bool
    init_mode: int
    codes: frozenset[int] | None
    accept: RecordFilter | None
    attempt_id: str | None


@dataclasses.dataclass(slots=True)
class _Popped:
    """What a pop took: the answer's records and header fields."""

    pop_time: int
    revive_qid: int
    records: list[bytes] = dataclasses.field(default_factory=list)
    rest_num: int = 0
    start_offset_info: list[str] = dataclasses.field(default_factory=list)
    msg_offset_info: list[str] = dataclasses.field(default_factory=list)
    order_count_info: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False, slots=True)
class _Held:
    """A pop or notification waiting for messages."""

    conn: Connection
    request: RemotingCommand
    polling_key: tuple[str, str, int]  # (topic, group, queue id), POLLING_INFO's count
    watched: tuple[str, ...]  # the topics whose arrivals wake it
    alike: tuple[object, ...]  # held requests that would find the same (see _wake)
    attempt: Callable[[], RemotingCommand | None]  # the answer if it has one now
    expire: Callable[[], RemotingCommand]  # the answer at its deadline
    timer: asyncio.TimerHandle | None = None


class PopService:
    """The broker's POP consumption: in-flight state, revive, held pops, and the request handlers."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.journal = PopJournal(broker.root_dir / "pop", sync_flush=broker.sync_flush)
        # (visible at, n, key, offset, pop time): in-flight messages by when their invisible time ends;
        # entries of messages settled or changed since are skipped when they come up.
        self._revive_heap: list[tuple[int, int, QueueKey, int, int]] = []
        self._revive_heap_limit = REVIVE_HEAP_SLACK  # rebuilt from the live state past this
        self._order = itertools.count()
        self._revive_timer: asyncio.TimerHandle | None = None
        self._revive_timer_at = 0
        self._held: dict[str, dict[_Held, None]] = {}  # by watched topic
        self._held_by_conn: dict[Connection, dict[_Held, None]] = {}
        self._held_count: dict[tuple[str, str, int], int] = {}
        self._held_total = 0
        self._wake_pending: set[str] = set()
        self._sync_task: asyncio.Task[None] | None = None
        # SYNC_FLUSH: answers waiting for the journal on disk as far as their change (its position),
        # and the fsync under way for them.
        self._sync_waiters: list[tuple[int, Connection, RemotingCommand, RemotingCommand]] = []
        self._syncing: asyncio.Future[None] | None = None
        self._listening = False
        self._running = False

    # -- start and stop -------------------------------------------------------------------------

    def open(self) -> None:
        """Replay the journal (blocking: run it off the loop, before requests are served)."""
        self.journal.open()
        if self._broker.is_slave:
            self._forget_all()
        self._rebuild_revive_heap()
        for key, state in self.journal.states.items():
            self._commit(key, state)

    def start(self) -> None:
        """Revive messages as their invisible time passes."""
        self._running = True
        self._arm_revive()
        # Under SYNC_FLUSH too: for the changes no answer waits for (revives, a queue's first pop).
        self._sync_task = asyncio.ensure_future(self._sync_every_second())

    async def stop(self) -> None:
        """Stop reviving, and answer the held pops while their connections are open."""
        self._running = False
        if self._revive_timer is not None:
            self._revive_timer.cancel()
            self._revive_timer = None
        task, self._sync_task = self._sync_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._answer_held()
        while self._syncing is not None or self._sync_waiters:
            await asyncio.gather(self._sync_soon(), return_exceptions=True)

    def close(self) -> None:
        """Close the journal (synced) once no request is served any more."""
        self._answer_held()  # any held since stop(): their connections are closed
        self.journal.close()

    def _answer_held(self) -> None:
        for held in {held for watchers in self._held.values() for held in watchers}:
            self._unpark(held)
            if held.conn.is_open:
                self._reply_with(held.conn, held.request, held.expire)

    async def _sync_every_second(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            try:
                await loop.run_in_executor(None, self.journal.sync)
            except OSError as exc:  # tried again in a second: the disk may come back
                log.error("cannot fsync the POP journal %s: %s", self.journal.path, exc)

    # -- answers once the journal has their changes (SYNC_FLUSH) --------------------------------

    def _when_synced(
        self, conn: Connection, request: RemotingCommand, response: RemotingCommand | None
    ) -> RemotingCommand | None:
        """*response*; or, under SYNC_FLUSH while the journal is not on disk as far as now, None, and
        *response* sent once it is (a group commit: one fsync, off the loop, for every request
        that wrote meanwhile)."""
        journal = self.journal
        if response is None or not journal.sync_flush or journal.synced >= journal.appended:
            return response
        conn.answer_later(request)
        self._sync_waiters.append((journal.appended, conn, request, response))
        self._sync_soon()
        return None

    def _reply(self, conn: Connection, request: RemotingCommand, response: RemotingCommand) -> None:
        answer = self._when_synced(conn, request, response)
        if answer is not None:
            conn.reply(request, answer)

    def _reply_with(
        self, conn: Connection, request: RemotingCommand, build: Callable[[], RemotingCommand]
    ) -> None:
        try:
            response = build()
        except Exception as exc:
            conn.reply_error(request, exc)
        else:
            self._reply(conn, request, response)

    def _sync_soon(self) -> asyncio.Future[None]:
        if self._syncing is None:
            self._syncing = asyncio.get_running_loop().run_in_executor(None, self.journal.sync)
            self._syncing.add_done_callback(self._synced)
        return self._syncing

    def _synced(self, done: asyncio.Future[None]) -> None:
        self._syncing = None
        error = None if done.cancelled() else done.exception()
        if error is not None:
            log.error("cannot fsync the POP journal %s: %s", self.journal.path, error)
        waiters, self._sync_waiters = self._sync_waiters, []
        for position, conn, request, response in waiters:
            if error is not None:
                response = request.response(
                    ResponseCode.SYSTEM_ERROR, f"cannot fsync the POP journal {self.journal.path}: {error}"
                )
            elif position > self.journal.synced:
                self._sync_waiters.append((position, conn, request, response))
                continue
            if conn.is_open:
                conn.reply(request, response)
        if self._sync_waiters:
            self._sync_soon()

    # -- checks shared by the handlers ----------------------------------------------------------

    def _readable_topic(self, topic: str, what: str = "popping") -> TopicConfig:
        broker = self._broker
        if broker.is_slave:
            raise RequestRefused(ResponseCode.SERVICE_NOT_AVAILABLE, self._slave_remark())
        if not broker.config.broker_permission & PERM_READ:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] {what} message is forbidden",
            )
        config = broker.topics.get(topic)
        if config is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.perm & PERM_READ:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] {what} message is forbidden"
            )
        return config

    def _check_queue(self, config: TopicConfig, queue_id: int) -> None:
        if queue_id >= config.read_queue_nums:
            raise RequestRefused(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{config.topic_name}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]",
            )

    def _check_group(self, group: str, *, create: bool) -> None:
        groups = self._broker.groups
        config = groups.find_or_create(group) if create else groups.get(group)
        if config is None:
            raise RequestRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
            )
        if not config.consume_enable:
            raise RequestRefused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")

    # -- POP_MESSAGE ----------------------------------------------------------------------------

    def pop_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._when_synced(conn, request, self._pop_message(conn, request))

    def _pop_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        header = PopMessageRequestHeader.decode(request.ext_fields)
        now = _now_ms()
        late = now - header.born_time - header.poll_time
        if header.born_time > 0 and late > MAX_POP_LATENESS_MS:
            return request.response(
                ResponseCode.POLLING_TIMEOUT,
                f"the broker[{self._broker.config.broker_ip1}] {TIMEOUT_TOO_MUCH}: it arrived {late} ms "
                f"after its bornTime + pollTime, more than {MAX_POP_LATENESS_MS} ms (the client's clock "
                "behind the broker's, or the request slow on its way)",
            )
        if header.max_msg_nums > MAX_POP_MESSAGES:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{self._broker.config.broker_ip1}] pop message's num is greater than "
                f"{MAX_POP_MESSAGES}",
            )
        if not 0 < header.invisible_time <= MAX_INVISIBLE_TIME_MS:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"invisibleTime {header.invisible_time} ms is out of range: 1..{MAX_INVISIBLE_TIME_MS} ms",
            )
        if header.attempt_id is not None and len(header.attempt_id) > MAX_ATTEMPT_ID_CHARS:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"attemptId of {len(header.attempt_id)} characters is longer than {MAX_ATTEMPT_ID_CHARS}",
            )
        if header.init_mode not in (ConsumeInitMode.MIN, ConsumeInitMode.MAX):
            return request.response(
                ResponseCode.INVALID_PARAMETER, f"initMode {header.init_mode} is neither 0 (MIN) nor 1 (MAX)"
            )
        config = self._readable_topic(header.topic)
        self._check_queue(config, header.queue_id)
        if self._broker.store.is_batch_topic(header.topic):
            # A record holds many messages there, and a receipt handle names one queue offset.
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"topic[{header.topic}] is a BatchCQ topic (queue.type=BatchCQ): POP consumption does not "
                "serve it; pull it instead",
            )
        self._check_group(header.consumer_group, create=True)
        codes, accept = self._filter(header.consumer_group, header.topic, header.exp_type, header.exp)
        pop = _Pop(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.max_msg_nums,
            header.invisible_time,
            header.order,
            header.init_mode,
            codes,
            accept,
            header.attempt_id if header.order else None,
        )
        popped = self._pop(pop)
        if popped.records:
            return self._pop_answer(request, pop, popped)
        polling_key = (pop.topic, pop.group, pop.queue_id)
        if header.poll_time <= 0:
            return self._pop_answer(request, pop, popped, ResponseCode.POLLING_TIMEOUT)
        if self._polling_full(polling_key):
            return self._pop_answer(request, pop, popped, ResponseCode.POLLING_FULL)

        def attempt() -> RemotingCommand | None:
            again = self._pop(pop)
            return self._pop_answer(request, pop, again) if again.records else None

        def expire() -> RemotingCommand:
            again = self._pop(pop)
            code = ResponseCode.SUCCESS if again.records else ResponseCode.POLLING_TIMEOUT
            return self._pop_answer(request, pop, again, code)

        watched = (pop.topic, pop_retry_topic(pop.topic, pop.group))
        # Held pops alike in all that decides what they find: once one finds nothing, so would the rest.
        alike = ("pop", pop.group, pop.topic, pop.queue_id, pop.order, header.exp_type, header.exp)
        self._park(conn, request, polling_key, watched, alike, attempt, expire, header.poll_time)
        return None

    def _filter(
        self, group: str, topic: str, exp_type: str | None, exp: str | None
    ) -> tuple[frozenset[int] | None, RecordFilter | None]:
        """The tag codes and SQL92 filter of a pop's expression, as a pull's subscription has them."""
        subscription = SubscriptionData.from_expression(topic, exp, exp_type)
        if subscription.expression_type == EXPRESSION_SQL92:
            try:
                accept = record_filter(compiled_sql92(subscription.sub_string))
            except Sql92Error as exc:
                raise RequestRefused(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, parse_failed_remark(exc, group, topic)
                ) from None
            if not self._broker.config.enable_property_filter:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, sql92_disabled_remark(EXPRESSION_SQL92))
            return None, accept
        if subscription.expression_type != EXPRESSION_TAG:
            raise RequestRefused(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"unknown expression type {subscription.expression_type}",
            )
        return subscription.codes, None

    def _pop_answer(
        self, request: RemotingCommand, pop: _Pop, popped: _Popped, code: int = ResponseCode.SUCCESS
    ) -> RemotingCommand:
        header = PopMessageResponseHeader(
            pop_time=popped.pop_time,
            invisible_time=pop.invisible_time,
            revive_qid=popped.revive_qid,
            rest_num=popped.rest_num,
            start_offset_info=";".join(popped.start_offset_info),
            msg_offset_info=";".join(popped.msg_offset_info),
            order_count_info=";".join(popped.order_count_info) if pop.order else None,
        )
        remark = "FOUND" if popped.records else "NO_MESSAGE_IN_QUEUE"
        response = request.response(code, remark, header.encode())
        if popped.records:
            response.body_parts = popped.records
            self._broker.stats.count_got(
                pop.group, pop.topic, len(popped.records), sum(len(record) for record in popped.records)
            )
        return response

    def _pop(self, pop: _Pop) -> _Popped:
        """Take up to ``max_nums`` messages for *pop*: from its queue or every queue of its topic on this
        broker, and (plain pops) from the group's POP retry topic, first or when the topic runs short."""
        broker = self._broker
        now = _now_ms()
        popped = _Popped(now, POP_ORDER_REVIVE_QUEUE if pop.order else 0)
        sources: list[tuple[str, bool]] = [(pop.topic, False)]
        retry = pop_retry_topic(pop.topic, pop.group)
        if broker.topics.get(retry) is not None:
            # RocketMQ's order pops skip the retry topic; here they read it after the topic, so that a
            # message revived while the group popped plainly is not stranded once it pops in order.
            if not pop.order and random.randrange(100) < POP_FROM_RETRY_PERCENT:
                sources.insert(0, (retry, True))
            else:
                sources.append((retry, True))
        plan: list[tuple[str, bool, int]] = []  # (topic, is retry, queue id), in the order taken
        for topic, is_retry in sources:
            config = broker.topics.get(topic)
            if config is None:
                continue
            if pop.queue_id >= 0 and not is_retry:
                plan.append((topic, is_retry, pop.queue_id))
            else:
                count = config.read_queue_nums
                start = random.randrange(count) if count else 0
                plan += [(topic, is_retry, (start + i) % count) for i in range(count)]
        if pop.order and pop.attempt_id:
            # The same attempt again (RocketMQ's attemptId: its answer was lost on the way) gets the
            # same messages under new receipt handles: a pop time later than any of theirs (even
            # within the same ms), set before any handle of this answer is made.
            for topic, _, queue_id in plan:
                state = self.journal.states.get((pop.group, topic, queue_id))
                for entry in state.inflight.values() if state is not None else ():
                    if entry.attempt_id == pop.attempt_id:
                        popped.pop_time = max(popped.pop_time, entry.pop_time + 1)
        for topic, is_retry, queue_id in plan:
            want = pop.max_nums - len(popped.records)
            if want <= 0:
                popped.rest_num += self._rest(pop.group, topic, queue_id)
                continue
            self._pop_queue(pop, topic, queue_id, want, is_retry, popped)
        return popped

    def _rest(self, group: str, topic: str, queue_id: int) -> int:
        state = self.journal.states.get((group, topic, queue_id))
        if state is None:
            return 0
        return max(0, self._broker.store.max_offset(topic, queue_id) - state.cursor)

    def _state(self, key: QueueKey, init_mode: int) -> QueueState:
        """The state of a queue the group pops, made (and journaled) at its first pop: from the group's
        committed offset if it has one, else where *init_mode* says."""
        state = self.journal.states.get(key)
        if state is not None:
            return state
        group, topic, queue_id = key
        store = self._broker.store
        committed = self._broker.offsets.query(group, topic, queue_id)
        low = store.min_offset(topic, queue_id)
        if committed >= 0:
            cursor = max(committed, low)
        elif init_mode == ConsumeInitMode.MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or low == 0:
            # RocketMQ starts a MAX group at the queue's first message too while that message is still
            # in memory (initPopOffsetByCheckMsgInMem); here: while the queue was never cleaned.
            cursor = low
        else:
            cursor = max(store.max_offset(topic, queue_id) - 1, 0)
        self.journal.append(PopJournal.pop_record(key, cursor, [], _now_ms(), 0, False))
        return self.journal.states[key]

    def _read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        want: int,
        codes: frozenset[int] | None,
        accept: RecordFilter | None,
    ) -> GetResult:
        store = self._broker.store
        result = store.get_messages(topic, queue_id, offset, want, codes, record_filter=accept)
        if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            # The cursor fell below the queue's first message (cleaned) or past its end: corrected.
            result = store.get_messages(
                topic, queue_id, result.next_begin_offset, want, codes, record_filter=accept
            )
        return result

    def _pop_queue(
        self, pop: _Pop, topic: str, queue_id: int, want: int, is_retry: bool, popped: _Popped
    ) -> None:
        key = (pop.group, topic, queue_id)
        state = self._state(key, pop.init_mode)
        if len(state.inflight) >= MAX_IN_FLIGHT_PER_QUEUE:
            popped.rest_num += self._rest(pop.group, topic, queue_id)
            return
        if pop.order and state.blocked:
            if not pop.attempt_id or any(e.attempt_id != pop.attempt_id for e in state.inflight.values()):
                popped.rest_num += self._rest(pop.group, topic, queue_id)
                return
            again = sorted(state.inflight)[:want]  # the same attempt again: see _pop
            took_all_again = False
        else:
            # The messages an order pop left unacked past their invisible time go out again first, to
            # any pop of the group (a plain one too: else the queue would be stuck for it).
            again = state.redeliver[:want]
            took_all_again = len(again) == len(state.redeliver)
        records: list[DecodedRecord] = []
        for offset in again:
            record = self._record_at(topic, queue_id, offset)
            if record is None:  # cleaned from the store meanwhile: nothing to hand out
                self.journal.append(PopJournal.ack_record(key, offset))
                continue
            records.append(record)
        cursor = state.cursor
        if took_all_again and len(records) < want:
            result = self._read(
                topic,
                queue_id,
                cursor,
                want - len(records),
                None if is_retry else pop.codes,
                None if is_retry else pop.accept,
            )
            if result.status is not GetStatus.NO_MATCHED_LOGIC_QUEUE:  # a queue with no file yet stays
                # Past what was read and what the filter skipped; or corrected into the queue when
                # the cursor had fallen out of it (retention below, a truncated log above).
                cursor = result.next_begin_offset
            for buffer in result.buffers:
                records.extend(iter_records(buffer))
            popped.rest_num += max(0, result.max_offset - cursor)
        if not records and cursor == state.cursor:
            return
        offsets = [record.queue_offset for record in records]
        self.journal.append(
            PopJournal.pop_record(
                key, cursor, offsets, popped.pop_time, pop.invisible_time, pop.order, pop.attempt_id
            )
        )
        self._broker.offsets.pulled[key] = cursor
        if not records:
            self._commit(key, state)
            return
        ck_offset = offsets[0]
        entry = state.inflight[ck_offset]
        mark = retry_mark(topic)
        broker_name = self._broker.config.broker_name
        counts = state.counts
        for record in records:
            self._remember(key, record.queue_offset, entry)
            reconsume = counts.get(record.queue_offset, record.reconsume_times)
            handle = ExtraInfo(
                ck_offset,
                popped.pop_time,
                pop.invisible_time,
                popped.revive_qid,
                mark,
                broker_name,
                queue_id,
                record.queue_offset,
            )
            popped.records.append(_delivered(record, pop.topic, handle, reconsume))
            if pop.order:
                popped.order_count_info.append(f"{mark.value} qo{queue_id}%{record.queue_offset} {reconsume}")
        popped.start_offset_info.append(f"{mark.value} {queue_id} {ck_offset}")
        popped.msg_offset_info.append(f"{mark.value} {queue_id} {','.join(map(str, offsets))}")
        self._commit(key, state)

    def _record_at(self, topic: str, queue_id: int, offset: int) -> DecodedRecord | None:
        store = self._broker.store
        unit = store.queue_unit(topic, queue_id, offset)
        if unit is None:
            return None
        view = store.message_at(unit[0])
        if view is None:
            return None
        try:
            return decode_record_at(view, 0, len(view))
        except RecordError:
            return None

    def _commit(self, key: QueueKey, state: QueueState) -> None:
        """The group's consume offset of the queue: past the messages settled, and no further."""
        group, topic, queue_id = key
        offsets = self._broker.offsets
        low = state.low_water()
        if offsets.query(group, topic, queue_id) != low:
            offsets.commit(group, topic, queue_id, low)

    # -- ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME --------------------------

    def _handle_target(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str
    ) -> tuple[QueueKey, ExtraInfo]:
        """The queue and receipt handle an ack or change names, checked as RocketMQ's broker checks them."""
        try:
            info = ExtraInfo.parse(extra_info)
        except ValueError as exc:
            raise RequestRefused(
                ResponseCode.INVALID_PARAMETER, f"bad receipt handle {extra_info[:120]!r}: {exc}"
            ) from None
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic = info.real_topic(topic, group)  # a client that names the topic it subscribed to
        config = self._readable_topic(topic, "acking")
        if not 0 <= queue_id < config.read_queue_nums:
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]",
            )
        store = self._broker.store
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if not low <= offset < high:
            raise RequestRefused(
                ResponseCode.NO_MESSAGE,
                f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{low}~{high}",
            )
        return (group, topic, queue_id), info

    def _in_flight(self, key: QueueKey, offset: int, info: ExtraInfo) -> InFlight:
        state = self.journal.states.get(key)
        entry = state.inflight.get(offset) if state is not None else None
        if entry is None or entry.pop_time != info.pop_time or entry.reviving:
            group, topic, queue_id = key
            raise RequestRefused(
                ResponseCode.NO_MESSAGE,
                f"the message at {topic}@{queue_id} offset {offset} is not in flight for group {group} under "
                f"this receipt handle: it was acked, its invisible time passed (the handle expired at "
                f"{info.visible_at}), or a newer handle replaced it",
            )
        return entry

    def ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._when_synced(conn, request, self._ack_message(conn, request))

    def _ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = AckMessageRequestHeader.decode(request.ext_fields)
        self._check_group(header.consumer_group, create=False)
        key, info = self._handle_target(
            header.consumer_group, header.topic, header.queue_id, header.offset, header.extra_info
        )
        self._in_flight(key, header.offset, info)
        self._settle(key, [header.offset])
        return request.response()

    def batch_ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._when_synced(conn, request, self._batch_ack_message(conn, request))

    def _batch_ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        _, acks = batch_ack_request_body(request)
        if not acks:
            return request.response(ResponseCode.NO_MESSAGE, "the batch ack names no messages")
        for ack in acks:
            self._batch_ack(ack)
        return request.response()

    def _batch_ack(self, ack: BatchAck) -> None:
        """RocketMQ answers a batch ack SUCCESS whatever it finds: messages no longer in flight under
        the pop it names are skipped."""
        topic = real_topic(ack.topic, ack.consumer_group, ack.retry)
        key = (ack.consumer_group, topic, ack.queue_id)
        state = self.journal.states.get(key)
        if state is None:
            return
        offsets = []
        for index in ack.offsets_from_start:
            offset = ack.start_offset + index
            entry = state.inflight.get(offset)
            if entry is not None and entry.pop_time == ack.pop_time and not entry.reviving:
                offsets.append(offset)
        if offsets:
            self._settle(key, offsets)

    def _settle(self, key: QueueKey, offsets: list[int]) -> None:
        state = self.journal.states[key]
        was_blocked = state.blocked
        self.journal.append(*(PopJournal.ack_record(key, offset) for offset in offsets))
        self._commit(key, state)
        if was_blocked and not state.blocked:
            self._wake_soon(key[1])  # an order queue unblocked

    def change_message_invisible_time(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | None:
        return self._when_synced(conn, request, self._change_message_invisible_time(conn, request))

    def _change_message_invisible_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ChangeInvisibleTimeRequestHeader.decode(request.ext_fields)
        if not 0 <= header.invisible_time <= MAX_INVISIBLE_TIME_MS:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"invisibleTime {header.invisible_time} ms is out of range: 0..{MAX_INVISIBLE_TIME_MS} ms",
            )
        self._check_group(header.consumer_group, create=False)
        key, info = self._handle_target(
            header.consumer_group, header.topic, header.queue_id, header.offset, header.extra_info
        )
        entry = self._in_flight(key, header.offset, info)
        now = max(_now_ms(), entry.pop_time + 1)  # a new handle, never equal to the old one
        self.journal.append(PopJournal.change_record(key, header.offset, now, header.invisible_time))
        self._remember(key, header.offset, entry)
        answer = ChangeInvisibleTimeResponseHeader(
            pop_time=now, invisible_time=header.invisible_time, revive_qid=info.revive_qid
        )
        return request.response(ext_fields=answer.encode())

    # -- PEEK_MESSAGE, NOTIFICATION, POLLING_INFO -------------------------------------------------

    def peek_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = PeekMessageRequestHeader.decode(request.ext_fields)
        config = self._readable_topic(header.topic, "peeking")
        self._check_queue(config, header.queue_id)
        self._check_group(header.consumer_group, create=True)
        want = min(header.max_msg_nums, MAX_POP_MESSAGES)
        count = config.read_queue_nums
        queues = [header.queue_id] if header.queue_id >= 0 else list(range(count))
        buffers: list[memoryview] = []
        found = rest = 0
        for queue_id in queues:
            key = (header.consumer_group, header.topic, queue_id)
            state = self.journal.states.get(key)
            offset = state.cursor if state is not None else max(self._broker.offsets.query(*key), 0)
            if found < want:
                result = self._read(header.topic, queue_id, offset, want - found, None, None)
                buffers += result.buffers
                found += result.message_count
                offset = max(offset, result.next_begin_offset)
            rest += max(0, self._broker.store.max_offset(header.topic, queue_id) - offset)
        answer = PopMessageResponseHeader(pop_time=_now_ms(), invisible_time=0, revive_qid=0, rest_num=rest)
        if not found:
            return request.response(ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", answer.encode())
        response = request.response(ResponseCode.SUCCESS, "FOUND", answer.encode())
        response.body_parts = buffers  # the records as stored, as a pull sends them
        return response

    def notification(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        header = NotificationRequestHeader.decode(request.ext_fields)
        config = self._readable_topic(header.topic, "peeking")
        self._check_queue(config, header.queue_id)
        self._check_group(header.consumer_group, create=True)
        group, topic = header.consumer_group, header.topic

        def answer(has_msg: bool, full: bool = False) -> RemotingCommand:
            return request.response(
                ext_fields=NotificationResponseHeader(has_msg=has_msg, polling_full=full).encode()
            )

        def has_messages() -> bool:
            return self._has_messages(group, topic, header.queue_id, header.order)

        if has_messages() or header.poll_time <= 0:
            return answer(has_messages())
        polling_key = (topic, group, header.queue_id)
        if self._polling_full(polling_key):
            return answer(False, True)
        watched = (topic, pop_retry_topic(topic, group))
        self._park(
            conn,
            request,
            polling_key,
            watched,
            ("notification", group, topic, header.queue_id, header.order),
            lambda: answer(True) if has_messages() else None,
            lambda: answer(has_messages()),
            header.poll_time,
        )
        return None

    def _has_messages(self, group: str, topic: str, queue_id: int, order: bool) -> bool:
        sources = [pop_retry_topic(topic, group), topic]
        store = self._broker.store
        for source in sources:
            config = self._broker.topics.get(source)
            if config is None:
                continue
            queues = [queue_id] if queue_id >= 0 and source == topic else range(config.read_queue_nums)
            for queue in queues:
                state = self.journal.states.get((group, source, queue))
                if state is None:
                    committed = self._broker.offsets.query(group, source, queue)
                    cursor = committed if committed >= 0 else store.min_offset(source, queue)
                    if store.max_offset(source, queue) > cursor:
                        return True
                    continue
                if order and state.blocked:
                    continue
                if state.redeliver or store.max_offset(source, queue) > state.cursor:
                    return True
        return False

    def polling_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = PollingInfoRequestHeader.decode(request.ext_fields)
        config = self._readable_topic(header.topic, "peeking")
        self._check_queue(config, header.queue_id)
        self._check_group(header.consumer_group, create=True)
        count = self._held_count.get((header.topic, header.consumer_group, header.queue_id), 0)
        return request.response(ext_fields=PollingInfoResponseHeader(polling_num=count).encode())

    # -- holding --------------------------------------------------------------------------------

    def _polling_full(self, polling_key: tuple[str, str, int]) -> bool:
        return self._held_total >= MAX_HELD or self._held_count.get(polling_key, 0) >= MAX_HELD_PER_QUEUE

    def _park(
        self,
        conn: Connection,
        request: RemotingCommand,
        polling_key: tuple[str, str, int],
        watched: tuple[str, ...],
        alike: tuple[object, ...],
        attempt: Callable[[], RemotingCommand | None],
        expire: Callable[[], RemotingCommand],
        poll_time_ms: int,
    ) -> None:
        if not self._listening:  # a broker nobody pops from pays nothing per stored message
            self._broker.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        held = _Held(conn, request, polling_key, watched, alike, attempt, expire)
        for topic in watched:
            self._held.setdefault(topic, {})[held] = None
        self._held_by_conn.setdefault(conn, {})[held] = None
        self._held_count[polling_key] = self._held_count.get(polling_key, 0) + 1
        self._held_total += 1
        delay = min(poll_time_ms, MAX_POLL_TIME_MS) / 1000
        held.timer = asyncio.get_running_loop().call_later(delay, self._expire, held)
        conn.answer_later(request, long_polling=True)

    def _unpark(self, held: _Held) -> bool:
        """Forget *held*; False if it was forgotten already."""
        if held.timer is None:
            return False
        held.timer.cancel()
        held.timer = None
        for topic in held.watched:
            watchers = self._held.get(topic)
            if watchers is not None:
                watchers.pop(held, None)
                if not watchers:
                    del self._held[topic]
        mine = self._held_by_conn[held.conn]
        del mine[held]
        if not mine:
            del self._held_by_conn[held.conn]
        self._held_total -= 1
        left = self._held_count[held.polling_key] - 1
        if left:
            self._held_count[held.polling_key] = left
        else:
            del self._held_count[held.polling_key]
        return True

    def drop_connection(self, conn: Connection) -> None:
        """Forget the pops and notifications held for a connection that closed (nobody to answer)."""
        for held in list(self._held_by_conn.get(conn, ())):
            self._unpark(held)

    def _expire(self, held: _Held) -> None:
        if self._unpark(held) and held.conn.is_open:
            self._reply_with(held.conn, held.request, held.expire)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        # The store's arrival listener: one dict lookup per stored message when nothing is held.
        if topic in self._held:
            self._wake_soon(topic)

    def _wake_soon(self, topic: str) -> None:
        """Try the pops held on *topic* again, once, after the current step (a send's, an ack's)."""
        if topic in self._held and topic not in self._wake_pending:
            self._wake_pending.add(topic)
            asyncio.get_running_loop().call_soon(self._wake, topic)

    def _wake(self, topic: str) -> None:
        """Try the held requests in the order they came, each kind until one finds nothing: what
        arrived is then taken, and the rest of that kind stay held without reading."""
        self._wake_pending.discard(topic)
        found_nothing: set[tuple[object, ...]] = set()
        for held in list(self._held.get(topic, ())):
            if held.timer is None or held.alike in found_nothing:
                continue  # answered meanwhile through another topic it watches, or nothing for it
            if not held.conn.is_open:
                self._unpark(held)
                continue
            try:
                response = held.attempt()
            except Exception as exc:
                self._unpark(held)
                held.conn.reply_error(held.request, exc)
                continue
            if response is None:
                found_nothing.add(held.alike)
            else:
                self._unpark(held)
                self._reply(held.conn, held.request, response)

    # -- revive ---------------------------------------------------------------------------------

    def _remember(self, key: QueueKey, offset: int, entry: InFlight) -> None:
        heapq.heappush(self._revive_heap, (entry.visible_at, next(self._order), key, offset, entry.pop_time))
        if len(self._revive_heap) > self._revive_heap_limit:
            self._rebuild_revive_heap()
        if self._running:
            self._arm_revive()

    def _rebuild_revive_heap(self) -> None:
        """The heap of what is in flight now: acks and changes leave their entries behind, which
        would otherwise pile up with throughput times invisible time."""
        heap = [
            (entry.visible_at, next(self._order), key, offset, entry.pop_time)
            for key, state in self.journal.states.items()
            for offset, entry in state.inflight.items()
            if not entry.reviving
        ]
        heapq.heapify(heap)
        self._revive_heap = heap
        self._revive_heap_limit = 2 * len(heap) + REVIVE_HEAP_SLACK

    def _arm_revive(self) -> None:
        if not self._revive_heap or not self._running:
            return
        due = self._revive_heap[0][0]
        if self._revive_timer is not None:
            if self._revive_timer_at <= due:
                return
            self._revive_timer.cancel()
        loop = asyncio.get_running_loop()
        self._revive_timer_at = due
        self._revive_timer = loop.call_later(max(0.0, (due - _now_ms()) / 1000), self._revive_due)

    def _revive_due(self) -> None:
        self._revive_timer = None
        if self._broker.is_slave:  # a slave's journal waits for the day it is master again
            self._revive_timer_at = _now_ms() + REVIVE_RETRY_MS
            self._revive_timer = asyncio.get_running_loop().call_later(
                REVIVE_RETRY_MS / 1000, self._revive_due
            )
            return
        now = _now_ms()
        for _ in range(REVIVE_BATCH):
            if not self._revive_heap or self._revive_heap[0][0] > now:
                break
            _, _, key, offset, pop_time = heapq.heappop(self._revive_heap)
            state = self.journal.states.get(key)
            entry = state.inflight.get(offset) if state is not None else None
            if (
                state is None
                or entry is None
                or entry.reviving
                or entry.pop_time != pop_time
                or entry.visible_at > now
            ):
                continue  # settled, given a new invisible time, or its copy on its way to disk
            try:
                self._revive(key, state, offset, entry)
            except Exception:
                log.exception("reviving %s@%d offset %d of group %s failed", key[1], key[2], offset, key[0])
                entry.invisible_time += REVIVE_RETRY_MS  # in memory only: tried again shortly
                heapq.heappush(
                    self._revive_heap, (entry.visible_at, next(self._order), key, offset, entry.pop_time)
                )
        else:
            if self._revive_heap and self._revive_heap[0][0] <= now:
                # More are due: the rest in the next step, after the requests waiting meanwhile.
                self._revive_timer_at = now
                self._revive_timer = asyncio.get_running_loop().call_later(0, self._revive_due)
                return
        self._arm_revive()

    def _revive(self, key: QueueKey, state: QueueState, offset: int, entry: InFlight) -> None:
        group, topic, queue_id = key
        group_config = self._broker.groups.get(group)
        max_times = group_config.retry_max_times if group_config is not None else DEFAULT_RETRY_MAX_TIMES
        record = self._record_at(topic, queue_id, offset)
        if record is None:  # cleaned from the store meanwhile: nothing left to deliver
            self._settle(key, [offset])
            return
        if entry.order:
            count = state.counts.get(offset, 0)
            if count < max_times:  # handed out again, in its place
                self.journal.append(PopJournal.expired_record(key, offset, count + 1))
                self._commit(key, state)
                self._wake_soon(topic)
                return
            end = self._dead_letter(group, topic, record, count)
        elif record.reconsume_times >= max_times:
            end = self._dead_letter(group, topic, record, record.reconsume_times)
        else:
            end = self._retry(group, topic, record, entry)
        if not self._broker.sync_flush:
            self._settle(key, [offset])
            return
        # SYNC_FLUSH: the original is settled only once its copy is on disk, so that no power loss
        # keeps the settlement and loses the copy. Meanwhile it stays in flight, out of the heap.
        entry.reviving = True
        flushed = self._broker.store.when_flushed(end)
        flushed.add_done_callback(lambda done: self._copy_flushed(done, key, offset, entry))

    def _copy_flushed(self, done: asyncio.Future[bool], key: QueueKey, offset: int, entry: InFlight) -> None:
        state = self.journal.states.get(key)
        if state is None or state.inflight.get(offset) is not entry:
            return  # acked or dropped meanwhile
        if not done.cancelled() and done.result():
            self._settle(key, [offset])
        else:  # not on disk: revived again shortly (a second copy: at least once)
            entry.reviving = False
            entry.invisible_time += REVIVE_RETRY_MS
            self._remember(key, offset, entry)

    def _subscribed_topic(self, group: str, topic: str, record: DecodedRecord) -> str:
        prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}_"
        if topic.startswith(prefix):
            return decode_properties(record.properties).get(RETRY_TOPIC) or topic[len(prefix) :]
        return topic

    def _retry(self, group: str, topic: str, record: DecodedRecord, entry: InFlight) -> int:
        broker = self._broker
        subscribed = self._subscribed_topic(group, topic, record)
        retry = broker.topics.create_retry_topic(pop_retry_topic(subscribed, group), 1)
        properties = decode_properties(record.properties)
        properties.pop(POP_CK, None)
        properties.pop(_RECORD_CRC_PROPERTY, None)
        properties.setdefault(RETRY_TOPIC, subscribed)
        properties.setdefault(ORIGIN_MESSAGE_ID, properties.get("UNIQ_KEY") or record.offset_msg_id)
        properties.setdefault(FIRST_POP_TIME, str(entry.pop_time))
        queue_id = random.randrange(max(1, retry.write_queue_nums))
        message = copy_of_record(
            record, properties, retry.topic_name, queue_id, broker.store_host, record.reconsume_times + 1
        )
        return self._put(message)

    def _dead_letter(self, group: str, topic: str, record: DecodedRecord, reconsume_times: int) -> int:
        broker = self._broker
        subscribed = self._subscribed_topic(group, topic, record)
        dlq = broker.topics.dead_letter_topic(group)
        properties = decode_properties(record.properties)
        properties.pop(POP_CK, None)
        properties.pop(_RECORD_CRC_PROPERTY, None)
        properties.setdefault(RETRY_TOPIC, subscribed)
        properties.setdefault(DLQ_ORIGIN_TOPIC, subscribed)
        properties.setdefault(DLQ_ORIGIN_MESSAGE_ID, properties.get("UNIQ_KEY") or record.offset_msg_id)
        message = copy_of_record(
            record, properties, dlq.topic_name, 0, broker.store_host, reconsume_times + 1
        )
        end = self._put(message)
        broker.stats.count_dlq(group, subscribed)
        return end

    def _put(self, message: MessageToStore) -> int:
        """Store a revived copy; its commit-log end offset."""
        store = self._broker.store
        result = store.put(message)
        if result.status is not PutStatus.PUT_OK:
            raise RuntimeError(store.write_refusal or result.status.name)
        self._broker.stats.count_put(message.topic, 1, result.wrote_bytes)
        return result.commitlog_end_offset

    # -- groups and topics going away -----------------------------------------------------------

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An administrator reset the group's offset of the queue: pops go on from *offset*, and what
        was in flight there is forgotten (RocketMQ's resetPopOffset)."""
        key = (group, topic, queue_id)
        if key in self.journal.states:
            self.journal.append(PopJournal.reset_record(key, offset))
            self._wake_soon(topic)

    def follow_master(self) -> None:
        """The broker became a slave: what it had in flight is its old mastership's. The consume
        offsets it copies from its master are the truth from now on, and should it be master again,
        its pops start from them (what is in flight at a master that fails is delivered again)."""
        for held in {held for watchers in self._held.values() for held in watchers}:
            self._unpark(held)
            if held.conn.is_open:
                refusal = held.request.response(ResponseCode.SERVICE_NOT_AVAILABLE, self._slave_remark())
                held.conn.reply(held.request, refusal)
        self._forget_all()
        self._rebuild_revive_heap()

    def _forget_all(self) -> None:
        if self.journal.states:
            self.journal.append(PopJournal.drop_all_record())

    def _slave_remark(self) -> str:
        return f"broker {self._broker.config.broker_name} is a slave: POP consumption is served by its master"

    def forget_group(self, group: str) -> None:
        """The group was deleted: its messages in flight are nobody's."""
        if any(key[0] == group for key in self.journal.states):
            self.journal.append(PopJournal.drop_group_record(group))

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: a topic made again under its name starts its queues at 0."""
        if any(key[1] == topic for key in self.journal.states):
            self.journal.append(PopJournal.drop_topic_record(topic))


def _delivered(
    record: DecodedRecord, subscribed_topic: str, handle: ExtraInfo, reconsume_times: int
) -> bytes:
    """The stored *record* (the store keeps IPv4 hosts only) as a pop hands it out: under the topic
    subscribed to (a retried message's too, as RocketMQ's popResponseReturnActualRetryTopic=false),
    with its receipt handle in POP_CK, its first pop time, and its reconsume times (an order pop's
    count of redeliveries)."""
    stored = record.properties
    if _POP_CK_NAME in stored or _RECORD_CRC_PROPERTY in stored:
        properties = decode_properties(stored)
        properties.pop(_RECORD_CRC_PROPERTY, None)  # the record is rewritten: its record CRC no longer holds
        properties[POP_CK] = str(handle)
        properties.setdefault(FIRST_POP_TIME, str(handle.pop_time))
        text = encode_properties(properties)
    else:  # the usual record: the two properties appended to its text (bench/pop.py)
        text = f"{stored}\x02{POP_CK}\x01{handle}" if stored else f"{POP_CK}\x01{handle}"
        if _FIRST_POP_TIME_NAME not in stored:
            text = f"{text}\x02{FIRST_POP_TIME}\x01{handle.pop_time}"
    topic = subscribed_topic.encode()
    encoded = text.encode()
    buffer = bytearray(record_size(len(record.body), len(topic), len(encoded)))
    encode_record_into(
        buffer,
        0,
        record.queue_id,
        record.flag,
        record.queue_offset,
        record.commitlog_offset,
        record.sys_flag,
        record.born_timestamp,
        record.born_host,
        record.store_timestamp,
        record.store_host,
        reconsume_times,
        record.prepared_transaction_offset,
        record.body,
        topic,
        encoded,
    )
    return bytes(buffer)
