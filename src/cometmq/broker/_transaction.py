"""Transactional messages: half messages, END_TRANSACTION (37) and the check-back (RocketMQ's
TransactionalMessageService, EndTransactionProcessor and TransactionalMessageCheckService).

A send with ``TRAN_MSG=true`` is stored once, as a *half message* in ``RMQ_SYS_TRANS_HALF_TOPIC``
queue 0 with its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` (``to_half``); consumers of
the real topic never see it. END_TRANSACTION names it by its commit-log offset and half-queue offset.
A commit stores a copy in the real queue (transaction type COMMIT, preparedTransactionOffset = the
half's commit-log offset) together with an *op record* (``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag
``d``, body the half's queue offset as decimal text, ``SETTLED_AS`` COMMIT), in one ``put_together``;
a rollback writes the op record alone (``SETTLED_AS`` ROLLBACK). A half message with an op record is
*settled*.

END_TRANSACTION (Java's client sends it oneway) names the half by ``commitLogOffset`` (decoded from the
send answer's offset message id) and ``tranStateTableOffset`` (the answer's queue offset); the half
queue's unit at that queue offset must point at that commit-log offset (so a record planted inside
some message's body is never taken for a half message), the record there must have ``PGROUP`` equal
to ``producerGroup``, and a ``topic``, when given, must be its real topic.
``commitOrRollback`` is 8 (commit), 12 (rollback) or 0 (not known yet: nothing happens, the check-back
asks later). A half message already settled changes nothing: an END agreeing with how it was settled
answers SUCCESS (a second END, or a check's answer racing the producer's own), one contradicting it
answers TRANSACTION_FAILED (a commit of a rolled-back or discarded half, a rollback of a committed one),
so that a producer whose half was discarded never takes its commit for done. A commit under failover
passes the mastership checks a send passes, and a SYNC_FLUSH / SYNC_MASTER broker answers it once the
copy is flushed / replicated.

Unlike RocketMQ, a half message is never re-appended when it is checked: each has exactly one record,
so settling it twice is noticed and a second END_TRANSACTION changes nothing. A message's age is taken
from its store time (the broker's clock), not its born time.

Progress is kept as the consumer offsets of group ``CID_RMQ_SYS_TRANS`` (consumerOffset.json, which a
slave copies from its master): on (half topic, 0), H, the first half offset not known settled; on
(op topic, 0), O, the first op record that may still name a half offset at or past H. In memory, the
settled half offsets at or past H are a bitmap (one bit per half message, from a multiple of 8 at or
below H), rebuilt from the op records from O on when the broker starts as (or becomes) master, and set
by every op record this broker writes (op records are not read back after that); two more bitmaps
beside it hold which of those were committed and which rolled back (an op record without
``SETTLED_AS``, RocketMQ's, settles with the kind unknown). Progress past the
ends of the half and op queues this broker holds (a promoted slave whose log lags what it copied) is
capped at them, and an op record naming a half offset the half queue does not hold is ignored. H and
O are committed only once the op records they rely on are flushed and, with slaves connected,
replicated, so that a slave never holds progress without the op records behind it. Check counts are
in ``config/transactionChecks.json``, written after each round that changed them: a crash costs at
most one more check of a message. The same file keeps the newest discarded half offsets with their
check counts, past H, so that a late commit of one is refused after H moved on or the broker restarted.

Every ``transactionCheckInterval`` ms the master walks the half queue from H, decoding only the
unsettled records: one older than ``transactionTimeOut`` ms (or than its
``CHECK_IMMUNITY_TIME_IN_SECONDS``, parsed as RocketMQ parses it) is checked with
CHECK_TRANSACTION_STATE (39, oneway) sent to one live producer channel of its PGROUP (round robin);
after ``transactionCheckMax`` checks it is discarded: copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` together
with its op record, and a warning logged. A check counts even when no producer of the group is connected
(RocketMQ's rule: a group gone for good ends in the discard). The check's body is the half record
re-encoded with its real topic and queue and ``TRANSACTION_CHECK_TIMES``; its header's ``transactionId``
is the ``__transactionId__`` property, or the UNIQ_KEY; a half message whose properties leave no room
for that property is refused when it is sent. The producer answers with END_TRANSACTION,
``fromTransactionCheck`` true. A message whose step in a round fails (a record that cannot be read as
expected) is logged and counted as a check, so it is discarded in the end, and the round goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cometmq.broker._json_config import MetadataFile, load_json_table
from cometmq.broker._schedule import copy_of_record, delay_level_of, real_queue
from cometmq.errors import RecordError, RequestRefused
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from cometmq.protocol.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import (
    MAX_PROPERTIES_SIZE,
    DecodedRecord,
    decode_record_at,
    encode_record_into,
    record_size,
    with_record_crc_property,
)
from cometmq.protocol.taghash import java_string_hash
from cometmq.protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    OP_RECORD_TAG,
    PRODUCER_GROUP,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    SETTLED_AS,
    TRANSACTION_CHECK_GROUP,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    Settlement,
    TransactionType,
    with_transaction_type,
)
from cometmq.remoting import Connection
from cometmq.store import MessageToStore, PutResult, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

__all__ = ["EndTransactionProcessor", "TransactionService", "to_half"]

log = logging.getLogger("cometmq.broker")

# Unsettled half records decoded before the event loop gets a turn.
_DECODES_PER_TURN: Final = 128
_OP_TAGS_CODE: Final = java_string_hash(OP_RECORD_TAG)
_OP_PROPERTIES: Final = {
    kind: encode_properties({"TAGS": OP_RECORD_TAG, SETTLED_AS: kind.value}) for kind in Settlement
}
# Discarded half offsets remembered past H (transactionChecks.json), the newest first kept.
_MAX_DISCARDED: Final = 100_000
_SETTLEMENTS: Final = {kind.value: kind for kind in Settlement}
# A byte of the bitmap with an unsettled half offset in it.
_NOT_ALL_SETTLED: Final = re.compile(rb"[^\xff]")
# Properties of the half record the committed copy does not carry.
_HALF_ONLY: Final = (TRANSACTION_PREPARED, REAL_TOPIC, REAL_QUEUE_ID)
# What a check's body adds to the half's stored properties: TRANSACTION_CHECK_TIMES with a count of
# up to 5 digits (transactionCheckMax is at most 10 000), and the record CRC property a store may
# append. A half message is refused at its send unless it leaves this much room below the int16 limit.
_CHECK_BODY_ROOM: Final = (
    len(f"\x02{TRANSACTION_CHECK_TIMES}\x0199999") + len(with_record_crc_property(b"p")) - 1
)
_MAX_HALF_PROPERTIES: Final = MAX_PROPERTIES_SIZE - _CHECK_BODY_ROOM
# CHECK_IMMUNITY_TIME_IN_SECONDS past this (or negative) is taken as unparsable.
_MAX_IMMUNITY_S: Final = 7 * 24 * 3600
# Failover mode: the settlement was stored while this master could not be sure it still is one.
_LEASE_LAPSED: Final = (
    "this broker's mastership lease lapsed; the transaction was ended but that is not acknowledged"
)


def to_half(msg: MessageToStore, producer_group: str) -> MessageToStore:
    """*msg* (as a send of it would be stored) as its half message: the real topic and queue in
    ``REAL_TOPIC`` / ``REAL_QID``, ``PGROUP`` (the request's producer group if the message names
    none), transaction type NOT_TYPE so that it gets a unit of the half queue, in
    RMQ_SYS_TRANS_HALF_TOPIC queue 0. RequestRefused (MESSAGE_ILLEGAL) when its properties leave no
    room for the check-back's TRANSACTION_CHECK_TIMES."""
    properties = decode_properties(msg.properties)
    properties[REAL_TOPIC] = msg.topic
    properties[REAL_QUEUE_ID] = str(msg.queue_id)
    properties.setdefault(PRODUCER_GROUP, producer_group)
    encoded = encode_properties(properties)
    size = len(encoded.encode(errors="surrogatepass"))
    if size > _MAX_HALF_PROPERTIES:  # its check-back's body could not carry TRANSACTION_CHECK_TIMES
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the half message's properties (REAL_TOPIC and REAL_QID included) take {size} bytes; a half "
            f"message may have at most {_MAX_HALF_PROPERTIES}, to leave room for the check-back's "
            f"{TRANSACTION_CHECK_TIMES}",
        )
    return replace(
        msg,
        topic=TRANS_HALF_TOPIC,
        queue_id=0,
        sys_flag=with_transaction_type(msg.sys_flag, TransactionType.NOT_TYPE),
        properties=encoded,
    )


def op_offsets(body: bytes) -> Iterator[int]:
    """The half offsets an op record names: one decimal number, or (RocketMQ 5) several joined by
    commas. Anything else is skipped."""
    for part in body.split(b","):
        part = part.strip()
        if part.isdigit():
            yield int(part)


def check_immunity_ms(properties: dict[str, str], transaction_time_out: int) -> int | None:
    """How old (ms) a half message carrying ``CHECK_IMMUNITY_TIME_IN_SECONDS`` must be before it is
    checked; None when it carries none. A value that is no whole number of seconds in 0..7 days counts
    as *transaction_time_out* (RocketMQ's getImmunityTime falls back to transactionTimeOut for one it
    cannot parse)."""
    text = properties.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
    if text is None:
        return None
    try:
        seconds = int(text)
    except ValueError:
        return transaction_time_out
    return seconds * 1000 if 0 <= seconds <= _MAX_IMMUNITY_S else transaction_time_out


class SettledHalves:
    """Which half offsets are settled: all below ``first_unsettled`` (H), and those at or past it
    whose bit is set. One bit per offset from ``_base`` (H rounded down to a multiple of 8), so a
    message that stays unsettled costs a bit, not an int, per message settled after it.

    Two more bitmaps with the same base, trimmed with it, say how the ones at or past H were settled:
    committed, or rolled back. A settled offset in neither was settled some other way, or its kind is
    not known (an op record without ``SETTLED_AS``, a half record gone, the offsets below H at start).
    Below H no kind is known."""

    def __init__(self, first_unsettled: int = 0) -> None:
        self._base = first_unsettled - first_unsettled % 8
        self._bits = bytearray()
        self._committed = bytearray()
        self._rolled_back = bytearray()
        for offset in range(self._base, first_unsettled):
            self.add(offset)

    @property
    def first_unsettled(self) -> int:
        """H: every offset below it is settled."""
        first_byte = self._bits[0] if self._bits else 0
        return self._base + ((~first_byte & (first_byte + 1)).bit_length() - 1)

    @classmethod
    def restored(cls, base: int, bits: bytes) -> SettledHalves:
        """The settled offsets ``snapshot`` gave (no kinds). ValueError for a base not a multiple of 8."""
        if base < 0 or base % 8:
            raise ValueError(f"bitmap base {base} is not a multiple of 8")
        settled = cls(base)
        settled._bits = bytearray(bits)
        return settled

    def snapshot(self) -> tuple[int, bytes]:
        """(base, bitmap from it): every offset below the base is settled, and those whose bit is set."""
        return self._base, bytes(self._bits)

    def settle_below(self, offset: int) -> None:
        """Settle every offset below *offset* (retention took them)."""
        if offset >= self._base + len(self._bits) * 8:  # no bit left to keep
            self._base = offset - offset % 8
            self._bits, self._committed, self._rolled_back = bytearray(), bytearray(), bytearray()
        for earlier in range(self._base, offset):
            self.add(earlier)

    def __contains__(self, offset: int) -> bool:
        index = offset - self._base
        return index < 0 or _bit(self._bits, index)

    def add(self, offset: int, kind: Settlement | None = None) -> None:
        """Settle *offset*, committed or rolled back as *kind* says (any other: no kind kept)."""
        index = offset - self._base
        if index < 0:
            return
        _set_bit(self._bits, index)
        if kind is Settlement.COMMIT:
            _set_bit(self._committed, index)
        elif kind is Settlement.ROLLBACK:
            _set_bit(self._rolled_back, index)

    def kind(self, offset: int) -> Settlement | None:
        """How *offset* was settled, if it is at or past the base and was committed or rolled back;
        None otherwise (not settled, settled another way, or its kind is gone)."""
        index = offset - self._base
        if index < 0:
            return None
        if _bit(self._committed, index):
            return Settlement.COMMIT
        if _bit(self._rolled_back, index):
            return Settlement.ROLLBACK
        return None

    def advance(self) -> int:
        """Drop the whole bytes of settled offsets at the start; H. Costs the bytes dropped, not the
        bitmap: a bytearray drops its head in place."""
        partial = _NOT_ALL_SETTLED.search(self._bits)
        full = len(self._bits) if partial is None else partial.start()
        if full:
            del self._bits[:full]
            del self._committed[:full]
            del self._rolled_back[:full]
            self._base += full * 8
        return self.first_unsettled

    def count_unsettled(self, start: int, end: int) -> int:
        """How many offsets in [*start*, *end*) are not settled, without a step per offset: the bits
        set in the bitmap's part of the range, and every offset past the bitmap."""
        if end <= start:
            return 0
        base, bits = self._base, self._bits
        start = max(start, base)
        covered = base + len(bits) * 8
        unsettled = max(0, end - max(start, covered))
        first, last = start - base, min(end, covered) - base
        if last > first:
            window = int.from_bytes(bits[first >> 3 : (last + 7) >> 3], "little") >> (first & 7)
            width = last - first
            unsettled += width - (window & ((1 << width) - 1)).bit_count()
        return unsettled

    def unsettled(self, start: int, end: int) -> Iterator[int]:
        """The offsets in [*start*, *end*) not settled when called, in order (whole settled bytes
        skipped in C). It reads a copy of the bitmap's bytes over the range: the bitmap grows and
        shrinks while a round that walks it waits for its turn, which a buffer exported to
        ``finditer`` would forbid."""
        start = max(start, self._base)
        if end <= start:
            return
        first_byte = (start - self._base) >> 3
        bits = self._bits[first_byte : (end - self._base + 7) >> 3]
        base = self._base + first_byte * 8
        covered = base + len(bits) * 8
        for match in _NOT_ALL_SETTLED.finditer(bits):
            first = base + match.start() * 8
            if first >= end:
                return
            byte = bits[match.start()]
            for offset in range(max(first, start), min(first + 8, end)):
                if not byte >> (offset - first) & 1:
                    yield offset
        yield from range(max(start, covered), end)


def _bit(bits: bytearray, index: int) -> bool:
    byte = index >> 3
    return byte < len(bits) and bool(bits[byte] >> (index & 7) & 1)


def _set_bit(bits: bytearray, index: int) -> None:
    byte = index >> 3
    if byte >= len(bits):
        bits.extend(bytes(byte + 1 - len(bits)))
    bits[byte] |= 1 << (index & 7)


class DiscardedHalves:
    """The half messages discarded after transactionCheckMax unanswered check-backs: the newest
    ``_MAX_DISCARDED``, each as its half offset, its commit-log offset and that count, kept past H (in
    transactionChecks.json) so that a late END_TRANSACTION committing one is refused whatever H did
    meanwhile. The commit-log offset tells the discarded half from a later one at the same half offset,
    should the log be cut back (a master rejoining as a slave) past the discard's op record."""

    def __init__(self) -> None:
        self._halves: OrderedDict[int, tuple[int, int]] = OrderedDict()

    def __contains__(self, offset: int) -> bool:
        return offset in self._halves

    def checks(self, offset: int, commitlog_offset: int) -> int | None:
        """How many check-backs went unanswered before the half at *offset* and *commitlog_offset* was
        discarded; None if it was not."""
        known = self._halves.get(offset)
        return known[1] if known is not None and known[0] == commitlog_offset else None

    def add(self, offset: int, commitlog_offset: int, checks: int) -> None:
        known = self._halves.get(offset)
        if known is not None and known[0] == commitlog_offset:
            return
        self._halves.pop(offset, None)  # another half had that offset before the log was cut back
        self._halves[offset] = (commitlog_offset, checks)
        if len(self._halves) > _MAX_DISCARDED:
            self._halves.popitem(last=False)

    def snapshot(self) -> dict[str, list[int]]:
        """The halves as transactionChecks.json keeps them: half offset → [commit-log offset, checks]."""
        return {
            str(offset): [commitlog_offset, checks]
            for offset, (commitlog_offset, checks) in self._halves.items()
        }


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionService:
    """The master's settled state of half messages and its check-back, one task on the broker's loop.
    A slave runs nothing: its progress is the consumer offsets it copies from its master."""

    def __init__(self, broker: Broker, config_dir: Path) -> None:
        self._broker = broker
        self._checks_file = MetadataFile(config_dir / "transactionChecks.json")
        self.settled = SettledHalves()
        self.discarded = DiscardedHalves()
        self.check_counts: dict[int, int] = {}  # half offset → checks sent
        self._op_start = 0  # O
        self._op_read = 0  # the next op record to read
        self._op_end = 0  # commit-log end of the last record this broker wrote for a settlement
        self._counts_changed = False
        self._round_robin: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[Any] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Rebuild the settled state from the committed progress and the op records, and start
        checking (the store must be started). A slave does not."""
        broker = self._broker
        if broker.is_slave or self._task is not None:
            return
        offsets, store = broker.offsets, broker.store
        committed_half = offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0)
        committed_op = offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0)
        half_end = store.max_offset(TRANS_HALF_TOPIC, 0)
        op_end = store.max_offset(TRANS_OP_HALF_TOPIC, 0)
        if committed_half > half_end or committed_op > op_end:
            # A promoted slave whose log lags the progress it copied: past its queues' ends the
            # progress names records it does not hold, and a half message stored there later would
            # count as settled at birth.
            log.warning(
                "transactions: the committed progress (half %d, op %d) is past the half and op queues' "
                "ends (%d, %d); capped at them",
                committed_half,
                committed_op,
                half_end,
                op_end,
            )
        first_unsettled = max(0, min(committed_half, half_end), store.min_offset(TRANS_HALF_TOPIC, 0))
        self.settled = SettledHalves(first_unsettled)
        self._op_start = max(0, min(committed_op, op_end), store.min_offset(TRANS_OP_HALF_TOPIC, 0))
        self._op_read = self._op_start
        started = time.monotonic()
        self.discarded = DiscardedHalves()
        discards = load_json_table(
            self._checks_file.path,
            "discarded",
            "discarded half message",
            lambda k, v: (int(k), int(v[0]), int(v[1])),
        )
        for offset, commitlog_offset, checks in sorted(discards[1].values() if discards is not None else ()):
            self.discarded.add(offset, commitlog_offset, checks)
        read = self._read_ops()
        self.check_counts = {}
        loaded = load_json_table(
            self._checks_file.path, "checkTimes", "transaction check count", lambda k, v: (int(k), int(v))
        )
        if loaded is not None:
            self.check_counts = {
                offset: count
                for offset, count in loaded[1].values()
                if offset not in self.settled and count > 0
            }
        if read or first_unsettled:
            log.info(
                "transactions: half messages below %d settled, %d op records read in %.3f s, %d pending "
                "with checks",
                first_unsettled,
                read,
                time.monotonic() - started,
                len(self.check_counts),
            )
        self._task = asyncio.ensure_future(self._check_loop())

    async def stop(self) -> None:
        """Stop checking, and keep the progress (the store must still be running)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if self._writing is not None:  # the round was cancelled while its write's thread still runs
            with contextlib.suppress(Exception):
                if not await self._writing:
                    self._counts_changed = True
            self._writing = None
        await self._commit_progress()
        if self._counts_changed:
            self._checks_file.save(self._counts_snapshot())

    # -- settlement ----------------------------------------------------------------------------

    def op_record(self, half_offset: int, kind: Settlement) -> MessageToStore:
        broker = self._broker
        return MessageToStore(
            TRANS_OP_HALF_TOPIC,
            0,
            0,
            str(half_offset).encode(),
            _OP_PROPERTIES[kind],
            0,
            _now_ms(),
            broker.store_host,
            broker.store_host,
            tags_code=_OP_TAGS_CODE,
        )

    def settle(self, half_offset: int, kind: Settlement, copy: MessageToStore | None) -> list[PutResult]:
        """Store *copy* (if any) and the op record settling *half_offset* as *kind* in one write; on
        success the half offset is settled at once."""
        op = self.op_record(half_offset, kind)
        if copy is None:
            results = [self._broker.store.put(op)]
        else:
            results = self._broker.store.put_together([copy, op])
        if all(result.status is PutStatus.PUT_OK for result in results):
            self.settled.add(half_offset, kind)
            # The discarded halves are kept in the check counts' file.
            if self.check_counts.pop(half_offset, None) is not None or kind is Settlement.DISCARD:
                self._counts_changed = True
            op_result = results[-1]
            self._op_end = max(self._op_end, op_result.commitlog_end_offset)
            # Every op record after the start is one of these: known without reading it back.
            self._op_read = max(self._op_read, op_result.queue_offset + 1)
            if copy is not None:
                self._broker.stats.count_put(copy.topic, 1, results[0].wrote_bytes)
        return results

    def _read_ops(self) -> int:
        """Mark the half offsets named by the op records from O on (at start or promotion); how many
        were read. An op record naming a half offset the half queue does not hold (a forged or
        damaged one) is ignored, with one warning."""
        store = self._broker.store
        end = store.max_offset(TRANS_OP_HALF_TOPIC, 0)
        half_end = store.max_offset(TRANS_HALF_TOPIC, 0)
        start = self._op_read
        check_max = self._broker.config.transaction_check_max
        ignored = 0
        for offset in range(start, end):
            kind, named = self._named_by_op(offset)
            for half_offset in named:
                if half_offset < half_end:
                    self.settled.add(half_offset, kind)
                    if kind is Settlement.DISCARD:  # in the file already, unless it was not written since
                        unit = store.queue_unit(TRANS_HALF_TOPIC, 0, half_offset)
                        if unit is not None:
                            self.discarded.add(half_offset, unit[0], check_max)
            ignored += any(half_offset >= half_end for half_offset in named)
        if ignored:
            log.warning(
                "transactions: %d op records from %d on name half offsets at or past the half queue's "
                "end %d; ignored",
                ignored,
                start,
                half_end,
            )
        self._op_read = max(self._op_read, end)
        return end - start

    def _named_by_op(self, op_offset: int) -> tuple[Settlement | None, list[int]]:
        """How the op record at *op_offset* settles, and the half offsets it names; the kind is None
        for one without a known ``SETTLED_AS`` (RocketMQ's)."""
        store = self._broker.store
        unit = store.queue_unit(TRANS_OP_HALF_TOPIC, 0, op_offset)
        if unit is None:
            return None, []
        view = store.message_at(unit[0])
        if view is None:
            return None, []
        try:
            rec = decode_record_at(view, 0, len(view))
        except RecordError as exc:
            log.error("transactions: op record %d cannot be read (%s); skipped", op_offset, exc)
            return None, []
        finally:
            del view
        properties = decode_properties(rec.properties)
        if properties.get("TAGS") != OP_RECORD_TAG:
            return None, []
        kind = _SETTLEMENTS.get(properties.get(SETTLED_AS, ""))
        return kind, list(op_offsets(rec.body))

    def _advance_op_start(self, first_unsettled: int, half_end: int) -> int:
        """Move O past the op records that name only half offsets below H (or none the half queue
        holds). Each is read once as O passes it; the one O stops at, once a round."""
        while self._op_start < self._op_read:
            named = [offset for offset in self._named_by_op(self._op_start)[1] if offset < half_end]
            if named and max(named) >= first_unsettled:
                break
            self._op_start += 1
        return self._op_start

    async def _commit_progress(self) -> None:
        """Commit H and O as consumer offsets (which slaves copy), once the op records they rely on
        are flushed and, when slaves are connected, replicated."""
        op_end = self._op_end
        first_unsettled = self.settled.advance()
        op_start = self._advance_op_start(first_unsettled, self._broker.store.max_offset(TRANS_HALF_TOPIC, 0))
        self.check_counts = {k: v for k, v in self.check_counts.items() if k >= first_unsettled}
        offsets = self._broker.offsets
        half_changed = offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) != first_unsettled
        op_changed = offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) != op_start
        if not (half_changed or op_changed):
            return
        if not await self._broker.store.wait_flushed(op_end):
            log.error("transactions: op records are not flushed; progress not committed")
            return
        if not await self._replicated(op_end):
            log.warning("transactions: op records are not replicated yet; progress committed later")
            return
        if half_changed:
            offsets.commit(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0, first_unsettled)
        if op_changed:
            offsets.commit(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, op_start)

    async def _replicated(self, end: int) -> bool:
        """Whether the slaves hold the commit log up to *end*, as a SYNC_MASTER send waits for it
        (in failover mode, the in-sync members: the confirmed offset); True without a slave to wait
        for. Progress a slave copies must never name op records it lacks."""
        ha_server = self._broker.ha_server
        if ha_server is None or end <= 0:
            return True
        status = await ha_server.when_replicated(end)
        if status is PutStatus.PUT_OK:
            return True
        info = ha_server.runtime_info()
        return status is PutStatus.SLAVE_NOT_AVAILABLE and not info.failover and not info.ha_connection_info

    # -- the check-back ------------------------------------------------------------------------

    async def _check_loop(self) -> None:
        config = self._broker.config
        while True:
            await asyncio.sleep(config.transaction_check_interval / 1000)
            try:
                await self.check_round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the check-back for good
                log.exception("transactions: a check round failed")

    async def check_round(self) -> None:
        """One round: check (or discard) the due half messages, commit the progress and write the
        check counts if they changed. Each message's step fails alone: logged, counted as a check."""
        store = self._broker.store
        now = _now_ms()
        silent_groups: set[str] = set()
        decoded = 0
        start = self.settled.first_unsettled
        for offset in self.settled.unsettled(start, store.max_offset(TRANS_HALF_TOPIC, 0)):
            if decoded and decoded % _DECODES_PER_TURN == 0:
                await asyncio.sleep(0)
            if offset in self.settled:  # settled while the loop had its turn
                continue
            decoded += 1
            checks = self.check_counts.get(offset, 0)
            try:
                if not self._check_one(offset, now, silent_groups):
                    break  # the queue is in store-time order: the rest is younger still
            except Exception as exc:
                log.error("transactions: half message %d could not be checked: %r", offset, exc)
                # Counted as a check all the same: a record that fails every round reaches
                # transactionCheckMax and is discarded, instead of holding H back for ever.
                if self.check_counts.get(offset, 0) == checks:
                    self.check_counts[offset] = checks + 1
                    self._counts_changed = True
        await self._commit_progress()
        if self._counts_changed:
            self._counts_changed = False
            loop = asyncio.get_running_loop()
            # Cleared only once the write is done (no finally): a round cancelled during the write
            # leaves it for stop() to wait for.
            self._writing = loop.run_in_executor(None, self._checks_file.save, self._counts_snapshot())
            try:
                written = await asyncio.shield(self._writing)
            except Exception:  # a bug, not the disk: written next round
                log.exception("transactions: writing %s failed", self._checks_file.path.name)
                written = False
            self._writing = None
            if not written:  # logged once by MetadataFile; written next round
                self._counts_changed = True

    def _check_one(self, offset: int, now: int, silent_groups: set[str]) -> bool:
        """Check the unsettled half message at *offset* if it is due, or discard it after
        transactionCheckMax checks; False if it is younger than transactionTimeOut (and so is every
        later one)."""
        config = self._broker.config
        rec = self._half_record(offset)
        if rec is None:
            return True
        properties = decode_properties(rec.properties)
        age = now - rec.store_timestamp
        immunity = check_immunity_ms(properties, config.transaction_time_out)
        if immunity is None:
            if age < config.transaction_time_out:
                return False
        elif age < immunity:
            return True
        checks = self.check_counts.get(offset, 0)
        if checks >= config.transaction_check_max:
            self._discard(rec, properties, checks)
            return True
        self.check_counts[offset] = checks + 1
        self._counts_changed = True
        self._send_check(rec, properties, checks + 1, silent_groups)
        return True

    def contradiction(self, half_offset: int, commitlog_offset: int, kind: int) -> str | None:
        """Why ending the half at *half_offset* and *commitlog_offset* as *kind* (COMMIT or ROLLBACK)
        contradicts how it was settled, or None when it does not (or it is not settled). Past H the
        kind of every settlement this broker wrote or read is known. Below H a commit or rollback is no
        longer known, and an END for it answers SUCCESS: that is safe enough, because such an END
        repeats or races one that settled it long ago, while discards, where a producer may still
        believe its transaction open, are remembered past H (the newest ``_MAX_DISCARDED``)."""
        checks = self.discarded.checks(half_offset, commitlog_offset)
        if checks is not None:
            if kind != TransactionType.COMMIT:
                return None
            return (
                f"was discarded after {checks} check-backs without an answer (transactionCheckMax); "
                "it cannot be committed"
            )
        settled_as = self.settled.kind(half_offset)
        if kind == TransactionType.COMMIT and settled_as is Settlement.ROLLBACK:
            return "was rolled back; it cannot be committed"
        if kind == TransactionType.ROLLBACK and settled_as is Settlement.COMMIT:
            return "was committed; it cannot be rolled back"
        return None

    def _counts_snapshot(self) -> dict[str, object]:
        return {
            "checkTimes": {str(offset): count for offset, count in sorted(self.check_counts.items())},
            "discarded": self.discarded.snapshot(),
        }

    def _half_record(self, offset: int) -> DecodedRecord | None:
        store = self._broker.store
        unit = store.queue_unit(TRANS_HALF_TOPIC, 0, offset)
        view = store.message_at(unit[0]) if unit is not None else None
        if view is None:  # its files are gone (retention): nothing to check or settle
            log.warning("transactions: half message %d is gone; considered settled", offset)
            self.settled.add(offset)
            return None
        try:
            return decode_record_at(view, 0, len(view))
        except RecordError as exc:
            log.error("transactions: half message %d cannot be read (%s); considered settled", offset, exc)
            self.settled.add(offset)
            return None
        finally:
            del view

    def _send_check(
        self, rec: DecodedRecord, properties: dict[str, str], checks: int, silent_groups: set[str]
    ) -> None:
        broker = self._broker
        group = properties.get(PRODUCER_GROUP, "")
        channels = [conn for conn in broker.producers.groups.get(group, {}) if conn.is_open]
        if not channels:
            # RocketMQ counts the check all the same: a group gone for good is discarded in the end.
            if group not in silent_groups:
                silent_groups.add(group)
                log.info("transactions: no producer of group %s is connected; its checks wait", group)
            return
        turn = self._round_robin.get(group, 0)
        self._round_robin[group] = turn + 1
        conn = channels[turn % len(channels)]
        uniq_key = properties.get("UNIQ_KEY")
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=rec.queue_offset,
            commit_log_offset=rec.commitlog_offset,
            msg_id=uniq_key,
            transaction_id=properties.get(TRANSACTION_ID) or uniq_key,
            offset_msg_id=rec.offset_msg_id,
            topic=properties.get(REAL_TOPIC),
            broker_name=broker.config.broker_name,
        )
        conn.invoke_oneway(
            RemotingCommand(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                ext_fields=header.encode(),
                body=check_body(rec, properties, checks),
                language="JAVA",
            )
        )

    def _discard(self, rec: DecodedRecord, properties: dict[str, str], checks: int) -> None:
        """RocketMQ's transactionCheckMax: the half message goes to TRANS_CHECK_MAX_TIME_TOPIC after
        *checks* check-backs, and is remembered as discarded."""
        broker = self._broker
        copy = copy_of_record(
            rec, properties, TRANS_CHECK_MAX_TIME_TOPIC, 0, broker.store_host, rec.reconsume_times
        )
        results = self.settle(rec.queue_offset, Settlement.DISCARD, copy)
        if results[0].status is PutStatus.PUT_OK:
            self.discarded.add(rec.queue_offset, rec.commitlog_offset, checks)
            log.warning(
                "transactions: message %s of topic %s (producer group %s) was checked %d times without "
                "an answer; discarded to %s",
                properties.get("UNIQ_KEY", rec.offset_msg_id),
                properties.get(REAL_TOPIC),
                properties.get(PRODUCER_GROUP),
                checks,
                TRANS_CHECK_MAX_TIME_TOPIC,
            )
        else:
            log.warning("transactions: discarding half message %d failed (%s); tried again next round",
                        rec.queue_offset, results[0].status.name)  # fmt: skip


def check_body(rec: DecodedRecord, properties: dict[str, str], checks: int) -> bytes:
    """The body of CHECK_TRANSACTION_STATE: the half record re-encoded in the record layout with its
    real topic and queue and ``TRANSACTION_CHECK_TIMES`` (RocketMQ's sendCheckMessage)."""
    shown = dict(properties)
    shown[TRANSACTION_CHECK_TIMES] = str(checks)
    try:
        topic_name, queue_id = real_queue(properties)
    except ValueError:
        topic_name, queue_id = rec.topic, rec.queue_id
    topic = topic_name.encode()
    text = encode_properties(shown).encode()
    buf = bytearray(record_size(len(rec.body), len(topic), len(text)))
    encode_record_into(
        buf,
        0,
        queue_id,
        rec.flag,
        rec.queue_offset,
        rec.commitlog_offset,
        rec.sys_flag,
        rec.born_timestamp,
        rec.born_host,
        rec.store_timestamp,
        rec.store_host,
        rec.reconsume_times,
        rec.prepared_transaction_offset,
        rec.body,
        topic,
        text,
    )
    return bytes(buf)


def committed_copy(rec: DecodedRecord, properties: dict[str, str], store_host: bytes) -> MessageToStore:
    """The half record *rec* as its committed message in the real topic and queue: transaction type
    COMMIT, preparedTransactionOffset the half's commit-log offset, the half's own properties
    (TRAN_MSG, REAL_TOPIC, REAL_QID) removed. ValueError if it names no real queue."""
    topic, queue_id = real_queue(properties)
    kept = {name: value for name, value in properties.items() if name not in _HALF_ONLY}
    return copy_of_record(
        rec,
        kept,
        topic,
        queue_id,
        store_host,
        rec.reconsume_times,
        sys_flag=with_transaction_type(rec.sys_flag, TransactionType.COMMIT),
        prepared_transaction_offset=rec.commitlog_offset,
    )


class EndTransactionProcessor:
    """END_TRANSACTION: commit or roll back a half message (a slave refuses it: slave_refusals)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def end_transaction(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        broker = self._broker
        end = EndTransactionRequestHeader.decode(request.ext_fields)
        kind = end.commit_or_rollback
        if kind == TransactionType.NOT_TYPE:
            return request.response()  # the producer does not know yet: the check-back asks later
        if kind not in (TransactionType.COMMIT, TransactionType.ROLLBACK):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"commitOrRollback {kind} is none of 8 (commit), 12 (rollback) and 0 (not known yet)",
            )
        service = broker.transactions
        if not service.running:
            raise RequestRefused(ResponseCode.SERVICE_NOT_AVAILABLE, "transactions are not served yet")
        half = self._half_of(end)
        contradiction = service.contradiction(end.tran_state_table_offset, end.commit_log_offset, kind)
        if contradiction is not None:
            properties = half[1] if half is not None else {}
            remark = (
                f"the half message {properties.get('UNIQ_KEY') or end.msg_id} of topic "
                f"{properties.get(REAL_TOPIC) or end.topic} {contradiction}"
            )
            if request.is_oneway:  # no answer goes back: the log is the only trace of the refusal
                log.info("transactions: END_TRANSACTION from %s refused: %s", conn.remote_address, remark)
            raise RequestRefused(ResponseCode.TRANSACTION_FAILED, remark)
        if end.tran_state_table_offset in service.settled:
            return request.response()  # ended already (a second END, or a check's answer racing it)
        if half is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"find prepared transaction message failed: no half message at queue offset "
                f"{end.tran_state_table_offset}",
            )
        rec, properties = half
        copy = None
        if kind == TransactionType.COMMIT:
            if broker.election is not None:
                refusal = broker.mastership_refusal()
                if refusal is not None:
                    raise RequestRefused(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
                refusal = broker.in_sync_refusal()
                if refusal is not None:
                    raise RequestRefused(ResponseCode.SYSTEM_ERROR, refusal)
            try:
                copy = committed_copy(rec, properties, broker.store_host)
            except ValueError as exc:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR, f"the half message cannot be committed: {exc}"
                ) from None
            level = delay_level_of(properties)
            if level > 0:  # delayed as a plain send of it would be
                copy = broker.schedule.to_schedule(copy, level)
            else:  # a delivery time is reckoned from the commit, as RocketMQ's put of the copy does
                deliver_ms = broker.timer.delivery_time(properties, at_commit=True)
                if deliver_ms is not None:
                    copy = broker.timer.to_timer(copy, deliver_ms)
        settlement = Settlement.COMMIT if copy is not None else Settlement.ROLLBACK
        results = service.settle(end.tran_state_table_offset, settlement, copy)
        status = results[0].status
        if status is not PutStatus.PUT_OK:
            return self._failure(request, status)
        if copy is not None and (broker.sync_flush or broker.sync_master):
            return self._when_stored(request, results[-1].commitlog_end_offset)
        return self._answer(request, results[-1].commitlog_end_offset)

    def _half_of(self, end: EndTransactionRequestHeader) -> tuple[DecodedRecord, dict[str, str]] | None:
        """The half record END_TRANSACTION names, checked as RocketMQ checks it; None if the half
        queue has no unit at its queue offset (retention may have taken a settled one). The unit, not
        the header, says where the record is: a commit-log offset inside some message's body could
        otherwise pass off a record planted there as a half message."""
        store = self._broker.store
        unit = store.queue_unit(TRANS_HALF_TOPIC, 0, end.tran_state_table_offset)
        if unit is None:
            return None
        if unit[0] != end.commit_log_offset:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the half message of queue offset {end.tran_state_table_offset} is at commit-log offset "
                f"{unit[0]}, not commitLogOffset {end.commit_log_offset}",
            )
        view = store.message_at(end.commit_log_offset)
        if view is None:
            return None
        try:
            rec = decode_record_at(view, 0, len(view))
        except RecordError as exc:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"the message at commit-log offset {end.commit_log_offset}: {exc}"
            ) from None
        finally:
            del view
        if rec.topic != TRANS_HALF_TOPIC:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the message at commit-log offset {end.commit_log_offset} is not a half message "
                f"(its topic is {rec.topic})",
            )
        if rec.queue_offset != end.tran_state_table_offset:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the half message at commit-log offset {end.commit_log_offset} has queue offset "
                f"{rec.queue_offset}, not tranStateTableOffset {end.tran_state_table_offset}",
            )
        properties = decode_properties(rec.properties)
        group = properties.get(PRODUCER_GROUP)
        if group != end.producer_group:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group {end.producer_group} is not the half message's group {group}",
            )
        real_topic = properties.get(REAL_TOPIC)
        if end.topic is not None and end.topic != real_topic:  # access was checked against end.topic
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the topic {end.topic} is not the half message's topic {real_topic}",
            )
        return rec, properties

    def _failure(self, request: RemotingCommand, status: PutStatus) -> RemotingCommand:
        store = self._broker.store
        if status is PutStatus.SERVICE_NOT_AVAILABLE:
            remark = store.write_refusal or "the store is not available (shutting down)"
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark)
        return request.response(ResponseCode.SYSTEM_ERROR, f"ending the transaction failed: {status.name}")

    async def _when_stored(self, request: RemotingCommand, end_offset: int) -> RemotingCommand:
        """SYNC_FLUSH and SYNC_MASTER: answered as a send of the copy would be, once it is flushed
        and a slave has it."""
        broker = self._broker
        flushed = broker.store.when_flushed(end_offset) if broker.sync_flush else None
        ha_server = broker.ha_server
        replicated = (
            ha_server.when_replicated(end_offset) if broker.sync_master and ha_server is not None else None
        )
        if flushed is not None and not await flushed:
            remark = broker.store.flush_failure or "the committed message is stored; its flush timed out"
            return request.response(ResponseCode.FLUSH_DISK_TIMEOUT, remark)
        if replicated is not None:
            status = await replicated
            if status is not PutStatus.PUT_OK:
                code = (
                    ResponseCode.SLAVE_NOT_AVAILABLE
                    if status is PutStatus.SLAVE_NOT_AVAILABLE
                    else ResponseCode.FLUSH_SLAVE_TIMEOUT
                )
                return request.response(code, f"the committed message is stored, its replica: {status.name}")
        return self._answer(request, end_offset)

    def _answer(self, request: RemotingCommand, end_offset: int) -> RemotingCommand:
        broker = self._broker
        if broker.election is not None and broker.mastership_lapsed(end_offset):
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, _LEASE_LAPSED)
        return request.response()
