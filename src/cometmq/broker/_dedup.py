"""Producing exactly once: a send whose UNIQ_KEY this broker stored in the same topic within the
deduplication window is answered with the first copy instead of being stored again.

A producer that lost a send's answer (a timeout, a connection lost after the request was written)
cannot tell whether the message was stored; it sends it again with the same UNIQ_KEY. With
deduplication on for the topic (``deduplicationEnable``, over which a topic's ``deduplication``
attribute wins), the broker remembers each stored message by (stored topic, UNIQ_KEY) for
``deduplicationWindowSeconds`` and answers a repeat SEND_OK with the first copy's offset message id,
queue id and queue offset, once the first copy is as safe as a fresh send's answer promises
(SYNC_FLUSH, SYNC_MASTER). At most ``deduplicationMaxKeys`` keys are remembered, the oldest forgotten
first; a key forgotten early (past the bound) or late (past the window) lets a repeat be stored again.

The keys are rebuilt from the consume queues when the broker starts as a master and when it becomes
one, before it serves sends: the guarantee survives a restart and a failover within the window, as far
as the records themselves do (a slave holds what was replicated to it).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cometmq.errors import RecordError
from cometmq.protocol.naming import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from cometmq.protocol.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    decode_properties,
    property_finder,
)
from cometmq.protocol.record import INNER_BATCH_FLAG, INNER_NUM_PROPERTY, decode_record_at
from cometmq.protocol.topic_config import DEDUPLICATION_ATTRIBUTE
from cometmq.protocol.transaction import REAL_QUEUE_ID
from cometmq.store import MessageBatch, MessageToStore, PutResult, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

_find_uniq_key = property_finder("UNIQ_KEY")
_SEPARATOR = PROPERTY_SEPARATOR.encode()
_KEYS_PAIR = b"KEYS" + NAME_VALUE_SEPARATOR.encode()


@dataclass(slots=True)
class _Stored:
    """One put's copies: what their repeats are answered with. Message *n* of the put is at queue
    offset ``queue_offset + n`` with offset message id ``msg_ids[n]``."""

    store_ms: int
    queue_id: int  # as the send's answer named it (a half or delayed message's real queue)
    queue_offset: int
    msg_ids: list[str]
    end: int  # the put's commit-log end: what an answer waits to be flushed (or replicated)


# A remembered key's first copy: the number of its put, shifted, plus its position in the put. An int,
# and the keys bytes, per topic: no object per key the garbage collector has to walk (bench/dedup.py).
_POSITION_BITS = 32
_POSITIONS = 1 << _POSITION_BITS
_Copy = tuple[_Stored, int]  # a first copy: its put, and its position in it


class Deduplicator:
    """The broker's remembered keys, and the sends that consult them."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._copies: dict[str, dict[bytes, int]] = {}  # stored topic → UNIQ_KEY → its first copy
        self._puts: dict[int, _Stored] = {}
        self._next_put = 0
        # The puts in the order they were remembered, with their keys, for eviction oldest first (a
        # deque: a dict's first key is found in time growing with the keys deleted before it).
        self._order: deque[tuple[int, str, list[bytes]]] = deque()
        self._evicted_of_oldest = 0  # keys of the oldest put looked at already
        self._count = 0  # keys remembered, over all topics (kept, not summed per put)

    def __len__(self) -> int:
        return self._count

    def enabled_for(self, topic: str) -> bool:
        """Whether sends to *topic* are deduplicated: its ``deduplication`` attribute, else the
        broker's ``deduplicationEnable``."""
        config = self._broker.topics.get(topic)
        value = config.attributes.get(DEDUPLICATION_ATTRIBUTE) if config is not None else None
        if value is None:
            return self._broker.config.deduplication_enable
        return value == "true"

    def clear(self) -> None:
        """Forget every key (a slave serves no sends; a promotion rebuilds them)."""
        self._copies.clear()
        self._count = 0
        self._puts.clear()
        self._order.clear()
        self._evicted_of_oldest = 0

    # Sends ---------------------------------------------------------------------------------------

    def put(self, message: MessageToStore, queue_id: int) -> tuple[PutResult, int]:
        """Store *message* (whose send's answer names *queue_id*) unless its key was stored within the
        window: the store's result, or one describing the first copy (``count`` 0), and the queue id
        the answer names."""
        store = self._broker.store
        if not message.uniq_key:
            return store.put(message), queue_id
        topic = message.topic
        key = message.uniq_key.encode("utf-8", "surrogatepass")
        now_ms = int(time.time() * 1000)
        first = self._first_copy(self._copies.get(topic, {}).get(key), now_ms)
        if first is not None:
            return self._answer([first]), first[0].queue_id
        result = store.put(message)
        if result.status is PutStatus.PUT_OK:
            stored = _Stored(
                now_ms, queue_id, result.queue_offset, [result.msg_id_text], result.commitlog_end_offset
            )
            self._remember(stored, topic, [key], now_ms)
        return result, queue_id

    def put_batch(self, batch: MessageBatch) -> tuple[PutResult, int]:
        """Store the messages of *batch* whose keys were not stored within the window (nor earlier in
        the batch): all repeats → the first copies' answer; none → the batch as it is; some → the
        others stored, the answer's ids in the batch's order (each repeat's the first copy's), its
        queue offset the first message's. bench/dedup.py measures it beside a plain batch."""
        store = self._broker.store
        topic = batch.topic
        now_ms = int(time.time() * 1000)
        keys = _uniq_keys(batch)
        found = list(map(self._copies.get(topic, {}).get, keys))
        if found.count(None) == len(found) and len(set(keys)) == len(keys):
            result = store.put_batch(batch)  # no repeat: the usual case, decided with no loop here
            if result.status is PutStatus.PUT_OK:
                self._remember(self._stored(result, batch.queue_id, now_ms), topic, keys, now_ms)
            return result, batch.queue_id
        # Per repeated message: its first copy, or the position of an earlier message of the batch.
        repeats: dict[int, _Copy | int] = {}
        position_of_key: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if not key:
                continue
            first = self._first_copy(found[i], now_ms)
            if first is not None:
                repeats[i] = first
            elif key in position_of_key:
                repeats[i] = position_of_key[key]
            else:
                position_of_key[key] = i
        fresh = [i for i in range(len(keys)) if i not in repeats]
        answers: dict[int, _Copy] = {}
        if fresh:
            result = store.put_batch(_subset(batch, fresh))
            if result.status is not PutStatus.PUT_OK:
                return result, batch.queue_id
            stored = self._stored(result, batch.queue_id, now_ms)
            self._remember(stored, topic, [keys[i] for i in fresh], now_ms)
            answers = {i: (stored, n) for n, i in enumerate(fresh)}
        for i, repeat_of in sorted(repeats.items()):
            answers[i] = repeat_of if isinstance(repeat_of, tuple) else answers[repeat_of]
        merged = self._answer([answers[i] for i in range(len(keys))])
        merged.count = len(fresh)
        return merged, answers[0][0].queue_id

    @staticmethod
    def _stored(result: PutResult, queue_id: int, now_ms: int) -> _Stored:
        return _Stored(now_ms, queue_id, result.queue_offset, result.msg_ids, result.commitlog_end_offset)

    def _first_copy(self, copy: int | None, now_ms: int) -> _Copy | None:
        """The put and position *copy* names, unless it is past the window."""
        if copy is None:
            return None
        put_number, position = divmod(copy, _POSITIONS)
        stored = self._puts[put_number]
        if now_ms - stored.store_ms > self._broker.config.deduplication_window_seconds * 1000:
            return None
        return stored, position

    def _remember(self, stored: _Stored, topic: str, keys: list[bytes], now_ms: int) -> None:
        """Remember *keys* of *topic*, message by message the copies of *stored* (an empty UNIQ_KEY:
        none)."""
        self._evict(now_ms)  # first: a key stored again after its window is forgotten before
        number = self._next_put
        self._next_put += 1
        self._puts[number] = stored
        copies = self._copies.setdefault(topic, {})
        before = len(copies)
        copies.update(
            zip(keys, range(number << _POSITION_BITS, (number << _POSITION_BITS) + len(keys)), strict=True)
        )
        copies.pop(b"", None)  # messages without a UNIQ_KEY
        self._count += len(copies) - before
        self._order.append((number, topic, keys))
        self._evict(now_ms)

    def _evict(self, now_ms: int) -> None:
        """Forget the oldest keys past the bound, and those past the window."""
        order = self._order
        config = self._broker.config
        oldest_kept = now_ms - config.deduplication_window_seconds * 1000
        excess = len(self) - config.deduplication_max_keys
        while order:
            number, topic, keys = order[0]
            expired = self._puts[number].store_ms < oldest_kept
            if excess <= 0 and not expired:
                return
            copies = self._copies[topic]
            position = self._evicted_of_oldest
            while position < len(keys) and (excess > 0 or expired):
                key = keys[position]
                if copies.get(key) == (number << _POSITION_BITS) + position:  # not stored again since
                    del copies[key]
                    self._count -= 1
                    excess -= 1
                position += 1
            if position < len(keys):
                self._evicted_of_oldest = position
                return
            order.popleft()
            del self._puts[number]
            self._evicted_of_oldest = 0

    def _answer(self, copies: Sequence[_Copy]) -> PutResult:
        """A result that answers a send with *copies*: their ids, the first one's queue offset, and an
        end past all of them (what a SYNC_FLUSH or SYNC_MASTER answer waits for)."""
        first, n = copies[0]
        return PutResult(
            PutStatus.PUT_OK,
            commitlog_offset=max(stored.end for stored, _ in copies),
            queue_offset=first.queue_offset + n,
            count=0,
            store_timestamp=first.store_ms,
            msg_id_text=",".join(stored.msg_ids[n] for stored, n in copies),
            wrote_bytes=0,
        )

    # Rebuilding ----------------------------------------------------------------------------------

    def rebuild(self) -> None:
        """The keys of the window, from the consume queues of the topics deduplicated (and of the
        delayed and half messages when any topic is): the newest ``deduplicationMaxKeys`` by
        commit-log order. Run before the broker serves sends as a master."""
        broker = self._broker
        config = broker.config
        started = time.monotonic()
        since_ms = int(time.time() * 1000) - config.deduplication_window_seconds * 1000
        limit = config.deduplication_max_keys
        topics = {name for name in broker.topics.topics if self.enabled_for(name)}
        if topics:
            topics |= {SCHEDULE_TOPIC, TRANS_HALF_TOPIC}
        found: list[tuple[int, str, bytes, _Stored]] = []
        store = broker.store
        for topic in topics:
            for queue_id in store.queue_ids(topic):
                end = store.max_offset(topic, queue_id)
                first = max(store.first_offset_at(topic, queue_id, since_ms), end - limit)
                found.extend(self._queue_keys(topic, queue_id, first, end))
        found.sort(key=lambda item: item[0])
        self.clear()
        for number, (_, topic, key, stored) in enumerate(found[-limit:]):
            self._puts[number] = stored
            self._copies.setdefault(topic, {})[key] = number << _POSITION_BITS
            self._order.append((number, topic, [key]))
        self._next_put = len(self._puts)
        self._count = sum(map(len, self._copies.values()))
        log.info(
            "deduplication: %d keys of the last %d s rebuilt from %d topics in %.3f s",
            len(self),
            config.deduplication_window_seconds,
            len(topics),
            time.monotonic() - started,
        )

    def _queue_keys(
        self, topic: str, queue_id: int, first: int, end: int
    ) -> Iterator[tuple[int, str, bytes, _Stored]]:
        store = self._broker.store
        next_offset = first
        while next_offset < end:
            offset = next_offset
            next_offset += 1
            unit = store.queue_unit(topic, queue_id, offset)
            record = store.message_at(unit[0]) if unit is not None else None
            if record is None:
                continue
            try:
                decoded = decode_record_at(record, 0, len(record))
            except RecordError:
                continue
            properties = decode_properties(decoded.properties)
            if decoded.sys_flag & INNER_BATCH_FLAG:
                # An inner batch is not deduplicated (its UNIQ_KEY is the batch's, not a message's): one
                # look at its record, then on past the offsets it covers.
                count = properties.get(INNER_NUM_PROPERTY, "")
                if count.isascii() and count.isdigit():
                    next_offset = max(next_offset, decoded.queue_offset + int(count))
                continue
            key = properties.get("UNIQ_KEY", "")
            if not key:
                continue
            answered_queue = properties.get(REAL_QUEUE_ID, "")
            stored = _Stored(
                decoded.store_timestamp,
                int(answered_queue) if answered_queue.isdigit() else queue_id,
                offset,
                [decoded.offset_msg_id],  # the record's store host: the id the first answer carried
                decoded.commitlog_offset + decoded.total_size,
            )
            yield decoded.commitlog_offset, topic, key.encode("utf-8", "surrogatepass"), stored


def _uniq_keys(batch: MessageBatch) -> list[bytes]:
    """Each message's UNIQ_KEY (b"" without). The index keys hold them already, each message's first
    (its KEYS follow): when no message has KEYS and each has one index key, they are the UNIQ_KEYs,
    found without a step per message. Otherwise each message's properties are searched."""
    count = len(batch.properties)
    index_keys = batch.index_keys
    if len(index_keys) == count and batch.index_owners == list(range(count)):
        everything = _SEPARATOR.join(batch.properties)
        if not everything.startswith(_KEYS_PAIR) and _SEPARATOR + _KEYS_PAIR not in everything:
            return index_keys
    return [found[-1][1] if (found := _find_uniq_key(properties)) else b"" for properties in batch.properties]


def _subset(batch: MessageBatch, positions: list[int]) -> MessageBatch:
    """The messages of *batch* at *positions* (ascending), as a batch of their own."""
    new_position = {old: new for new, old in enumerate(positions)}
    subset = MessageBatch(
        batch.topic,
        batch.queue_id,
        batch.sys_flag,
        batch.born_timestamp,
        batch.born_host,
        batch.store_host,
        [batch.flags[i] for i in positions],
        [batch.bodies[i] for i in positions],
        [batch.properties[i] for i in positions],
        [batch.tags_codes[i] for i in positions],
        reconsume_times=batch.reconsume_times,
    )
    for key, owner in zip(batch.index_keys, batch.index_owners, strict=True):
        if owner in new_position:
            subset.index_keys.append(key)
            subset.index_owners.append(new_position[owner])
    return subset
