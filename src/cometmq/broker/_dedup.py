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
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from cometmq.errors import RecordError
from cometmq.protocol.naming import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, property_finder
from cometmq.protocol.record import decode_record_at
from cometmq.protocol.topic_config import DEDUPLICATION_ATTRIBUTE
from cometmq.protocol.transaction import REAL_QUEUE_ID
from cometmq.store import MessageBatch, MessageToStore, PutResult, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

_find_uniq_key = property_finder("UNIQ_KEY")


class _FirstCopy(NamedTuple):
    """What a repeat is answered with (a tuple: a million of them must stay small)."""

    store_ms: int
    queue_id: int  # as the first send's answer named it (a half or delayed message's real queue)
    queue_offset: int
    msg_id: str  # the offset message id
    end: int  # a commit-log end the first copy lies below: what the answer waits to be flushed


class Deduplicator:
    """The broker's remembered keys, and the sends that consult them."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        # (stored topic, UNIQ_KEY) → its first copy, oldest first (the order of eviction).
        self._copies: OrderedDict[tuple[str, bytes], _FirstCopy] = OrderedDict()

    def __len__(self) -> int:
        return len(self._copies)

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

    # Sends ---------------------------------------------------------------------------------------

    def put(self, message: MessageToStore, queue_id: int) -> tuple[PutResult, int]:
        """Store *message* (whose send's answer names *queue_id*) unless its key was stored within the
        window: the store's result, or one describing the first copy (``count`` 0), and the queue id
        the answer names."""
        store = self._broker.store
        key = message.uniq_key.encode("utf-8", "surrogatepass")
        if not key:
            return store.put(message), queue_id
        now_ms = int(time.time() * 1000)
        first = self._lookup(message.topic, key, now_ms)
        if first is not None:
            return self._first_copies_result([first]), first.queue_id
        result = store.put(message)
        if result.status is PutStatus.PUT_OK:
            self._remember(
                message.topic,
                key,
                _FirstCopy(
                    now_ms,
                    queue_id,
                    result.queue_offset,
                    result.msg_id_text,
                    result.commitlog_end_offset,
                ),
                now_ms,
            )
        return result, queue_id

    def put_batch(self, batch: MessageBatch) -> tuple[PutResult, int]:
        """Store the messages of *batch* whose keys were not stored within the window (nor earlier in
        the batch): all repeats → the first copies' answer; none → the batch as it is; some → the
        others stored, the answer's ids in the batch's order (each repeat's the first copy's), its
        queue offset the first message's."""
        store = self._broker.store
        topic = batch.topic
        now_ms = int(time.time() * 1000)
        keys = [_last_uniq_key(properties) for properties in batch.properties]
        # Per repeated message: its first copy, or the position of an earlier message of the batch.
        repeats: dict[int, _FirstCopy | int] = {}
        position_of_key: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if not key:
                continue
            found = self._lookup(topic, key, now_ms)
            if found is not None:
                repeats[i] = found
            elif key in position_of_key:
                repeats[i] = position_of_key[key]
            else:
                position_of_key[key] = i
        if not repeats:
            result = store.put_batch(batch)
            if result.status is PutStatus.PUT_OK:
                self._remember_batch(topic, keys, range(len(keys)), result, batch.queue_id, now_ms)
            return result, batch.queue_id
        fresh = [i for i in range(len(keys)) if i not in repeats]
        answers: dict[int, _FirstCopy] = {}
        if fresh:
            result = store.put_batch(_subset(batch, fresh))
            if result.status is not PutStatus.PUT_OK:
                return result, batch.queue_id
            self._remember_batch(topic, keys, fresh, result, batch.queue_id, now_ms)
            end = result.commitlog_end_offset
            for n, (i, msg_id) in enumerate(zip(fresh, result.msg_ids, strict=True)):
                answers[i] = _FirstCopy(now_ms, batch.queue_id, result.queue_offset + n, msg_id, end)
        for i, repeat in sorted(repeats.items()):
            answers[i] = repeat if isinstance(repeat, _FirstCopy) else answers[repeat]
        merged = self._first_copies_result([answers[i] for i in range(len(keys))])
        merged.count = len(fresh)
        return merged, answers[0].queue_id

    def _lookup(self, topic: str, key: bytes, now_ms: int) -> _FirstCopy | None:
        first = self._copies.get((topic, key))
        if first is None or now_ms - first.store_ms > self._broker.config.deduplication_window_seconds * 1000:
            return None
        return first

    def _remember(self, topic: str, key: bytes, first: _FirstCopy, now_ms: int) -> None:
        copies = self._copies
        copies[(topic, key)] = first
        copies.move_to_end((topic, key))  # a key stored again after its window: now the newest
        self._evict(now_ms)

    def _remember_batch(
        self,
        topic: str,
        keys: list[bytes],
        stored: Iterable[int],
        result: PutResult,
        queue_id: int,
        now_ms: int,
    ) -> None:
        copies = self._copies
        ids = result.msg_ids
        end = result.commitlog_end_offset
        for n, i in enumerate(stored):
            key = keys[i]
            if key:
                copies[(topic, key)] = _FirstCopy(now_ms, queue_id, result.queue_offset + n, ids[n], end)
                copies.move_to_end((topic, key))
        self._evict(now_ms)

    def _evict(self, now_ms: int) -> None:
        """Forget the oldest keys past the bound, and those past the window."""
        copies = self._copies
        config = self._broker.config
        excess = len(copies) - config.deduplication_max_keys
        for _ in range(max(0, excess)):
            copies.popitem(last=False)
        oldest_kept = now_ms - config.deduplication_window_seconds * 1000
        while copies:
            # OrderedDict iterates along its links: the first entry is found in constant time.
            first = next(iter(copies.values()))
            if first.store_ms >= oldest_kept:
                break
            copies.popitem(last=False)

    def _first_copies_result(self, copies: list[_FirstCopy]) -> PutResult:
        """A result that answers a send with *copies*: their ids, the first one's queue offset, and an
        end past all of them (what a SYNC_FLUSH or SYNC_MASTER answer waits for)."""
        ids = [c.msg_id for c in copies]
        return PutResult(
            PutStatus.PUT_OK,
            commitlog_offset=max(c.end for c in copies),
            queue_offset=copies[0].queue_offset,
            count=0,
            store_timestamp=copies[0].store_ms,
            msg_id_text=",".join(ids),
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
        now_ms = int(time.time() * 1000)
        since_ms = now_ms - config.deduplication_window_seconds * 1000
        limit = config.deduplication_max_keys
        topics = [name for name in list(broker.topics.topics) if self.enabled_for(name)]
        if topics:
            topics += [SCHEDULE_TOPIC, TRANS_HALF_TOPIC]
        found: list[tuple[int, str, bytes, _FirstCopy]] = []
        store = broker.store
        for topic in topics:
            for queue_id in store.queue_ids(topic):
                end = store.max_offset(topic, queue_id)
                first = max(store.first_offset_at(topic, queue_id, since_ms), end - limit)
                found.extend(self._queue_keys(topic, queue_id, first, end))
        found.sort(key=lambda item: item[0])
        self._copies.clear()
        for _, topic, key, copy in found[-limit:]:
            self._copies[(topic, key)] = copy
        log.info(
            "deduplication: %d keys of the last %d s rebuilt from %d topics in %.3f s",
            len(self._copies),
            config.deduplication_window_seconds,
            len(topics),
            time.monotonic() - started,
        )

    def _queue_keys(
        self, topic: str, queue_id: int, first: int, end: int
    ) -> Iterable[tuple[int, str, bytes, _FirstCopy]]:
        store = self._broker.store
        for offset in range(first, end):
            unit = store.queue_unit(topic, queue_id, offset)
            record = store.message_at(unit[0]) if unit is not None else None
            if record is None:
                continue
            try:
                decoded = decode_record_at(record, 0, len(record))
            except RecordError:
                continue
            properties = decode_properties(decoded.properties)
            key = properties.get("UNIQ_KEY", "")
            if not key:
                continue
            answered_queue = properties.get(REAL_QUEUE_ID, "")
            copy = _FirstCopy(
                decoded.store_timestamp,
                int(answered_queue) if answered_queue.isdigit() else queue_id,
                offset,
                decoded.offset_msg_id,  # the record's store host: the id the first answer carried
                decoded.commitlog_offset + decoded.total_size,
            )
            yield decoded.commitlog_offset, topic, key.encode("utf-8", "surrogatepass"), copy


def _last_uniq_key(properties: bytes) -> bytes:
    """A message's UNIQ_KEY in its encoded properties (given twice: the last, as decoding keeps)."""
    found = _find_uniq_key(properties)
    return found[-1][1] if found else b""


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
