"""Transactional messages: a message (or several, across topics and brokers) that consumers see only
once the producer's local transaction committed.

RocketMQ's protocol underneath (docs/protocol.md, "Transactions"): each message is first sent as a
*half message* (properties ``TRAN_MSG=true`` and ``PGROUP=<group>``, sys flag PREPARED), which the
broker stores out of its consumers' sight. END_TRANSACTION then commits it (the broker copies it to its
real queue) or rolls it back. A half message that no END_TRANSACTION settles is *checked back*: after
the broker's ``transactionTimeOut`` it asks a live producer of the same group (CHECK_TRANSACTION_STATE)
and that producer's ``check`` callback answers, again every ``transactionCheckInterval`` until it
answers COMMIT or ROLLBACK or the broker gives up after ``transactionCheckMax`` checks: the half is then
discarded (never delivered). So a transaction may stay open at most transactionTimeOut +
transactionCheckMax * transactionCheckInterval (6 s + 15 * 30 s by default): past that, its first
halves are discarded, and ending it COMMIT raises :class:`~cometmq.errors.TransactionError`.

What is guaranteed:

- A message sent in a transaction is delivered to consumers only if the transaction commits; one
  rolled back is never delivered. A transaction whose ENDs are lost (the producer died, the request got
  no answer) is settled by the check-back. An END the broker refuses (the half was settled otherwise:
  discarded, or ended the other way) raises :class:`~cometmq.errors.TransactionError` naming it.
- Every transaction has an id of its own, 32 hex digits (property ``__transactionId__`` on each of its
  halves; never the caller's UNIQ_KEY, which a caller may reuse). Check-backs of one id ask the checker
  once at a time, and a COMMIT or ROLLBACK answer is remembered (up to ``REMEMBERED_DECISIONS`` ids for
  ``REMEMBER_DECISION_S`` seconds), so every message of the transaction is settled the same way even if
  the checker would later answer otherwise. A transaction still open in this producer is answered
  UNKNOWN without asking the checker. One this producer ended is remembered only while some of its
  halves may still be checked (an END got no answer, or a send failed or was retried): such a check is
  answered as it ended.
- A half stored by a send attempt whose answer was lost, then sent again (an *orphan*): while the
  producer that sent it runs, its check is answered ROLLBACK (the producer knows the halves whose send
  was answered). Checked by another producer, or after a restart, it is decided by the checker for its
  id like the rest of the transaction, so on a topic without deduplication a committed message may then
  be delivered twice (at least once); with deduplication on the topic (``+deduplication=true``) the
  retry is answered with the first copy and it is delivered exactly once.
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
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from cometmq.client._brokerapi import send_header
from cometmq.client._lifecycle import RUNNING
from cometmq.client._trace import now_ms
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.client.producer import Producer, _Request
from cometmq.errors import ClientStateError, CometMQError, InvalidMessageError, OptionError, TransactionError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.protocol.trace import MessageType
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
# Threads running plain checkers and plain local transactions (send_in_transaction's execute).
WORKER_THREADS = 4


# END answers that decide a half: settled as asked (SUCCESS), or refused for good (the half was settled
# the other way: TRANSACTION_FAILED; it is not a half of this group at these offsets: SYSTEM_ERROR).
_SETTLED_OR_REFUSED = frozenset(
    {ResponseCode.SUCCESS, ResponseCode.TRANSACTION_FAILED, ResponseCode.SYSTEM_ERROR}
)


class TransactionState(enum.Enum):
    """A local transaction's outcome: what END_TRANSACTION tells the broker."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"  # not decided yet: the broker checks back later


# Each state's name in RocketMQ's LocalTransactionState, as trace records write it.
_LOCAL_TRANSACTION_STATE = {
    TransactionState.COMMIT: "COMMIT_MESSAGE",
    TransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    TransactionState.UNKNOWN: "UNKNOW",
}

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
    ``state`` sent in END_TRANSACTION and the ``transaction_id`` (32 hex digits, the message's
    ``__transactionId__``)."""

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


@dataclass(frozen=True, slots=True)
class _Decision:
    state: TransactionState
    expires: float  # time.monotonic()
    # The offset msg ids of the halves whose send was answered, for a transaction this producer ended:
    # any other half of the id is an orphan of a retried send. None for the checker's answers.
    answered: frozenset[str] | None


class _Decisions:
    """COMMIT/ROLLBACK answers by transaction id: at most *capacity* ids, each for *ttl* seconds,
    the oldest forgotten first."""

    def __init__(self, capacity: int = REMEMBERED_DECISIONS, ttl: float = REMEMBER_DECISION_S) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._decisions: OrderedDict[str, _Decision] = OrderedDict()

    def __contains__(self, transaction_id: str) -> bool:
        return self.get(transaction_id) is not None

    def get(self, transaction_id: str) -> _Decision | None:
        decision = self._decisions.get(transaction_id)
        if decision is not None and time.monotonic() >= decision.expires:
            del self._decisions[transaction_id]
            return None
        return decision

    def remember(
        self, transaction_id: str, state: TransactionState, answered: frozenset[str] | None = None
    ) -> None:
        decisions = self._decisions
        decisions[transaction_id] = _Decision(state, time.monotonic() + self._ttl, answered)
        decisions.move_to_end(transaction_id)
        while len(decisions) > self._capacity:
            decisions.popitem(last=False)

    def forget(self, transaction_id: str) -> None:
        self._decisions.pop(transaction_id, None)


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
    settled: a coroutine function runs on the event loop, a plain function in the producer's worker
    threads; raising counts as UNKNOWN. Every producer of a group should have the same checker: a broker
    asks any one of them.

    Guarantee (the module's docstring has the details): a committed transaction's messages are all
    delivered, a rolled back one's never, a transaction ended UNKNOWN or whose ENDs got no answer is
    settled by the check-back. A transaction may stay open at most the broker's transactionTimeOut +
    transactionCheckMax * transactionCheckInterval (6 s + 15 * 30 s by default); past it the broker
    discards its first halves and ending it COMMIT raises :class:`~cometmq.errors.TransactionError`.

    A broker checks back only producers it knows from their heartbeats, so this producer heartbeats
    every master of the cluster (listed by GET_BROKER_CLUSTER_INFO at start and on every route refresh),
    also those it never sent to. Where the name server's access control refuses that listing (the
    producer's user needs Cluster Get on the name server), it warns once and heartbeats only the brokers
    of its routes: check-backs then come only from brokers this producer sent to. The other options are
    :class:`~cometmq.client.producer.Producer`'s.
    """

    kind = "transaction producer"

    def __init__(self, group: str, namesrv: str, *, check: CheckFn, **options: Any) -> None:
        if not callable(check):
            raise OptionError(f"check must be a function answering a TransactionState, not {check!r}")
        super().__init__(group, namesrv, **options)
        self.check = check
        # Weakly: a transaction dropped without an end is collected (and warns), and its halves' checks
        # go to the checker.
        self._open: weakref.WeakValueDictionary[str, Transaction] = weakref.WeakValueDictionary()
        self._decisions = _Decisions()
        self._checks: dict[str, asyncio.Task[TransactionState]] = {}
        self._ending: set[asyncio.Task[Any]] = set()  # the ENDs of transactions, going on
        self._answering: set[asyncio.Task[Any]] = set()  # the answers to check-backs, going on
        self._send_attempts: dict[str, int] = {}  # UNIQ_KEY of a half being sent → attempts made
        self._workers = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix=f"cometmq-tx-{group}")

    # life cycle --------------------------------------------------------------------------------

    async def _start(self) -> None:
        """Also register as the group's transaction member, which makes the client instance learn
        every master of the cluster now and on every route refresh, and heartbeat them: a broker checks
        back only producers it knows from their heartbeats."""
        await super()._start()
        instance = self._instance
        instance.register_transaction_member(self)
        await instance.learn_brokers()

    async def _close(self, timeout: float) -> None:
        """Also wait up to ``timeout`` s for the ENDs in progress, cancel the check-back answers in
        progress and stop the worker threads. Transactions still open are left to the check-back
        (another producer of the group answers)."""
        if self._ending:  # ENDs a commit or rollback is waiting for
            await asyncio.wait(self._ending, timeout=timeout)
        tasks = [*self._ending, *self._answering, *self._checks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.shutdown(wait=False, cancel_futures=True)
        await super()._close(timeout)

    @staticmethod
    def _spawn(work: Awaitable[Any], tasks: set[asyncio.Task[Any]]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def _in_worker(self, function: Callable[[Any], object], argument: Any) -> object:
        """``function(argument)``: a coroutine function on the loop, a plain one in a worker thread (an
        awaitable it returns is awaited)."""
        if inspect.iscoroutinefunction(function):
            result: object = await function(argument)
        else:
            result = await asyncio.get_running_loop().run_in_executor(self._workers, function, argument)
        return await result if inspect.isawaitable(result) else result

    # sending -----------------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        """A new transaction of several messages (a new id), best used as ``async with``: it
        commits when the block ends normally and rolls back when it raises (cancelled too)."""
        self._check_running()
        transaction = Transaction(self, self._ids.next_id())
        self._open[transaction.transaction_id] = transaction
        return transaction

    async def send_in_transaction(self, message: Message, execute: ExecuteFn) -> TransactionSendResult:
        """Send ``message`` as a half message (of a new transaction id), run ``execute(message)`` (the
        local transaction: a coroutine function is awaited on the loop, a plain function runs in a
        worker thread, which costs a thread hand-off per transaction: bench/transactions.py shows
        both), and end the transaction as it answers.

        A half message that cannot be sent raises (``execute`` is not called; a copy stored all the
        same is rolled back by the check-back). One stored without the safety asked for (a status other
        than SEND_OK) is rolled back without calling ``execute``, as RocketMQ's clients do. ``execute``
        raising sends UNKNOWN (the check-back decides) and the exception propagates. An END that gets no
        answer is logged and left to the check-back, which this producer answers with the state sent;
        an END the broker refuses (the half was discarded after the longest a transaction may stay
        open, see the class) raises :class:`~cometmq.errors.TransactionError`.
        """
        transaction, sent = await self._send_alone(message)
        if sent.status is not SendStatus.SEND_OK:
            return await self._end_alone(transaction, sent, TransactionState.ROLLBACK)
        try:
            answer = await self._in_worker(execute, message)
        except BaseException:  # cancelled too: the transaction must not stay open here
            await transaction._end(TransactionState.UNKNOWN)
            raise
        return await self._end_alone(transaction, sent, answer)

    async def _send_alone(self, message: Message) -> tuple[Transaction, SendResult]:
        """The first step of send_in_transaction: a new transaction with ``message`` as its half."""
        transaction = self.transaction()
        try:
            return transaction, await transaction.send(message)
        except BaseException:
            # The half may be stored all the same (no answer came): the local transaction never ran,
            # so its check-back is answered ROLLBACK.
            with contextlib.suppress(ClientStateError):
                await transaction._end(TransactionState.ROLLBACK)
            raise

    async def _end_alone(
        self, transaction: Transaction, sent: SendResult, answer: object
    ) -> TransactionSendResult:
        """The last step of send_in_transaction: end as the local transaction answered."""
        state = _checked_state(answer, "the local transaction")
        await transaction._end(state)
        return TransactionSendResult(sent, state, transaction.transaction_id)

    def _half_request(self, msg: Message, transaction_id: str) -> _Request:
        """A send of ``msg`` as a half message of this group and of transaction ``transaction_id``."""
        if TRANSACTION_ID in msg.properties:
            raise InvalidMessageError(f"property {TRANSACTION_ID} is set by the transaction, not by hand")
        body, sys_flag, text, uniq = self._prepare(msg)
        text += (
            f"\x02{TRANSACTION_PREPARED}\x01true\x02{PRODUCER_GROUP}\x01{self.group}"
            f"\x02{TRANSACTION_ID}\x01{transaction_id}"
        )
        sys_flag = with_transaction_type(sys_flag, TransactionType.PREPARED)
        header = send_header(self.group, msg.topic, text, sys_flag, msg.flag)
        return _Request(RequestCode.SEND_MESSAGE_V2, msg.topic, header, body, uniq)

    async def _settle(
        self, queue: MessageQueue, started: float, reply: Awaitable[RemotingCommand], uniq: str
    ) -> SendResult:
        """Also count the attempts of a half's send: one retried may have left an orphan half."""
        attempts = self._send_attempts
        if uniq in attempts:
            attempts[uniq] += 1
        return await super()._settle(queue, started, reply, uniq)

    async def _end_all(self, transaction: Transaction, state: TransactionState) -> None:
        """Send END_TRANSACTION with ``state`` for every half of ``transaction`` at once; once all
        answered or failed, raise TransactionError for those refused. The ENDs go on if the caller is
        cancelled meanwhile (the producer's close waits for them up to its timeout)."""
        transaction_id = transaction.transaction_id
        if state is TransactionState.UNKNOWN:
            self._decisions.forget(transaction_id)
        else:
            # Before the ENDs go out: a check-back racing them answers the same.
            answered = frozenset(result.offset_msg_id for _, result in transaction._halves)
            self._decisions.remember(transaction_id, state, answered)
        self._open.pop(transaction_id, None)
        refused = await asyncio.shield(self._spawn(self._send_ends(transaction, state), self._ending))
        if refused:
            raise TransactionError(transaction_id, state.name, refused)

    async def _send_ends(
        self, transaction: Transaction, state: TransactionState
    ) -> list[tuple[str, str, int, str]]:
        """The ENDs of :meth:`_end_all`: the refused halves as (topic, msg id, code, remark). The
        decision is forgotten once every END succeeded, unless a half may be stored unanswered."""
        transaction_id = transaction.transaction_id
        halves = transaction._halves
        answers = await asyncio.gather(*(self._end_one(transaction_id, *half, state) for half in halves))
        transaction._pending = tuple(
            result for (_, result), answer in zip(halves, answers, strict=True) if answer is None
        )
        if self._trace is not None:
            for (_, half), answer in zip(halves, answers, strict=True):
                if answer is not None:
                    self._trace.transaction_ended(
                        self.group,
                        transaction._traced[half.msg_id],
                        half.msg_id,
                        self._instance.broker_addr(half.queue.broker_name) or "",
                        transaction_id,
                        _LOCAL_TRANSACTION_STATE[state],
                        False,
                    )
        settled = all(answer is not None and answer.code == ResponseCode.SUCCESS for answer in answers)
        if settled and not transaction._sends_failed:
            self._decisions.forget(transaction_id)
        return [
            (topic, result.msg_id, answer.code, answer.remark or "")
            for (topic, result), answer in zip(halves, answers, strict=True)
            if answer is not None and answer.code != ResponseCode.SUCCESS
        ]

    async def _end_one(
        self, transaction_id: str, topic: str, half: SendResult, state: TransactionState
    ) -> RemotingCommand | None:
        """The broker's answer to the END of ``half``; None when none came (logged: the check-back
        settles it)."""
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
            answer = await self._instance.invoke(
                addr, RequestCode.END_TRANSACTION, header.encode(), timeout=self.send_timeout
            )
            if answer.code in _SETTLED_OR_REFUSED:
                return answer
            # Not a verdict on the half (a flush or a slave timing out, a master not serving yet):
            # the decision stays remembered, and the check-back settles the half by it.
            raise CometMQError(f"answered {answer.code}: {answer.remark}")
        except (CometMQError, ValueError) as exc:  # ValueError: the broker's msgId is no offset id
            log.warning(
                "ending transaction %s (%s) of message %s on %s failed, left to the check-back: %s",
                transaction_id, state.name, half.msg_id, broker, exc,
            )  # fmt: skip
            return None

    # check-backs -------------------------------------------------------------------------------

    def check_transaction_state(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        """A broker at ``broker_addr`` asks about the half ``message``: answer it from a task."""
        if self._state is not RUNNING:
            return
        self._spawn(self._answer_check(broker_addr, request, message), self._answering)

    async def _answer_check(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        transaction_id = message.transaction_id
        state = await self._state_of(transaction_id, message, request.offset_msg_id)
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
                if self._trace is not None:
                    self._trace.transaction_ended(
                        self.group,
                        message,
                        message.msg_id,  # its UNIQ_KEY, as the Pub record names it
                        broker_addr,
                        header.transaction_id or transaction_id,
                        _LOCAL_TRANSACTION_STATE[state],
                        True,
                    )
                return
            failure = f"answered {response.code}: {response.remark}"
        log.warning(
            "answering the check of transaction %s (%s) to %s failed: %s",
            transaction_id, state.name, broker_addr, failure,
        )  # fmt: skip

    async def _state_of(
        self, transaction_id: str, message: ReceivedMessage, offset_msg_id: str | None = None
    ) -> TransactionState:
        """The answer to a check of the half ``offset_msg_id`` of ``transaction_id``: UNKNOWN while it
        is open here, the remembered decision (ROLLBACK for an orphan of a retried send), or the
        checker's answer (one call at a time per id)."""
        if transaction_id in self._open:
            return TransactionState.UNKNOWN
        known = self._decisions.get(transaction_id)
        if known is not None:
            if (
                known.answered is not None
                and offset_msg_id is not None
                and offset_msg_id not in known.answered
            ):
                log.debug(
                    "half %s of transaction %s was stored by a send attempt whose answer was lost: ROLLBACK",
                    offset_msg_id, transaction_id,
                )  # fmt: skip
                return TransactionState.ROLLBACK
            return known.state
        asking = self._checks.get(transaction_id)
        if asking is None:
            asking = asyncio.get_running_loop().create_task(self._ask_checker(transaction_id, message))
            self._checks[transaction_id] = asking
            asking.add_done_callback(lambda _: self._checks.pop(transaction_id, None))
        return await asyncio.shield(asking)

    async def _ask_checker(self, transaction_id: str, message: ReceivedMessage) -> TransactionState:
        try:
            state = _checked_state(await self._in_worker(self.check, message), "the checker")
        except Exception:
            log.exception(
                "the checker of group %s failed on transaction %s: UNKNOWN", self.group, transaction_id
            )
            return TransactionState.UNKNOWN
        if state is not TransactionState.UNKNOWN:
            self._decisions.remember(transaction_id, state)
        return state


def _checked_state(answer: object, who: str) -> TransactionState:
    """``answer`` if it is a TransactionState; anything else (None included) is UNKNOWN, logged."""
    if isinstance(answer, TransactionState):
        return answer
    log.warning("%s answered %r, not a TransactionState: UNKNOWN", who, answer)
    return TransactionState.UNKNOWN


class Transaction:
    """Several messages, across topics and brokers, committed or rolled back together
    (:meth:`TransactionProducer.transaction`).

    Each :meth:`send` stores a half message carrying :attr:`transaction_id`; :meth:`commit` or
    :meth:`rollback` sends END_TRANSACTION for all of them at once, and returns once every END was
    answered or failed. What is guaranteed when it returns: an END that got no answer does not raise;
    it is logged and listed in :attr:`pending`, and its half is settled by the check-back, where this
    producer answers with the state chosen here while it runs (for ``REMEMBER_DECISION_S``), and any
    other producer of the group with its checker's answer for the id. An END the broker refused (the
    half was settled otherwise: discarded because the transaction stayed open longer than the broker's
    transactionTimeOut + transactionCheckMax * transactionCheckInterval, 6 s + 15 * 30 s by default, or
    ended the other way) raises :class:`~cometmq.errors.TransactionError` naming each refused half,
    after all the ENDs were sent. So after ``commit()`` returns, every message of the transaction is
    delivered, at once or after a check; after ``rollback()``, none is.

    ``async with`` commits when the block ends normally and rolls back when it raises or is cancelled
    (the exception propagates; the ENDs go on if the task is cancelled again meanwhile). A transaction
    is ended once; :meth:`send`, :meth:`commit` and :meth:`rollback` raise ClientStateError once the
    producer is closed. A transaction dropped without an end is left to the check-back (the checker
    decides it), with a warning. A :meth:`send` that fails raises; a half it stored all the same (an
    answer lost) carries the id too and is rolled back by this producer's check-back answers.
    """

    def __init__(self, producer: TransactionProducer, transaction_id: str) -> None:
        self._producer = producer
        self.transaction_id = transaction_id
        """32 hex digits from the producer's id generator: every half's ``__transactionId__``."""
        self._halves: list[tuple[str, SendResult]] = []
        self._traced: dict[str, Message] = {}  # with tracing on: each half's message, by msg id
        self._sends_failed = False  # a send failed or was retried: a half may be stored unanswered
        self._state: TransactionState | None = None
        self._pending: tuple[SendResult, ...] | None = None  # set once every END answered or failed

    @property
    def state(self) -> TransactionState | None:
        """How the transaction is ended (from the moment its ENDs start going out); None while open."""
        return self._state

    @property
    def pending(self) -> tuple[SendResult, ...]:
        """The halves not known settled: all of them until their ENDs were answered, then those whose
        END got no answer (left to the check-back)."""
        if self._pending is None:
            return tuple(result for _, result in self._halves)
        return self._pending

    async def send(self, message: Message) -> SendResult:
        """Send ``message`` as a half message of this transaction; consumers see it once the
        transaction commits. Retried as :meth:`Producer.send` retries."""
        producer = self._producer
        producer._check_running()
        if self._state is not None:
            if self._pending is None:
                doing = "committing" if self._state is TransactionState.COMMIT else "ending"
                raise ClientStateError(f"transaction {self.transaction_id} is {doing}; send before commit")
            raise ClientStateError(f"transaction {self.transaction_id} is ended ({self._state.name})")
        request = producer._half_request(message, self.transaction_id)
        started = now_ms()
        attempts = producer._send_attempts
        attempts[request.uniq] = 0
        try:
            result = await producer._deliver(request, None, None)
        except BaseException:
            self._sends_failed = True
            raise
        finally:
            if attempts.pop(request.uniq, 0) > 1:
                self._sends_failed = True
        self._halves.append((message.topic, result))
        if producer._trace is not None:
            self._traced[result.msg_id] = message
            producer._traced((message,), result, started, MessageType.Trans_Msg_Half)
        return result

    async def commit(self) -> None:
        """Make every message sent in this transaction visible to consumers (the class says exactly
        what is guaranteed when it returns or raises)."""
        await self._end(TransactionState.COMMIT)

    async def rollback(self) -> None:
        """Drop every message sent in this transaction (as :meth:`commit`, the other way)."""
        await self._end(TransactionState.ROLLBACK)

    async def _end(self, state: TransactionState) -> None:
        producer = self._producer
        producer._check_running()
        if self._state is not None:
            raise ClientStateError(f"transaction {self.transaction_id} is ended already ({self._state.name})")
        self._state = state
        await producer._end_all(self, state)

    def __del__(self) -> None:
        if self._state is None and (self._halves or self._sends_failed):
            log.warning(
                "transaction %s was never committed or rolled back; the check-back will ask the checker",
                self.transaction_id,
            )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state is not None:
            return
        await self._end(TransactionState.COMMIT if exc_type is None else TransactionState.ROLLBACK)
