"""Transactional messages: a message (or several, across topics and brokers) that consumers see only
once the producer's local transaction committed.

RocketMQ's protocol underneath (docs/protocol.md, "Transactions"): each message is first sent as a
*half message* (properties ``TRAN_MSG=true`` and ``PGROUP=<group>``, sys flag PREPARED), which the
broker stores out of its consumers' sight. END_TRANSACTION then commits it (the broker copies it to its
real queue) or rolls it back. A half message that no END_TRANSACTION settles is *checked back*: after
the broker's ``transactionTimeOut`` it asks a live producer of the same group (CHECK_TRANSACTION_STATE)
and that producer's ``check`` callback answers, again and again until it answers COMMIT or ROLLBACK or
the broker gives up (``transactionCheckMax`` checks; the message is then discarded).

What is guaranteed:

- A message sent in a transaction is delivered to consumers only if the transaction commits, and then
  once; one rolled back is never delivered. A transaction whose ends are lost (the producer died, the
  END_TRANSACTION request failed) is settled by the check-back, as its ``check`` answers.
- Several messages of one :class:`Transaction` share one transaction id (property
  ``__transactionId__``). Check-backs of one id ask the checker once: concurrent checks share one call,
  and a COMMIT or ROLLBACK answer is remembered (up to ``REMEMBERED_DECISIONS`` ids for
  ``REMEMBER_DECISION_S`` seconds), so every message of the transaction is settled the same way even if
  the checker would later answer otherwise. A transaction still open in this producer is answered
  UNKNOWN without asking the checker; one this producer ended answers as it ended.
- Not atomic visibility: each message of a committed transaction becomes visible when its broker
  processes its END_TRANSACTION (or check-back), so a consumer may see one message of a transaction a
  moment (or, if an END was lost, a check interval) before another.
- The checker must answer COMMIT or ROLLBACK only for a local transaction that is decided; while it
  may still go either way, it answers UNKNOWN (any producer of the group may be asked, also while the
  transaction is running in another process).

A transactional message's ``delay_level`` delays its committed copy (CometMQ's brokers; RocketMQ's Java
client drops the delay of a transactional message). Transactional messages are not sent in batches
(brokers refuse them).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from cometmq.client._brokerapi import send_header
from cometmq.client._lifecycle import RUNNING
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.client.producer import Producer, _Request
from cometmq.errors import ClientStateError, CometMQError, InvalidMessageError, OptionError
from cometmq.protocol import RequestCode, ResponseCode
from cometmq.protocol.broker_headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.protocol.transaction import (
    PRODUCER_GROUP,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    TransactionType,
    with_transaction_type,
)

__all__ = [
    "CheckFn",
    "ExecuteFn",
    "Transaction",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
]

log = logging.getLogger("cometmq.client")

# How many transaction ids' COMMIT/ROLLBACK answers a producer remembers for check-backs, and for how
# long: the messages of one transaction are checked within a few check intervals of each other.
REMEMBERED_DECISIONS = 10_000
REMEMBER_DECISION_S = 600.0


class TransactionState(enum.Enum):
    """A local transaction's outcome: what END_TRANSACTION tells the broker."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"  # not decided yet: the broker checks back later


# END_TRANSACTION's commitOrRollback for each state (the sys-flag transaction types; 0 changes nothing).
_COMMIT_OR_ROLLBACK = {
    TransactionState.COMMIT: TransactionType.COMMIT,
    TransactionState.ROLLBACK: TransactionType.ROLLBACK,
    TransactionState.UNKNOWN: TransactionType.NOT_TYPE,
}

CheckFn = Callable[[ReceivedMessage], TransactionState | Awaitable[TransactionState]]
ExecuteFn = Callable[[Message], TransactionState | Awaitable[TransactionState]]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """What :meth:`TransactionProducer.send_in_transaction` did: the half message's ``send_result``, the
    ``state`` sent in END_TRANSACTION and the ``transaction_id`` (the message's UNIQ_KEY, as RocketMQ's
    clients use it)."""

    send_result: SendResult
    state: TransactionState
    transaction_id: str

    @property
    def status(self) -> SendStatus:
        return self.send_result.status

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id

    @property
    def offset_msg_id(self) -> str:
        """The half record's offset id (the committed copy gets an id of its own)."""
        return self.send_result.offset_msg_id

    @property
    def queue(self) -> MessageQueue:
        return self.send_result.queue

    @property
    def queue_offset(self) -> int:
        """The half message's offset in the broker's half queue."""
        return self.send_result.queue_offset


class _Decisions:
    """COMMIT/ROLLBACK answers by transaction id: at most *capacity* ids, each for *ttl* seconds,
    the oldest forgotten first."""

    def __init__(self, capacity: int = REMEMBERED_DECISIONS, ttl: float = REMEMBER_DECISION_S) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._states: OrderedDict[str, tuple[TransactionState, float]] = OrderedDict()

    def get(self, transaction_id: str) -> TransactionState | None:
        entry = self._states.get(transaction_id)
        if entry is None:
            return None
        state, expires = entry
        if time.monotonic() >= expires:
            del self._states[transaction_id]
            return None
        return state

    def remember(self, transaction_id: str, state: TransactionState) -> None:
        states = self._states
        states[transaction_id] = (state, time.monotonic() + self._ttl)
        states.move_to_end(transaction_id)
        while len(states) > self._capacity:
            states.popitem(last=False)


class TransactionProducer(Producer):
    """A :class:`~cometmq.client.producer.Producer` that also sends transactional messages.

    ::

        def check(message: ReceivedMessage) -> TransactionState:
            saved = order_saved(message.transaction_id)
            return TransactionState.COMMIT if saved else TransactionState.ROLLBACK

        async with TransactionProducer("PID_orders", "127.0.0.1:9876", check=check) as producer:
            result = await producer.send_in_transaction(Message("Orders", body), save_order)
            async with producer.transaction() as tx:  # several messages: all or none
                await tx.send(Message("Orders", body))
                await tx.send(Message("Invoices", invoice))

    ``check`` answers the brokers' check-backs for half messages of this group that no END_TRANSACTION
    settled (the module's docstring says how often it is asked): a coroutine function runs on the event
    loop, a plain function in a worker thread; raising counts as UNKNOWN. Every producer of a group
    should have the same checker: a broker asks any one of them. The other options are
    :class:`~cometmq.client.producer.Producer`'s.
    """

    kind = "transaction producer"

    def __init__(self, group: str, namesrv: str, *, check: CheckFn, **options: Any) -> None:
        if not callable(check):
            raise OptionError(f"check must be a function answering a TransactionState, not {check!r}")
        super().__init__(group, namesrv, **options)
        self.check = check
        self._open: dict[str, Transaction] = {}
        self._decisions = _Decisions()
        self._checks: dict[str, asyncio.Task[TransactionState]] = {}
        self._check_answers: set[asyncio.Task[None]] = set()
        self._heartbeats: asyncio.Task[None] | None = None

    # life cycle --------------------------------------------------------------------------------

    async def _start(self) -> None:
        """Also register as the group's transaction member, and heartbeat every master of the
        cluster now (in the background) and on every route refresh: a broker checks back only
        producers it knows from their heartbeats, and a producer that never sent anything knows no
        broker from its routes."""
        await super()._start()
        self._instance.register_transaction_member(self)
        self._heartbeats = asyncio.create_task(self._heartbeat_all_masters())

    async def _close(self, timeout: float) -> None:
        """Also wait up to ``timeout`` s for the check-back answers in progress. Transactions still
        open are left to the check-back."""
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
        if self._check_answers:
            _, unfinished = await asyncio.wait(self._check_answers, timeout=timeout)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        await super()._close(timeout)

    async def _heartbeat_all_masters(self) -> None:
        instance = self._instance
        while True:
            try:
                await instance.learn_brokers()
            except CometMQError as exc:
                log.info("cannot list the cluster's brokers: %s", exc)
            else:
                await instance.send_heartbeat()
            await asyncio.sleep(instance.route_refresh_interval)

    # sending -----------------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        """A new transaction of several messages (a new id), best used as ``async with``: it
        commits when the block ends normally and rolls back when it raises."""
        self._check_running()
        transaction = Transaction(self, uuid.uuid4().hex)
        self._open[transaction.transaction_id] = transaction
        return transaction

    async def send_in_transaction(self, message: Message, execute: ExecuteFn) -> TransactionSendResult:
        """Send ``message`` as a half message, run ``execute(message)`` (the local transaction; a
        coroutine function is awaited), and end the transaction as it answers.

        A half message that cannot be sent raises (``execute`` is not called). One stored without the
        safety asked for (a status other than SEND_OK) is rolled back without calling ``execute``, as
        RocketMQ's clients do. ``execute`` raising sends UNKNOWN (the check-back decides) and the
        exception propagates. An END_TRANSACTION that fails is logged and left to the check-back.
        """
        transaction = self._single_transaction()
        sent = await transaction.send(message)
        if sent.status is not SendStatus.SEND_OK:
            await transaction._end(TransactionState.ROLLBACK)
            return TransactionSendResult(sent, TransactionState.ROLLBACK, transaction.transaction_id)
        try:
            outcome = execute(message)
            answer = await outcome if inspect.isawaitable(outcome) else outcome
        except BaseException:  # cancelled too: the transaction must not stay open here
            await transaction._end(TransactionState.UNKNOWN)
            raise
        state = checked_state(answer, "the local transaction")
        await transaction._end(state)
        return TransactionSendResult(sent, state, transaction.transaction_id)

    def _single_transaction(self) -> Transaction:
        """The transaction of :meth:`send_in_transaction`: its one message's UNIQ_KEY is its id."""
        self._check_running()
        return Transaction(self, None)

    def _half_request(self, msg: Message, transaction_id: str | None) -> _Request:
        """A send of ``msg`` as a half message of this group (with ``__transactionId__`` when
        ``transaction_id`` is given)."""
        self._check_running()
        if TRANSACTION_ID in msg.properties:
            raise InvalidMessageError(f"property {TRANSACTION_ID} is set by the transaction, not by hand")
        body, sys_flag, text, uniq = self._prepare(msg)
        text += f"\x02{TRANSACTION_PREPARED}\x01true\x02{PRODUCER_GROUP}\x01{self.group}"
        if transaction_id is not None:
            text += f"\x02{TRANSACTION_ID}\x01{transaction_id}"
        sys_flag = with_transaction_type(sys_flag, TransactionType.PREPARED)
        header = send_header(self.group, msg.topic, text, sys_flag, msg.flag)
        return _Request(RequestCode.SEND_MESSAGE_V2, msg.topic, header, body, uniq)

    async def _end_all(
        self, transaction_id: str, halves: list[tuple[str, SendResult]], state: TransactionState
    ) -> tuple[SendResult, ...]:
        """Send END_TRANSACTION with ``state`` for every half (topic, send result) of a transaction,
        at once; the halves whose END failed (logged: the check-back settles them)."""
        if state is not TransactionState.UNKNOWN:
            # Before the ends go out: a check-back racing them answers the same.
            self._decisions.remember(transaction_id, state)
        self._open.pop(transaction_id, None)
        ended = await asyncio.gather(*(self._end_one(transaction_id, *half, state) for half in halves))
        return tuple(result for (_, result), ok in zip(halves, ended, strict=True) if not ok)

    async def _end_one(
        self, transaction_id: str, topic: str, half: SendResult, state: TransactionState
    ) -> bool:
        broker = half.queue.broker_name
        try:
            header = EndTransactionRequestHeader(
                producer_group=self.group,
                tran_state_table_offset=half.queue_offset,
                commit_log_offset=decode_offset_msg_id(half.offset_msg_id)[2],
                commit_or_rollback=_COMMIT_OR_ROLLBACK[state],
                from_transaction_check=False,
                msg_id=half.msg_id,
                transaction_id=transaction_id,
                topic=topic,
            )
            addr = self._instance.broker_addr(broker)
            if addr is None:
                await self._instance.refresh_route_soon(topic)
                addr = self._instance.broker_addr(broker)
            if addr is None:
                raise CometMQError(f"no master address is known for broker {broker!r}")
            response = await self._instance.invoke(
                addr, RequestCode.END_TRANSACTION, header.encode(), timeout=self.send_timeout
            )
        except (CometMQError, ValueError) as exc:  # ValueError: the broker's msgId is no offset id
            failure = str(exc)
        else:
            if response.code == ResponseCode.SUCCESS:
                return True
            failure = f"answered {response.code}: {response.remark}"
        log.warning(
            "ending transaction %s (%s) of message %s on %s failed, left to the check-back: %s",
            transaction_id, state.name, half.msg_id, broker, failure,
        )  # fmt: skip
        return False

    # check-backs -------------------------------------------------------------------------------

    def check_transaction_state(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        """A broker at ``broker_addr`` asks about the half ``message``: answer it from a task."""
        if self._state is not RUNNING:
            return
        task = asyncio.get_running_loop().create_task(self._answer_check(broker_addr, request, message))
        self._check_answers.add(task)
        task.add_done_callback(self._check_answers.discard)

    async def _answer_check(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        transaction_id = message.transaction_id
        state = await self._state_of(transaction_id, message)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=request.tran_state_table_offset,
            commit_log_offset=request.commit_log_offset,
            commit_or_rollback=_COMMIT_OR_ROLLBACK[state],
            from_transaction_check=True,
            msg_id=request.msg_id or message.msg_id,
            transaction_id=request.transaction_id or transaction_id,
            topic=request.topic or message.topic,
        )
        try:
            response = await self._instance.invoke(
                broker_addr, RequestCode.END_TRANSACTION, header.encode(), timeout=self.send_timeout
            )
        except CometMQError as exc:
            failure = str(exc)
        else:
            if response.code == ResponseCode.SUCCESS:
                return
            failure = f"answered {response.code}: {response.remark}"
        log.warning(
            "answering the check of transaction %s (%s) to %s failed: %s",
            transaction_id, state.name, broker_addr, failure,
        )  # fmt: skip

    async def _state_of(self, transaction_id: str, message: ReceivedMessage) -> TransactionState:
        """The answer to a check of ``transaction_id``: UNKNOWN while it is open here, the remembered
        decision, or the checker's answer (one call at a time per id)."""
        if transaction_id in self._open:
            return TransactionState.UNKNOWN
        known = self._decisions.get(transaction_id)
        if known is not None:
            return known
        asking = self._checks.get(transaction_id)
        if asking is None:
            asking = asyncio.get_running_loop().create_task(self._ask_checker(transaction_id, message))
            self._checks[transaction_id] = asking
            asking.add_done_callback(lambda _: self._checks.pop(transaction_id, None))
        return await asyncio.shield(asking)

    async def _ask_checker(self, transaction_id: str, message: ReceivedMessage) -> TransactionState:
        check = self.check
        try:
            if inspect.iscoroutinefunction(check):
                answer = await check(message)
            else:
                answer = await asyncio.to_thread(check, message)
                if inspect.isawaitable(answer):
                    answer = await answer
            state = checked_state(answer, "the checker")
        except Exception:
            log.exception(
                "the checker of group %s failed on transaction %s: UNKNOWN", self.group, transaction_id
            )
            return TransactionState.UNKNOWN
        if state is not TransactionState.UNKNOWN:
            self._decisions.remember(transaction_id, state)
        return state


def checked_state(answer: object, who: str) -> TransactionState:
    """``answer`` if it is a TransactionState; anything else (None included) is UNKNOWN, logged."""
    if isinstance(answer, TransactionState):
        return answer
    log.warning("%s answered %r, not a TransactionState: UNKNOWN", who, answer)
    return TransactionState.UNKNOWN


class Transaction:
    """Several messages, across topics and brokers, committed or rolled back together
    (:meth:`TransactionProducer.transaction`).

    Each :meth:`send` stores a half message carrying :attr:`transaction_id`; :meth:`commit` or
    :meth:`rollback` sends END_TRANSACTION for all of them at once. An END that fails (no answer, a
    refusal) does not raise: it is logged, listed in :attr:`pending`, and its half message is settled by
    the check-back, where this producer (while it runs, for ``REMEMBER_DECISION_S``) answers with the
    state chosen here, and any other producer of the group with its checker's answer for the id. So
    after ``commit()`` returns, every message of the transaction is delivered, at once or after a check;
    after ``rollback()``, none is. ``async with`` commits when the block ends normally and rolls back
    when it raises (the exception propagates); a transaction is ended once. A :meth:`send` that fails
    raises; a half message it stored all the same (an answer lost) carries the id too, and is settled
    by the check-back as the transaction ends.
    """

    def __init__(self, producer: TransactionProducer, transaction_id: str | None) -> None:
        self._producer = producer
        # None for a single-message transaction, whose id is its message's UNIQ_KEY.
        self._id = transaction_id
        self._halves: list[tuple[str, SendResult]] = []
        self._state: TransactionState | None = None
        self.pending: tuple[SendResult, ...] = ()
        """The halves whose END_TRANSACTION failed, left to the check-back."""

    @property
    def transaction_id(self) -> str:
        """32 hex digits for a transaction of several messages; a single message's UNIQ_KEY."""
        if self._id is None:
            raise ClientStateError("the transaction has no id before its message is sent")
        return self._id

    @property
    def state(self) -> TransactionState | None:
        """How the transaction was ended; None while it is open."""
        return self._state

    async def send(self, message: Message) -> SendResult:
        """Send ``message`` as a half message of this transaction; consumers see it once the
        transaction commits. Retried as :meth:`Producer.send` retries."""
        if self._state is not None:
            raise ClientStateError(f"this transaction is ended ({self._state.name}): start another")
        producer = self._producer
        request = producer._half_request(message, self._id)
        single = self._id is None
        if single:  # the transaction of send_in_transaction: its id is its message's UNIQ_KEY
            self._id = request.uniq
            producer._open[request.uniq] = self
        try:
            result = await producer._deliver(request, None, None)
        except BaseException:
            if single:
                # The half may be stored all the same (no answer came): the local transaction
                # never ran, so its check-back is answered ROLLBACK.
                producer._open.pop(request.uniq, None)
                producer._decisions.remember(request.uniq, TransactionState.ROLLBACK)
            raise
        self._halves.append((message.topic, result))
        return result

    async def commit(self) -> None:
        """Make every message sent in this transaction visible to consumers."""
        await self._end(TransactionState.COMMIT)

    async def rollback(self) -> None:
        """Drop every message sent in this transaction."""
        await self._end(TransactionState.ROLLBACK)

    async def _end(self, state: TransactionState) -> None:
        if self._state is not None:
            raise ClientStateError(f"this transaction is ended already ({self._state.name})")
        self._state = state
        self.pending = await self._producer._end_all(self.transaction_id, self._halves, state)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state is not None:
            return
        await self._end(TransactionState.COMMIT if exc_type is None else TransactionState.ROLLBACK)
