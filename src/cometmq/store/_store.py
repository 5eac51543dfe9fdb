"""MessageStore: the API the broker calls (put, get, offsets, lifecycle)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from cometmq.errors import ReplicaOffsetError, StoreError
from cometmq.protocol.naming import TIMER_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import (
    BORNHOST_V6_FLAG,
    INNER_BASE_PROPERTY,
    INNER_BATCH_FLAG,
    INNER_NUM_PROPERTY,
    MAX_PROPERTIES_SIZE,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    RECORD_CRC_NAME,
    STOREHOST_V6_FLAG,
    DecodedRecord,
    crc32,
    hex_ids,
    pack_properties_length,
    pack_record_head,
    seal_record_crc,
    seal_records_crc,
    with_record_crc_property,
    without_record_crc_property,
)
from cometmq.protocol.taghash import java_string_hash

from ._batchqueue import BatchConsumeQueue, BatchQueueTable
from ._clean import CleanReport, CleanService
from ._commitlog import CommitLog
from ._consumequeue import SCHEDULE_TOPIC, ConsumeQueue, QueueTable, TopicQueues
from ._dispatch import (
    Dispatched,
    RecordCrcCheck,
    Stop,
    dispatch_unit,
    is_dispatched,
    scan_plain_records,
    walk_records,
    whole_records,
)
from ._epochs import EPOCH_FILE_NAME, EpochEntry, EpochFile, check_history, clipped
from ._flush import OUT_OF_DESCRIPTORS, CheckpointFile, FlushService
from ._index import IndexService, is_record_boundary
from ._lock import StoreDirectoryLock
from ._mappedfile import MappedFile, fsync_dir
from ._model import (
    FlushDiskType,
    GetResult,
    GetStatus,
    MessageBatch,
    MessageToStore,
    PutResult,
    PutStatus,
    QueryResult,
    StoreConfig,
)
from ._recovery import rebuild_queue, recover
from .format import CQ_UNIT, CQ_UNIT_SIZE, Checkpoint

__all__ = ["ArrivalListener", "MessageStore", "parse_delay_levels"]

log = logging.getLogger("cometmq.store")

ArrivalListener = Callable[[str, int, int, int], None]

_HOST_V6_FLAGS: Final = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
_PAGE: Final = 4096
# RocketMQ's pull scans at most max(16000 bytes of units, maxMsgNums units) of one consume-queue file.
_MAX_SCAN_UNITS: Final = 16000 // CQ_UNIT_SIZE
_pack_unit: Final = CQ_UNIT.pack
_iter_units: Final = CQ_UNIT.iter_unpack
# CQ_UNIT with only the last byte of the tags code, for reads without a tag filter, which never look
# at it: a cached small int where the tags code would be a new int object per unit.
_iter_units_untagged: Final = struct.Struct(">qi7xB").iter_unpack
_ANY_BYTE: Final = frozenset(range(256))  # what such a read wants of that byte: anything
_time_ns: Final = time.time_ns
# Every put's and get's answer reads these: an enum member read through its class goes through the
# metaclass, many times the cost of reading a global (bench/store.py).
_PUT_OK: Final = PutStatus.PUT_OK
_FOUND: Final = GetStatus.FOUND
# A refused put measures the disk again at most this often, so writes resume soon after space is back.
_REFUSED_RECHECK_S: Final = 1.0
_OUT_OF_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
# The topics whose units carry a delivery time as their tags code, not the hash of TAGS: the delay
# levels' (their level's delay after the store time) and the timer's (its TIMER_OUT_MS property).
_TIMED_TOPICS: Final = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
_TIMER_OUT_MS: Final = "TIMER_OUT_MS"


def _storable_hosts(sys_flag: int, born_host: bytes, store_host: bytes) -> bool:
    """Whether the hosts fit the record: we only write IPv4 hosts (docs/protocol.md#record)."""
    return not sys_flag & _HOST_V6_FLAGS and len(born_host) == 8 and len(store_host) == 8


def _owners_in_order(owners: list[int], keys: int, count: int) -> bool:
    """Whether a batch's index owners name one of its *count* messages each, in message order: an
    index file's header vouches for every record up to its last entry's, so entries must not go
    back (a sorted list sorts in one linear pass)."""
    return len(owners) == keys and (
        not owners or (owners[0] >= 0 and owners[-1] < count and owners == sorted(owners))
    )


def _sealed(parts: list[bytes | memoryview], offsets: list[int], total: int) -> bytearray:
    """The records of *parts*, starting at commit-log *offsets* and *total* bytes long, joined with
    their record CRCs filled in (enabledAppendPropCRC)."""
    records = bytearray().join(parts)
    if len(offsets) == 1:  # a single put: no spans to make
        seal_record_crc(records, 0, total)
        return records
    starts = [offset - offsets[0] for offset in offsets]
    with memoryview(records) as mv:
        seal_records_crc(mv, zip(starts, [*starts[1:], total], strict=True))
    return records


def _inner_count(rec: DecodedRecord) -> int:
    """The message count of an inner-batch record: its INNER_NUM, a whole number in 1..32767 (a unit's
    count is a Java short). A record whose INNER_NUM is anything else is a unit of one message, with a
    warning, so that one malformed record cannot stop a recovery or a slave."""
    text = decode_properties(rec.properties).get(INNER_NUM_PROPERTY, "")
    count = int(text) if text.isascii() and text.isdigit() else 0
    if 0 < count <= 0x7FFF:
        return count
    log.warning(
        "the inner-batch record of %s/%d at commit-log offset %d has INNER_NUM %r, not a count in "
        "1..32767; its unit covers one offset",
        rec.topic,
        rec.queue_id,
        rec.commitlog_offset,
        text,
    )
    return 1


def _failure(status: PutStatus) -> PutResult:
    return PutResult(status, -1, -1, 0, 0, "", 0)


def _failures(status: PutStatus, count: int) -> list[PutResult]:
    return [_failure(status) for _ in range(count)]


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 1m 2h"`` → delays in ms (RocketMQ's messageDelayLevel syntax: s, m, h, d)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    delays = []
    for token in spec.split():
        unit = units.get(token[-1:])
        if unit is None or not token[:-1].isdigit():
            raise ValueError(f"bad delay level {token!r} in {spec!r}")
        delays.append(int(token[:-1]) * unit)
    return delays


class MessageStore:
    """Commit log + consume queues + flushing + recovery, under one root directory.

    Single writer: ``put``/``put_batch``/``get_messages`` and the rest are called from one thread
    (the broker's event loop) and take no locks. The flush thread syncs files, writes the index
    headers and the checkpoint, and closes retired files (``_flush``). ``start`` and ``shutdown`` may
    run on another thread, while nothing else uses the store.
    """

    def __init__(self, config: StoreConfig) -> None:
        if (
            config.mapped_file_size_consume_queue < CQ_UNIT_SIZE
            or config.mapped_file_size_consume_queue % CQ_UNIT_SIZE
        ):
            raise ValueError("mapped_file_size_consume_queue must be a positive multiple of 20")
        if config.mapped_file_size_commitlog < _PAGE:
            raise ValueError("mapped_file_size_commitlog must be at least 4096")
        self._config = config
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._root = Path(config.root_dir)
        self._lock = StoreDirectoryLock(self._root)
        self._delays = parse_delay_levels(config.message_delay_level)
        # Topics whose queues are batch consume queues (``queue.type`` BatchCQ): those the broker
        # declares and those found on disk. Kept over restarts of the store object.
        self._batch_topics: set[str] = set()
        self._new_files()
        self._max_body = config.max_message_size
        self._append_record_crc = config.enabled_append_prop_crc
        self._flusher: FlushService | None = None
        self._index: IndexService | None = None  # None: messageIndexEnable is off
        self._running = False
        # The put path's one check: running and not refused by the disk guard.
        self._accepting = False
        self._cleaner = CleanService(self._root, config)
        self._last_disk_check = 0.0
        # Why writes are refused after a store file could not be created, grown or written for lack of
        # space; until the next look at the disk (``_check_disk``).
        self._out_of_space: str | None = None
        self._out_of_space_logged = False
        # Why the store takes no more writes after a truncation failed part way, or None.
        self._truncation_failure: str | None = None
        self._listeners: list[ArrivalListener] = []
        self._last_store_ts = 0
        self._host_hex: dict[bytes, str] = {}
        self._record_crc = RecordCrcCheck.of(config.enabled_append_prop_crc, config.force_verify_prop_crc)
        # The start of a record its master is still sending (``append_replica``), held here rather
        # than written: the commit-log bytes end at a record boundary. Puts are refused meanwhile.
        self._replica_partial = bytearray()
        self._epoch_file = EpochFile(self._root / EPOCH_FILE_NAME)
        self._epochs: list[EpochEntry] = []  # loaded by ``start``

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Lock the directory, load and recover the files, mark the store as running (``abort``),
        start flushing. Raises ``StoreInUseError``, before opening any store file, while another
        store, in this process or another, runs on the same directory."""
        if self._running:
            return
        cfg = self._config
        self._root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()  # before recovery, which would truncate what a running store appends
        self._new_files()  # fresh objects, so a store can be started again after shutdown
        self._truncation_failure = None  # recovery finishes the cut
        cl = self._commitlog
        abort = self._root / "abort"
        try:
            crashed = abort.exists()
            checkpoint = self._checkpoint.read()
            cl.load()
            self._queues.load()
            self._batch_queues.load()
            self._queues.commitlog_min = lambda: cl.min_offset
            self._last_store_ts = recover(
                cl,
                self._queues,
                checkpoint,
                crashed,
                self._recovered_tags_code,
                self._record_crc,
                self._dispatch_batch_record,
                len(self._batch_queues.queues),
            )
            self._recover_batch_queues()
            for topic in list(self._batch_topics):
                self._move_to_batch_queues(topic)
            if cfg.message_index_enable:
                self._index = IndexService(self._root / "index", cfg.max_index_num, self._retire_files)
                self._index.load(cl)
            self._queues.on_damaged = self._rebuild_queue
            cl.ensure_segment()
            self._load_epochs()
            self._checkpoint.write(
                Checkpoint(cl.flushed_offset, cl.max_offset, False, _time_ns() // 1_000_000)
            )
            fd = os.open(abort, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self._root)
        except BaseException:
            self._close_files()
            raise
        self._flusher = FlushService(
            cl,
            self._queues,
            self._batch_queues,
            self._checkpoint,
            sync_mode=self._sync_flush,
            interval_s=cfg.flush_interval_commitlog_ms / 1000,
            least_bytes=cfg.flush_commitlog_least_pages * _PAGE,
            timeout_s=cfg.sync_flush_timeout_ms / 1000,
            index=self._index,
            on_failure=self._refuse_after_flush_failure,
        )
        self._flusher.start()
        self._running = True
        self._cleaner.reset()
        self._check_disk()

    def shutdown(self) -> None:
        """Flush everything, write a clean checkpoint, remove ``abort``, close files, unlock the
        directory. Idempotent."""
        if not self._running:
            return
        self._running = False
        self._accepting = False
        flusher = self._flusher
        self._flusher = None
        self._replica_partial.clear()  # sent again by the master
        try:
            if flusher is not None:
                flusher.stop()
                if flusher.failure is not None:
                    # Leave ``abort``: the next start must check what the failed sync may have lost.
                    log.error("store closed after a failed disk sync; the next start will recover")
                    return
            # Only once everything is on disk: a missing abort file vouches for the checkpoint.
            (self._root / "abort").unlink(missing_ok=True)
            fsync_dir(self._root)
        except OSError:
            log.exception("store shutdown could not flush; the next start will recover")
        finally:
            self._close_files()

    def _rebuild_queue(self, cq: ConsumeQueue) -> None:
        rebuild_queue(self._commitlog, cq, self._queues, self._recovered_tags_code, self._retire_files)

    def _load_epochs(self) -> None:
        """Read the epoch file, without the entries that begin beyond the recovered log's end (a
        truncation the crash interrupted after the log was cut)."""
        loaded = self._epoch_file.read()
        self._epochs = clipped(loaded, self._commitlog.max_offset)
        if self._epochs != loaded:
            log.warning(
                "epochs %s begin beyond the commit log's end %d; dropping them from the epoch file",
                loaded[len(self._epochs) :],
                self._commitlog.max_offset,
            )
            self._epoch_file.write(self._epochs)

    def _new_files(self) -> None:
        """Unloaded objects for the store's files (``start`` loads them)."""
        cfg = self._config
        self._commitlog = CommitLog(
            self._root / "commitlog", cfg.mapped_file_size_commitlog, warm=self._sync_flush
        )
        self._queues = QueueTable(self._root / "consumequeue", cfg.mapped_file_size_consume_queue)
        self._topics = self._queues.topics  # the put path's first lookup, one attribute away
        self._batch_queues = BatchQueueTable(self._root / "batchconsumequeue", self._batch_topics)
        self._checkpoint = CheckpointFile(self._root / "checkpoint")

    def _close_files(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
        self._queues.close()
        self._batch_queues.close()
        self._commitlog.close()
        self._checkpoint.close()
        self._lock.release()

    # -- writing -------------------------------------------------------------------------------

    def put(self, msg: MessageToStore) -> PutResult:
        """Append one message and index it: a batch of one through ``_append``.

        Hot path (bench/store.py "put, 1 at a time"): every line here is paid per message."""
        if not self._accepting and not self._writes_resumed():
            return _failure(PutStatus.SERVICE_NOT_AVAILABLE)
        if self._batch_topics and msg.topic in self._batch_topics:
            return self.put_inner_batch(msg, 1)
        topic = self._topics.get(msg.topic) or self._queues.topic(msg.topic)
        body = msg.body
        sys_flag = msg.sys_flag
        queue_id = msg.queue_id
        if (
            topic is None
            or queue_id < 0
            or len(body) > self._max_body
            or not _storable_hosts(sys_flag, msg.born_host, msg.store_host)
        ):
            return _failure(PutStatus.MESSAGE_ILLEGAL)
        props = self._record_properties(msg.properties)
        if isinstance(props, PutStatus):
            return _failure(props)
        cq: ConsumeQueue | None = None
        if is_dispatched(sys_flag):  # prepared/rollback transaction records get no unit (RocketMQ)
            cq = topic.queues.get(queue_id) or self._queues.queue(topic, queue_id)
        size = MIN_RECORD_SIZE + len(body) + len(topic.encoded) + len(props)
        return self._append(
            topic,
            cq,
            msg,
            (msg.flag,),
            (body,),
            (props,),
            (msg.tags_code,),
            msg.prepared_transaction_offset,
            size,
        )

    def _record_properties(self, text: str) -> bytes | PutStatus:
        """One message's properties as its record stores them (UTF-8, the record CRC property as this
        store is configured), or why they cannot be stored."""
        try:
            props = text.encode()
        except UnicodeEncodeError:  # lone surrogates: not representable in the record
            return PutStatus.MESSAGE_ILLEGAL
        if RECORD_CRC_NAME in props:
            props = without_record_crc_property(props)
        if self._append_record_crc:
            props = with_record_crc_property(props)
        if len(props) > MAX_PROPERTIES_SIZE:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED
        return props

    def put_batch(self, batch: MessageBatch | Sequence[MessageToStore]) -> PutResult:
        """Append messages of one topic and queue as consecutive records and queue offsets, in one
        segment; all or nothing. Transaction prepared/rollback messages cannot be batched. A list of
        ``MessageToStore`` is turned into a ``MessageBatch`` first; it is refused (MESSAGE_ILLEGAL)
        unless its messages share everything but flag, body and properties, as a batch on the wire
        does (topic, queue, sys flag, born time and host, store host, reconsume times). Properties
        must be UTF-8: recovery decodes them.

        Hot path (bench/broker_send.py, bench/store.py "put_batch of 32").
        """
        if not self._accepting and not self._writes_resumed():
            return _failure(PutStatus.SERVICE_NOT_AVAILABLE)
        if not isinstance(batch, MessageBatch):
            converted = MessageBatch.of(batch)
            if converted is None:
                return _failure(PutStatus.MESSAGE_ILLEGAL)
            batch = converted
        topic = self._queues.topic(batch.topic)
        properties = self._batch_properties(batch)
        # A BatchCQ topic takes a batch as one record (``put_inner_batch``).
        if topic is None or batch.queue_id < 0 or properties is None or batch.topic in self._batch_topics:
            return _failure(PutStatus.MESSAGE_ILLEGAL)
        if max(map(len, properties)) > MAX_PROPERTIES_SIZE:
            return _failure(PutStatus.PROPERTIES_SIZE_EXCEEDED)
        cq = self._queues.queue(topic, batch.queue_id)
        bodies = batch.bodies
        total = (
            (MIN_RECORD_SIZE + len(topic.encoded)) * len(bodies)
            + sum(map(len, bodies))
            + sum(map(len, properties))
        )
        return self._append(topic, cq, batch, batch.flags, bodies, properties, batch.tags_codes, 0, total)

    def declare_batch_topic(self, topic: str) -> None:
        """Keep *topic*'s queues as batch consume queues (``queue.type`` BatchCQ; the broker declares such
        topics before they take messages). Units the topic already has in ordinary consume queues (a
        slave given its master's records before its master's topic table) move to batch queues, so
        that the queues are the master's whatever came first."""
        if topic in self._batch_topics:
            return
        self._batch_topics.add(topic)
        if self._running:
            self._move_to_batch_queues(topic)

    def _move_to_batch_queues(self, topic: str) -> None:
        """Give each unit of *topic*'s ordinary consume queues a batch unit of one message, then drop
        the ordinary queues. A queue whose batch queue already has units keeps those."""
        tq = self._queues.topics.get(topic)
        queue_ids = tq.queue_ids() if tq is not None else set()
        if tq is None or not queue_ids:
            return
        for queue_id in sorted(queue_ids):
            cq = self._queues.queue(tq, queue_id)
            bq = self._batch_queues.queue(topic, queue_id)
            if bq.units or cq.max_offset <= cq.min_offset:
                continue
            bq.restart_at(cq.min_offset, self._retire_files)
            for index in range(cq.min_offset, cq.max_offset):
                unit = cq.unit(index)
                if unit is None:
                    break
                coff, size, tags_code = unit
                bq.prepare()
                bq.append(coff, size, tags_code, self._commitlog.store_timestamp_at(coff), 1)
            log.info(
                "%s/%d: %d unit(s) moved from the consume queue to the batch consume queue (a BatchCQ topic)",
                topic,
                cq.queue_id,
                bq.units,
            )
        self._retire_queues(self._queues.remove_topic(topic))

    def is_batch_topic(self, topic: str) -> bool:
        return topic in self._batch_topics

    def put_inner_batch(self, msg: MessageToStore, count: int) -> PutResult:
        """Append *msg* to a BatchCQ topic as ONE record with ONE unit covering *count* queue offsets. With
        *count* > 1, *msg* is an inner batch: its sys flag carries INNER_BATCH and NEED_UNWRAP, its body
        is the batch body of *count* messages and its properties INNER_NUM; the store adds INNER_BASE (the
        first message's queue offset, also the record's QUEUEOFFSET), as RocketMQ 5's
        BatchConsumeQueue.assignQueueOffset does. With *count* 1, a plain message of such a topic.

        Hot path of inner-batch sends (bench: ``cometmq bench produce --inner-batch``): per batch, not
        per message."""
        if not self._accepting and not self._writes_resumed():
            return _failure(PutStatus.SERVICE_NOT_AVAILABLE)
        topic = self._queues.topic(msg.topic)
        body = msg.body
        if (
            topic is None
            or msg.queue_id < 0
            or not 0 < count <= 0x7FFF  # the unit's count is a Java short
            or len(body) > self._max_body
            or not is_dispatched(msg.sys_flag)
            or not _storable_hosts(msg.sys_flag, msg.born_host, msg.store_host)
        ):
            return _failure(PutStatus.MESSAGE_ILLEGAL)
        self._batch_topics.add(msg.topic)
        bq = self._batch_queues.queue(msg.topic, msg.queue_id)
        text = msg.properties
        if msg.sys_flag & INNER_BATCH_FLAG:
            separator = "\x02" if text and not text.endswith("\x02") else ""
            text = f"{text}{separator}{INNER_BASE_PROPERTY}\x01{bq.max_offset}"
        props = self._record_properties(text)
        if isinstance(props, PutStatus):
            return _failure(props)
        try:
            bq.prepare()
        except OSError as exc:
            return _failure(self._refuse_for(exc, "no room for a batch consume-queue file"))
        size = MIN_RECORD_SIZE + len(body) + len(topic.encoded) + len(props)
        result = self._append(
            topic,
            None,
            msg,
            (msg.flag,),
            (body,),
            (props,),
            (msg.tags_code,),
            0,
            size,
            bq,
            count,
        )
        result.count = count  # messages, as a batch's result counts them (the broker's stats)
        return result

    def put_together(self, messages: Sequence[MessageToStore]) -> list[PutResult]:
        """Append single messages of any topics and queues as consecutive records in one write, all
        or nothing: every result PUT_OK, or every result the same failure. Each message is stored as
        ``put`` would store it (tags code, delay-level tags code in SCHEDULE_TOPIC_XXXX, no unit for
        prepared and rolled-back transaction records, index entries); they are published together,
        in order, so a reader sees all of them or none. The results are in the messages' order;
        the last one's ``commitlog_end_offset`` is the group's end (what ``wait_flushed`` needs).

        A crash keeps the whole group or none of it: the records are written with the first one's
        size field zero, where recovery takes the log to end, and that field is written last (a
        process killed between the two leaves no record of the group; the page cache keeps the order
        of the two writes). A power loss may persist the pages out of order: that guarantee is as
        strong as the flush's, which is none for an unflushed tail under ASYNC_FLUSH.

        The path of every transaction's settlement (a committed copy with its op record:
        bench/transactions.py), not of plain sends.
        """
        count = len(messages)
        if count == 1:  # one record is whole or absent after a crash anyway
            return [self.put(messages[0])]
        if not count:
            return []
        if not self._accepting and not self._writes_resumed():
            return _failures(PutStatus.SERVICE_NOT_AVAILABLE, count)
        prepared = self._prepare_together(messages)
        if isinstance(prepared, PutStatus):
            return _failures(prepared, count)
        topics, queues, properties, total = prepared
        units_per_queue: dict[ConsumeQueue, int] = {}
        for cq in queues:
            if cq is not None:
                units_per_queue[cq] = units_per_queue.get(cq, 0) + 1
        cl = self._commitlog
        seg = cl.cur
        pos = cl.wrote_pos
        if (
            seg is None
            or pos + total + 8 > seg.reserved_to
            or any(cq.max_offset + n > cq.capacity for cq, n in units_per_queue.items())
        ):
            room = self._reserve(total, None, 0, units_per_queue.items())
            if isinstance(room, PutStatus):
                return _failures(room, count)
            seg, pos = room
        now = _time_ns() // 1_000_000
        if now < self._last_store_ts:
            now = self._last_store_ts
        else:
            self._last_store_ts = now
        next_queue_offset = {cq: cq.max_offset for cq in units_per_queue}
        units = {cq: bytearray() for cq in units_per_queue}
        parts: list[bytes | memoryview] = []
        offsets: list[int] = []
        queue_offsets: list[int] = []
        tags_codes: list[int] = []
        phys = seg.start + pos
        try:
            for msg, topic, cq, props in zip(messages, topics, queues, properties, strict=True):
                queue_offset = 0
                if cq is not None:
                    queue_offset = next_queue_offset[cq]
                    next_queue_offset[cq] = queue_offset + 1
                tags_code = msg.tags_code
                if topic.is_schedule:
                    tags_code = self._delivery_time(props.decode(), now, tags_code)
                body = msg.body
                size = MIN_RECORD_SIZE + len(body) + len(topic.encoded) + len(props)
                parts += (
                    pack_record_head(
                        size,
                        MESSAGE_MAGIC_CODE,
                        crc32(body) & 0x7FFFFFFF,
                        msg.queue_id,
                        msg.flag,
                        queue_offset,
                        phys,
                        msg.sys_flag,
                        msg.born_timestamp,
                        msg.born_host,
                        now,
                        msg.store_host,
                        msg.reconsume_times,
                        msg.prepared_transaction_offset,
                        len(body),
                    ),
                    body,
                    topic.record_field,
                    pack_properties_length(len(props)),
                    props,
                )
                if cq is not None:
                    units[cq] += _pack_unit(phys, size, tags_code)
                offsets.append(phys)
                queue_offsets.append(queue_offset)
                tags_codes.append(tags_code)
                phys += size
        except struct.error:  # a field out of range; nothing was written
            return _failures(PutStatus.MESSAGE_ILLEGAL, count)
        records = _sealed(parts, offsets, total) if self._append_record_crc else bytearray().join(parts)
        first_size = bytes(records[:4])
        records[:4] = bytes(4)
        # Written as ``_append`` writes (through the mapping under ASYNC_FLUSH, with pwrite under
        # SYNC_FLUSH), the first size field last and through the mapping either way: a 4-byte store
        # into the page just written costs no syscall, and it reaches the page cache after the rest
        # (a pwrite killed half way may leave any prefix of its pages). The blocks are reserved
        # (``_reserve``), so no store into the mapping can die of SIGBUS on a full disk.
        if self._sync_flush:
            try:
                seg.write_at(pos, records)
            except OSError as exc:
                return _failures(self._write_failed(seg, pos, exc).status, count)
        else:
            seg.mm[pos : pos + total] = records
        seg.mm[pos : pos + 4] = first_size
        cl.wrote_pos = pos + total
        end = phys
        if end > cl.warm_at:
            cl.warm_ahead()
        self._publish_together(messages, topics, queues, units, offsets, end, tags_codes, now)
        store_host = messages[0].store_host
        host_hex = self._host_hex.get(store_host) or self._remember_host(store_host)
        ends = [*offsets[1:], end]
        return [
            PutResult(_PUT_OK, offset, queue_offset, 1, now, f"{host_hex}{offset:016X}", record_end - offset)
            for offset, queue_offset, record_end in zip(offsets, queue_offsets, ends, strict=True)
        ]

    def _prepare_together(
        self, messages: Sequence[MessageToStore]
    ) -> tuple[list[TopicQueues], list[ConsumeQueue | None], list[bytes], int] | PutStatus:
        """``put_together``'s checks, those of ``put`` for each message: their topics, their queues
        (None: no unit), their properties as stored and the records' total size, or why they cannot
        be stored. All store hosts must be the same (the results' message ids name one)."""
        topics: list[TopicQueues] = []
        queues: list[ConsumeQueue | None] = []
        properties: list[bytes] = []
        total = 0
        store_host = messages[0].store_host
        for msg in messages:
            topic = self._topics.get(msg.topic) or self._queues.topic(msg.topic)
            if (
                topic is None
                or msg.topic in self._batch_topics  # one record per message there: put_inner_batch
                or msg.queue_id < 0
                or len(msg.body) > self._max_body
                or msg.store_host != store_host
                or not _storable_hosts(msg.sys_flag, msg.born_host, msg.store_host)
            ):
                return PutStatus.MESSAGE_ILLEGAL
            props = self._record_properties(msg.properties)
            if isinstance(props, PutStatus):
                return props
            topics.append(topic)
            queues.append(
                (topic.queues.get(msg.queue_id) or self._queues.queue(topic, msg.queue_id))
                if is_dispatched(msg.sys_flag)
                else None
            )
            properties.append(props)
            total += MIN_RECORD_SIZE + len(msg.body) + len(topic.encoded) + len(props)
        return topics, queues, properties, total

    def _publish_together(
        self,
        messages: Sequence[MessageToStore],
        topics: list[TopicQueues],
        queues: list[ConsumeQueue | None],
        units: dict[ConsumeQueue, bytearray],
        offsets: list[int],
        end: int,
        tags_codes: list[int],
        now: int,
    ) -> None:
        """``_publish`` for ``put_together``'s records: every unit and index entry, then the commit
        log's end, then the arrival listeners (once per queue and distinct tags code) and the flush
        thread."""
        for cq, queue_units in units.items():
            cq.append_units(queue_units)
        index = self._index
        if index is not None:
            for msg, topic, queue, offset in zip(messages, topics, queues, offsets, strict=True):
                if queue is not None and (msg.uniq_key or msg.keys):
                    index.add(topic.name, msg.uniq_key, msg.keys, offset, now)
        self._commitlog.max_offset = end
        if self._listeners:
            for cq in units:
                codes = [code for code, q in zip(tags_codes, queues, strict=True) if q is cq]
                self._notify(cq.topic, cq.queue_id, cq.max_offset, codes)
        flusher = self._flusher
        if flusher is not None and end >= flusher.wake_at:
            flusher.poke()

    def _batch_properties(self, batch: MessageBatch) -> list[bytes] | None:
        """The batch's properties as stored; None if the batch cannot be stored (MESSAGE_ILLEGAL)."""
        properties = batch.properties
        count = len(batch.bodies)
        if (
            not count
            or not len(batch.flags) == len(properties) == len(batch.tags_codes) == count
            or not _owners_in_order(batch.index_owners, len(batch.index_keys), count)
            or not is_dispatched(batch.sys_flag)
            or not _storable_hosts(batch.sys_flag, batch.born_host, batch.store_host)
            or max(map(len, batch.bodies)) > self._max_body
        ):
            return None
        # All at once: a separator between them keeps a cut UTF-8 sequence invalid.
        joined = b"\x02".join(properties)
        try:
            joined.decode()
        except UnicodeDecodeError:
            return None
        if RECORD_CRC_NAME in joined:
            properties = [without_record_crc_property(props) for props in properties]
        if self._append_record_crc:
            properties = [with_record_crc_property(props) for props in properties]
        return properties

    def _append(
        self,
        topic: TopicQueues,
        cq: ConsumeQueue | None,
        source: MessageToStore | MessageBatch,
        flags: Sequence[int],
        bodies: Sequence[bytes | memoryview],
        properties: Sequence[bytes],
        tags_codes: Sequence[int],
        prepared_transaction_offset: int,
        total: int,
        bq: BatchConsumeQueue | None = None,
        inner_count: int = 1,
    ) -> PutResult:
        """The one write path of put and put_batch: the records of *bodies* (*total* bytes; each with
        its flag, properties as stored and tags code, everything else from *source*) encoded, written
        in one piece, then published. *cq* is None for records that get no consume-queue unit
        (prepared and rolled-back transactions), or when the record goes to the batch consume queue
        *bq* (one record, *inner_count* messages, ``put_inner_batch``). The callers have checked the
        lengths and sizes.

        Hot path (bench/store.py, its "put" and "put_batch" rows): a record is its packed head and
        four ready parts, joined once per call into the one copy to the log, which costs a batch less
        per message than packing each record into a buffer field by field.
        """
        count = len(bodies)
        cl = self._commitlog
        seg = cl.cur
        pos = cl.wrote_pos
        # Only an append that must roll a segment, or reserve the next blocks of the segment or of the
        # queue's file, pays for the call (``reserved_to`` is at most the segment's size).
        if (
            seg is None
            or pos + total + 8 > seg.reserved_to
            or (cq is not None and cq.max_offset + count > cq.capacity)
        ):
            room = self._reserve(total, cq, count)
            if isinstance(room, PutStatus):
                return _failure(room)
            seg, pos = room
        # Now in ms, never earlier than the last store time: offset_by_timestamp bisects on it.
        now = _time_ns() // 1_000_000
        if now < self._last_store_ts:
            now = self._last_store_ts
        else:
            self._last_store_ts = now
        first = phys = seg.start + pos
        if cq is not None:
            first_queue_offset = queue_offset = cq.max_offset
        else:
            first_queue_offset = queue_offset = bq.max_offset if bq is not None else 0
        if topic.is_schedule:
            tags_codes = self._delivery_times(properties, now, tags_codes)
        queue_id = source.queue_id
        sys_flag = source.sys_flag
        born_timestamp = source.born_timestamp
        born_host = source.born_host
        store_host = source.store_host
        reconsume_times = source.reconsume_times
        topic_part = topic.record_field
        fixed = MIN_RECORD_SIZE - 1 + len(topic_part)
        parts: list[bytes | memoryview] = []
        units = bytearray()
        offsets: list[int] = []
        try:
            # Indexing rather than zip: half the loop's cost for a single put, the same for a batch.
            for i in range(count):
                body = bodies[i]
                props = properties[i]
                n = len(body)
                size = fixed + n + len(props)
                parts += (
                    pack_record_head(
                        size,
                        MESSAGE_MAGIC_CODE,
                        crc32(body) & 0x7FFFFFFF,
                        queue_id,
                        flags[i],
                        queue_offset,
                        phys,
                        sys_flag,
                        born_timestamp,
                        born_host,
                        now,
                        store_host,
                        reconsume_times,
                        prepared_transaction_offset,
                        n,
                    ),
                    body,
                    topic_part,
                    pack_properties_length(len(props)),
                    props,
                )
                units += _pack_unit(phys, size, tags_codes[i])
                offsets.append(phys)
                phys += size
                queue_offset += 1
        except struct.error:  # a field out of range; nothing was written
            return _failure(PutStatus.MESSAGE_ILLEGAL)
        records = _sealed(parts, offsets, total) if self._append_record_crc else b"".join(parts)
        # How the records reach the commit log. A single record under ASYNC_FLUSH goes through the
        # mapping: a pwrite per put costs a large share of the appends/s of 16 producers. Under
        # SYNC_FLUSH with pwrite, into the blocks the commit log wrote ahead (``CommitLog.warm_ahead``):
        # a record stored through the mapping faults on every page each group commit wrote back, which
        # slows the group commits (bench/store.py, its "16 producers" rows). A batch always goes with
        # one pwrite, and so does an inner batch (one large record: a store into fresh pages of the
        # mapping faults on each, bench/broker_send.py). The record's blocks are reserved
        # (``_reserve``): a store into the mapping cannot die of SIGBUS on a full disk (see MappedFile).
        if count == 1 and not self._sync_flush and bq is None:
            seg.mm[pos : pos + total] = records
        else:
            try:
                seg.write_at(pos, records)
            except OSError as exc:  # nothing is published: the next put writes over these bytes
                return self._write_failed(seg, pos, exc)
        cl.wrote_pos = pos + total
        end = first + total
        if end > cl.warm_at:
            cl.warm_ahead()
        if bq is not None:
            self._publish_batch_unit(topic, bq, source, first, total, now, tags_codes[0], inner_count)
        else:
            self._publish(topic, cq, source, units, offsets, end, now, tags_codes)
        host_hex = self._host_hex.get(store_host) or self._remember_host(store_host)
        if count == 1:
            ids = f"{host_hex}{first:016X}"
        else:  # as the reply lists them
            ids = hex_ids(host_hex, struct.pack(f">{count}q", *offsets), 8)
        return PutResult(_PUT_OK, first, first_queue_offset, count, now, ids, total)

    def _publish(
        self,
        topic: TopicQueues,
        cq: ConsumeQueue | None,
        source: MessageToStore | MessageBatch,
        units: bytearray,
        offsets: list[int],
        end: int,
        now: int,
        tags_codes: Sequence[int],
    ) -> None:
        """The publish step of ``_append``, for records written at commit-log *offsets* up to *end*:
        their consume-queue *units* and index entries, then the commit log's end (last: the flush
        thread and readers rely on everything below it being complete), then the arrival listeners
        and the flush thread."""
        cl = self._commitlog
        if cq is not None:
            cq.append_units(units)
            index = self._index
            if index is not None:
                if isinstance(source, MessageToStore):
                    # A message's names as it carries them: IndexService.add hashes them inline.
                    if source.uniq_key or source.keys:
                        index.add(topic.name, source.uniq_key, source.keys, offsets[0], now)
                elif source.index_owners:  # checked by _owners_in_order: no IndexError
                    owners = source.index_owners
                    index.add_keys(topic.name, source.index_keys, [offsets[i] for i in owners], now)
        cl.max_offset = end
        if cq is not None and self._listeners:
            self._notify(topic.name, cq.queue_id, cq.max_offset, tags_codes)
        flusher = self._flusher
        if flusher is not None and end >= flusher.wake_at:
            flusher.poke()

    def _publish_batch_unit(
        self,
        topic: TopicQueues,
        bq: BatchConsumeQueue,
        source: MessageToStore | MessageBatch,
        offset: int,
        size: int,
        now: int,
        tags_code: int,
        count: int,
    ) -> None:
        """``_publish`` for the one record of ``put_inner_batch``: its batch unit and index entry, then the
        commit log's end, the arrival listeners and the flush thread."""
        bq.append(offset, size, tags_code, now, count)
        index = self._index
        if index is not None and isinstance(source, MessageToStore) and (source.uniq_key or source.keys):
            index.add(topic.name, source.uniq_key, source.keys, offset, now)
        end = offset + size
        self._commitlog.max_offset = end
        if self._listeners:
            self._notify(topic.name, bq.queue_id, bq.max_offset, (tags_code,))
        flusher = self._flusher
        if flusher is not None and end >= flusher.wake_at:
            flusher.poke()

    def _dispatch_batch_record(
        self, rec: DecodedRecord, retire: Callable[[list[MappedFile]], None] | None = None
    ) -> Dispatched | None:
        """Give *rec* its batch unit if its topic is BatchCQ (recovery, a slave): WRITTEN, or PRESENT when
        the queue has that very unit; None when *rec* is not such a record. A unit from the record's
        offset on that differs is cut with everything after it. Whether a topic is BatchCQ is the
        store's to know (declared, or found on disk), never a record's flag: a record's flag only says
        how many offsets its unit covers."""
        if rec.topic not in self._batch_topics:
            return None
        count = _inner_count(rec) if rec.sys_flag & INNER_BATCH_FLAG else 1
        bq = self._batch_queues.queue(rec.topic, rec.queue_id)
        base = rec.queue_offset
        if base < bq.max_offset and bq.units:
            idx = bq.unit_index(base)
            if idx < 0:
                bq.restart_at(base, retire)
            else:
                unit = bq.unit(idx)
                if unit[0] == rec.commitlog_offset and unit[4] == base:
                    return Dispatched.PRESENT
                bq.truncate_units(idx, retire)
        if base != bq.max_offset or not bq.units:
            bq.restart_at(base, retire)  # the log no longer holds the queue's earlier records
        bq.prepare()
        bq.append(
            rec.commitlog_offset, rec.total_size, self._recovered_tags_code(rec), rec.store_timestamp, count
        )
        return Dispatched.WRITTEN

    def _recover_batch_queues(self) -> None:
        """Drop batch units beyond the recovered commit log's end, make the rest durable, and start each
        queue at its first unit the log still holds."""
        end = self._commitlog.max_offset
        for bq in self._batch_queues.all_queues():
            bq.adjust_min(self._commitlog.min_offset)
            dropped = bq.truncate_to_commitlog(end)
            if dropped:
                log.warning(
                    "recovery: dropping %d batch unit(s) of %s/%d: beyond the commit log's end",
                    dropped,
                    bq.topic,
                    bq.queue_id,
                )
            bq.sync_all()

    def _write_failed(self, seg: MappedFile, pos: int, exc: OSError) -> PutResult:
        """A put whose records could not all be written: refused, nothing published. The first
        header is zeroed too (best effort), so that recovery after a crash cannot take what did get
        written for records (a cut inside the properties leaves a valid body CRC)."""
        with contextlib.suppress(OSError):
            seg.write_at(pos, bytes(8))
        return _failure(self._refuse_for(exc, f"cannot write to the commit log at {seg.start + pos}"))

    def _reserve(
        self,
        size: int,
        cq: ConsumeQueue | None,
        units: int,
        more_units: Iterable[tuple[ConsumeQueue, int]] = (),
    ) -> tuple[MappedFile, int] | PutStatus:
        """The segment and position where ``size`` bytes of records go, rolling to a new segment
        when they do not fit, with their blocks reserved, and the consume-queue room for *units*
        (and, for ``put_together``, for each queue's count in *more_units*).
        All file creation and reservation happens before the first byte is written, so a failure
        (disk full) leaves nothing half done."""
        cl = self._commitlog
        if size + 8 > cl.segment_size:  # a segment always keeps room for the 8-byte blank filler
            return PutStatus.MESSAGE_ILLEGAL
        seg = cl.cur
        assert seg is not None
        pos = cl.wrote_pos
        # A new file or reservation step is when to look at the disk between clean passes (cheap:
        # once per step), so a fast producer is refused near the warning level rather than at a full
        # disk.
        self._check_disk()
        if not self._accepting:
            return PutStatus.SERVICE_NOT_AVAILABLE
        try:
            if cq is not None and cq.max_offset + units > cq.capacity:
                cq.prepare(units)
            for other, count in more_units:
                if other.max_offset + count > other.capacity:
                    other.prepare(count)
            if pos + size + 8 > seg.size:
                seg = cl.roll()
                pos = 0
            if pos + size + 8 > seg.reserved_to:  # the blank filler's 8 bytes too, for ``roll``
                seg.reserve(pos + size + 8)
        except OSError as exc:
            return self._refuse_for(exc, "no room for the store files to grow")
        if self._out_of_space_logged:
            self._out_of_space_logged = False
            log.warning("there is room for store files again; accepting writes")
        return seg, pos

    def _refuse_for(self, exc: OSError, what: str) -> PutStatus:
        """The answer to a put that failed with *exc*. Out of space (ENOSPC, EDQUOT): writes are
        refused (SERVICE_NOT_AVAILABLE, what RocketMQ answers on a full disk) until the next look at
        the disk, which a refused put takes after ``_REFUSED_RECHECK_S``; logged once, not for every
        put. No file descriptor left: CREATE_MAPPED_FILE_FAILED, for this put only. Any other error:
        UNKNOWN_ERROR."""
        if exc.errno in OUT_OF_DESCRIPTORS:
            log.error("%s: %s; raise the broker's RLIMIT_NOFILE", what, exc)
            return PutStatus.CREATE_MAPPED_FILE_FAILED
        if exc.errno not in _OUT_OF_SPACE:
            log.error("%s: %s", what, exc)
            return PutStatus.UNKNOWN_ERROR
        ratio = self._check_disk()
        # Said the same way for every out-of-space error (ENOSPC, EDQUOT, a write cut short), with how
        # full the disk is when it can be measured.
        used = f"{ratio:.1%} of {self._root} used" if ratio >= 0 else f"{self._root} has no space left"
        self._out_of_space = f"disk full: {used}; {what}"
        self._accepting = False
        if not self._out_of_space_logged:
            self._out_of_space_logged = True
            log.warning("%s (%s); refusing writes", self._out_of_space, exc.strerror or exc)
        return PutStatus.SERVICE_NOT_AVAILABLE

    def _check_disk(self) -> float:
        """Measure the disk; refuse or accept writes accordingly (the disk guard). An earlier
        refusal for lack of space is dropped: the next put that needs room tries again."""
        self._last_disk_check = time.monotonic()
        ratio = self._cleaner.guard.check()
        self._out_of_space = None
        self._update_accepting()
        return ratio

    def _writes_resumed(self) -> bool:
        """A refused put's second chance: has space come back since the last look (at most one
        look per ``_REFUSED_RECHECK_S``)?"""
        if not self._running or time.monotonic() - self._last_disk_check < _REFUSED_RECHECK_S:
            return False
        self._check_disk()
        return self._accepting

    async def wait_flushed(self, commitlog_end_offset: int) -> bool:
        """True once the commit log is on disk up to *commitlog_end_offset* (normally
        ``PutResult.commitlog_end_offset``); False after ``sync_flush_timeout_ms``. Concurrent
        waiters share fsyncs (group commit); the fsync runs on the flush thread."""
        return await self.when_flushed(commitlog_end_offset)

    def when_flushed(self, commitlog_end_offset: int) -> asyncio.Future[bool]:
        """``wait_flushed`` as a future of the running loop, done already when the log is on disk
        that far (or cannot get there): for a caller that answers in a callback rather than a task."""
        flusher = self._flusher
        if flusher is None:  # not started, or shut down
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            done.set_result(self._commitlog.flushed_offset >= commitlog_end_offset)
            return done
        return flusher.when_flushed(commitlog_end_offset)

    def add_arrival_listener(self, cb: ArrivalListener) -> None:
        """``cb(topic, queue_id, new_max_offset, tags_code)`` runs on the writer's thread after each
        put (for a batch: once per distinct tags code). Exceptions are logged, not raised."""
        self._listeners = [*self._listeners, cb]

    def remove_arrival_listener(self, cb: ArrivalListener) -> None:
        """Stop calling *cb* (added with ``add_arrival_listener``). A put being notified on the writer's
        thread meanwhile may still call it once."""
        # A new list rather than a removal in place: the writer's thread may be iterating the old one.
        self._listeners = [listener for listener in self._listeners if listener != cb]

    def _notify(self, topic: str, queue_id: int, max_offset: int, tags_codes: Sequence[int]) -> None:
        # One call per distinct tags code is enough to wake every pull the records can satisfy.
        for tags_code in dict.fromkeys(tags_codes):
            for cb in self._listeners:
                try:
                    cb(topic, queue_id, max_offset, tags_code)
                except Exception:
                    log.exception("arrival listener %r failed", cb)

    def _remember_host(self, host: bytes) -> str:
        if len(self._host_hex) > 64:  # a broker has one or two store hosts; stay bounded anyway
            self._host_hex.clear()
        hex_ = self._host_hex[host] = host.hex().upper()
        return hex_

    def _delivery_times(
        self, properties: Sequence[bytes], store_timestamp: int, fallbacks: Sequence[int]
    ) -> list[int]:
        """``_delivery_time`` of each of the records a put appends to SCHEDULE_TOPIC_XXXX."""
        return [
            self._delivery_time(props.decode(), store_timestamp, fallback)
            for props, fallback in zip(properties, fallbacks, strict=True)
        ]

    def _delivery_time(self, properties: str, store_timestamp: int, fallback: int) -> int:
        """Tags code of a SCHEDULE_TOPIC_XXXX unit: when the delay of its DELAY level ends."""
        level_text = decode_properties(properties).get("DELAY", "")
        try:
            level = int(level_text)
        except ValueError:
            return fallback
        level = min(level, len(self._delays))
        return store_timestamp + self._delays[level - 1] if level > 0 else fallback

    def _recovered_tags_code(self, rec: DecodedRecord, props: dict[str, str] | None = None) -> int:
        """The tags code the broker gave on put, recomputed from the record (recovery, a slave);
        *props* are its properties if the caller decoded them already."""
        tag = (decode_properties(rec.properties) if props is None else props).get("TAGS")
        code = java_string_hash(tag) if tag else 0
        if rec.topic == SCHEDULE_TOPIC:
            code = self._delivery_time(rec.properties, rec.store_timestamp, code)
        elif rec.topic == TIMER_TOPIC:  # the broker gives a timer unit its delivery time
            with contextlib.suppress(KeyError, ValueError):
                code = int((decode_properties(rec.properties) if props is None else props)[_TIMER_OUT_MS])
        return code

    # -- replication: a master's reads, a slave's write path -----------------------------------

    def replica_end(self) -> int:
        """Where the commit-log bytes received end, a partial trailing record included: what a slave
        reports to its master, and the one offset ``append_replica`` takes next. On a master it is
        the end ``ha_readable`` ships to."""
        cl = self._commitlog
        cur = cl.cur
        written = cl.max_offset if cur is None else cur.start + cl.wrote_pos
        return written + len(self._replica_partial)

    def ha_readable(self, offset: int, limit: int) -> memoryview:
        """Commit-log bytes from *offset* for a slave: a view of at most *limit* bytes, within one
        segment. A sealed segment is readable to its end, its blank filler and the zeros after it
        included (RocketMQ ships them, so a slave's offsets stay its master's); the last one up to
        the published end. Empty when nothing is new at *offset*. ``ReplicaOffsetError`` below the
        log's first offset or beyond its end.

        The view is of the mapping, not a copy: write it and drop it at once (a segment that
        retention deletes meanwhile is unmapped only once no view is left)."""
        cl = self._commitlog
        if offset < cl.min_offset:
            raise ReplicaOffsetError(
                f"commit-log offset {offset} is below this store's first offset {cl.min_offset} "
                "(the segments before it were deleted by retention)"
            )
        end = self._shippable_end()
        if offset > end:
            raise ReplicaOffsetError(f"commit-log offset {offset} is beyond this store's end {end}")
        if offset == end or limit <= 0:
            return memoryview(b"")
        seg = cl.segment_for(offset)
        assert seg is not None  # min_offset <= offset < end <= the last segment's end
        readable = end - seg.start if seg is cl.segments[-1] else seg.size
        rel = offset - seg.start
        return seg.view[rel : min(readable, rel + limit)]

    def ha_start_for_empty_slave(self) -> int:
        """Where a slave that reports 0 (an empty store) starts: the start of the segment holding
        the log's end, as RocketMQ's master does (a new slave gets the last segment, not the
        history)."""
        end = self._shippable_end()
        seg = self._commitlog.segment_for(end)
        return seg.start if seg is not None else end

    def _shippable_end(self) -> int:
        """The end of what a master ships: the published end, or the start of the last segment when
        a roll created it and no record is in it yet (the segments before it are sealed)."""
        cl = self._commitlog
        return max(cl.max_offset, cl.segments[-1].start) if cl.segments else cl.max_offset

    def append_replica(self, offset: int, data: bytes | memoryview) -> int:
        """A slave's one write path: commit-log bytes its master sent from *offset* on. *offset* must
        be ``replica_end()``; an empty store begins at any segment start (the master's last segment).
        The whole records the bytes complete are written as they are, checked as recovery checks
        them and dispatched: each one's consume-queue unit at the queue offset it carries (a queue
        starts at its first record's offset), its index keys; a blank filler moves on to the next
        segment once all of it is here. Then the end is published, arrival listeners and the
        flusher are woken. A partial trailing record waits in memory for the next chunk (puts are
        refused meanwhile). Returns the new ``replica_end()``.

        ``ReplicaOffsetError`` for an offset that is not the end, a chunk crossing a segment end,
        or a damaged record (the bytes from that record on are dropped; the records before it are
        kept). ``StoreError`` when the store refuses writes (a full disk, as a put is refused):
        ``replica_end()`` then says where to resume.
        """
        cl = self._commitlog
        end = self.replica_end()
        size = len(data)
        begin = offset != end and end == 0 and cl.max_offset == 0
        if offset != end and not begin:
            raise ReplicaOffsetError(
                f"the master sends commit-log bytes from offset {offset}, but this store's commit log "
                f"ends at {end}: the two logs do not line up"
            )
        if begin and offset % cl.segment_size:
            raise ReplicaOffsetError(
                f"the master's commit log starts at offset {offset}, which is not a segment start for "
                f"this store's segments of {cl.segment_size} bytes: master and slave must use the same "
                "mappedFileSizeCommitLog"
            )
        if not size:
            return end
        refusal = self._replica_write_refusal()
        if refusal is not None:
            raise StoreError(refusal)
        seg = cl.cur
        partial = self._replica_partial
        if not begin and seg is not None and end < seg.end:
            if end + size > seg.end:
                raise ReplicaOffsetError(
                    f"a chunk of {size} bytes at offset {offset} crosses the end of commit-log segment "
                    f"{seg.path.name} at {seg.end}: the master's mappedFileSizeCommitLog differs from "
                    f"this store's ({seg.size} bytes)"
                )
        elif size > cl.segment_size:
            raise ReplicaOffsetError(
                f"a chunk of {size} bytes at offset {offset} is larger than this store's segments "
                f"({cl.segment_size} bytes): the master's mappedFileSizeCommitLog differs"
            )
        kept = len(partial)
        try:
            if begin:
                self._begin_replica(offset)
            elif seg is None or end >= seg.end:
                cl.roll()  # the segment is complete (``end`` is its end): nothing to fill
            seg = cl.cur
            assert seg is not None
            pos = cl.wrote_pos
            # Only whole records reach the file: after a kill -9, recovery cannot take a record cut
            # inside its properties (which no CRC covers) for a whole one.
            partial += data
            whole = whole_records(partial, seg.size - pos)
            if whole:
                if pos + whole > seg.reserved_to:
                    self._check_disk()
                    refusal = self._replica_write_refusal()
                    if refusal is not None:
                        raise StoreError(refusal)
                    seg.reserve(pos + whole)
                # The slice itself is released, also when the write raises: a traceback keeping it
                # would leave ``partial`` exported, and resizing it below would fail.
                with memoryview(partial)[:whole] as mv:
                    seg.write_at(pos, mv)
        except (OSError, StoreError) as exc:
            del partial[kept:]  # the chunk is refused: nothing of it is kept
            if isinstance(exc, StoreError):
                raise
            raise StoreError(self._refusal_for(exc, f"cannot write to the commit log at {offset}")) from exc
        del partial[:whole]
        cl.wrote_pos = pos + whole
        self._dispatch_replica(seg.start + pos + whole)
        self._update_replica_partial()
        return self.replica_end()

    # -- epochs and truncation (failover) ---------------------------------------------------------

    def epochs(self) -> list[EpochEntry]:
        """This store's history: which epoch (mastership) began writing at which commit-log offset,
        oldest first (``<root>/epochFileCheckpoint``)."""
        return list(self._epochs)

    def begin_epoch(self, epoch: int) -> EpochEntry:
        """Start acting as master in *epoch*: a partial trailing record a former master was sending is
        dropped, and (epoch, the log's end) is appended to the history and written. ``ValueError``
        unless *epoch* exceeds the last epoch; ``StoreError`` when the store is not running or the
        epoch file cannot be written."""
        self._require_running()
        if self._epochs and epoch <= self._epochs[-1].epoch:
            raise ValueError(
                f"epoch {epoch} does not exceed this store's last epoch {self._epochs[-1].epoch}"
            )
        if epoch < 1:
            raise ValueError(f"epoch {epoch} is below 1")
        if self._replica_partial:
            log.info(
                "dropping the %d bytes of a partial record at commit-log offset %d: its master will not "
                "send the rest",
                len(self._replica_partial),
                self.replica_end() - len(self._replica_partial),
            )
            self._replica_partial.clear()
            self._update_replica_partial()
        end = self.replica_end()
        # Entries beyond the end were adopted from a master whose bytes never arrived.
        entry = EpochEntry(epoch, end)
        self._save_epochs([*clipped(self._epochs, end), entry])
        log.info("epoch %d begins at commit-log offset %d", epoch, end)
        return entry

    def adopt_epochs(self, entries: Sequence[EpochEntry]) -> None:
        """Take *entries*, a master's history, as this store's (a slave after its handshake, once its
        log agrees with the master's). ``ValueError`` unless the epochs increase and the start
        offsets do not decrease; ``StoreError`` as for ``begin_epoch``."""
        self._require_running()
        history = list(entries)
        check_history(history)
        if history != self._epochs:
            self._save_epochs(history)

    def truncate_to(self, offset: int) -> int:
        """Cut everything from commit-log *offset* on: a slave's tail its new master does not have.
        *offset* is a record boundary (a record's start, a segment's start or the log's end) between
        the log's first offset and ``replica_end()``. The commit log, the consume queues (their max
        offsets: the next queue offset of each queue), the index and the epoch file (entries
        beginning beyond *offset*) follow. A partial record held goes too. Returns the bytes removed.

        Safe against a crash at any point: the next start recovers either the store as it was or
        the cut one (``CommitLog.truncate_to`` says how). ``ValueError`` for an offset that is not a
        record boundary in range; ``StoreError`` when the store is not running, a sync failed
        before, or the files cannot be written."""
        self._require_running()
        failure = self.flush_failure or self._truncation_failure
        if failure is not None:
            raise StoreError(failure)
        cl = self._commitlog
        end = self.replica_end()
        written = end - len(self._replica_partial)
        if offset == end:
            return 0
        if not cl.min_offset <= offset <= written or not is_record_boundary(cl, offset):
            raise ValueError(
                f"cannot truncate to commit-log offset {offset}: not a record boundary between the "
                f"log's first offset {cl.min_offset} and its end {end}"
            )
        self._replica_partial.clear()
        units = entries = 0
        if offset < written:
            flusher = self._flusher
            assert flusher is not None  # running
            try:
                with flusher.truncating(offset):
                    self._retire_files(cl.truncate_to(offset))
                    for cq in self._queues.all_queues():
                        units += cq.truncate_to_commitlog(offset, self._retire_files)
                    for bq in self._batch_queues.all_queues():
                        units += bq.truncate_to_commitlog(offset, self._retire_files)
                    self._queues.stale_from = min(self._queues.stale_from, offset)
                    if self._index is not None:
                        entries = self._index.truncate_from(offset)
            except OSError as exc:
                # Part of the cut may be on disk: no write may go on from a log of unknown shape. The
                # next start finishes the cut, or finds none (see CommitLog.truncate_to).
                self._truncation_failure = (
                    f"the store could not truncate its commit log to {offset} ({exc.strerror or exc}) "
                    "and accepts no more messages; restart the broker"
                )
                log.error("%s", self._truncation_failure)
                self._update_accepting()
                raise StoreError(self._truncation_failure) from exc
        kept = clipped(self._epochs, offset)
        log.warning(
            "truncated the commit log from %d to %d: %d bytes, %d consume-queue unit(s), %d index "
            "entries removed%s",
            end,
            offset,
            end - offset,
            units,
            entries,
            f"; epochs {self._epochs[len(kept) :]} dropped" if kept != self._epochs else "",
        )
        if kept != self._epochs:
            self._save_epochs(kept)
        self._update_replica_partial()
        return end - offset

    def _save_epochs(self, entries: list[EpochEntry]) -> None:
        try:
            self._epoch_file.write(entries)
        except OSError as exc:
            raise StoreError(f"cannot write the epoch file: {exc.strerror or exc}") from exc
        self._epochs = entries

    def _require_running(self) -> None:
        if not self._running:
            raise StoreError("the store is not running")

    def _begin_replica(self, start: int) -> None:
        """An empty store's log begins at *start*, its master's segment start."""
        dropped = self._commitlog.begin_at(start)
        for seg in dropped:
            seg.unlink()
        self._retire_files(dropped)
        log.info("replica: the commit log begins at offset %d, the master's segment start", start)

    def _dispatch_replica(self, written_end: int) -> None:
        """Dispatch the records completed by a chunk written up to *written_end*, publish their end,
        and refuse what cannot be dispatched (see ``append_replica``)."""
        cl = self._commitlog
        index = self._index
        listeners = self._listeners
        arrived: dict[ConsumeQueue, list[int]] = {}
        start = cl.max_offset
        if self._record_crc is RecordCrcCheck.OFF:
            start = self._dispatch_plain_records(written_end, arrived)
            if start == written_end:
                self._publish_replica(start, arrived)
                return
        at = start  # the record being dispatched

        def on_record(rec: DecodedRecord) -> None:
            nonlocal at
            at = rec.commitlog_offset
            if not is_dispatched(rec.sys_flag):
                return
            if rec.sys_flag & INNER_BATCH_FLAG and rec.topic not in self._batch_topics:
                # Only the master's inner-batch path sets the flag (it clears a client's), so the record
                # says its topic is BatchCQ before the master's topic table reaches this slave.
                self.declare_batch_topic(rec.topic)
            if self._batch_topics:
                batch_done = self._dispatch_batch_record(rec, self._retire_files)
                if batch_done is not None:
                    self._replicated_batch_record(rec, batch_done)
                    return
            props = decode_properties(rec.properties)  # once, for the tags code and the index
            tags_code = self._recovered_tags_code(rec, props)
            done, cq = dispatch_unit(self._queues, rec, True, lambda _: tags_code, self._retire_files)
            if done is not Dispatched.WRITTEN or cq is None:
                return
            if index is not None:
                index.add(
                    rec.topic,
                    props.get("UNIQ_KEY", ""),
                    props.get("KEYS", ""),
                    rec.commitlog_offset,
                    rec.store_timestamp,
                )
            if listeners:
                arrived.setdefault(cq, []).append(tags_code)
            if rec.store_timestamp > self._last_store_ts:
                self._last_store_ts = rec.store_timestamp

        try:
            valid_end, why, problem = walk_records(cl, start, written_end, on_record, self._record_crc)
        except OSError as exc:  # a consume-queue file could not be created or grown
            self._publish_replica(at, arrived)
            self._cut_replica(at)
            raise StoreError(self._refusal_for(exc, "no room for the store files to grow")) from exc
        self._publish_replica(valid_end, arrived)
        if why is Stop.END:
            return
        self._cut_replica(valid_end)
        if why is Stop.MISFIT:
            raise ReplicaOffsetError(
                f"the master's record at commit-log offset {valid_end} does not fit this store's "
                f"segments: {problem}; master and slave must use the same mappedFileSizeCommitLog "
                f"(this store's is {cl.segment_size} bytes)"
            )
        if why is Stop.ZEROS:
            problem = "zero bytes where a record should start"
        elif why is Stop.PARTIAL:  # not after whole_records: only whole records were written
            problem = "an incomplete record"
        raise ReplicaOffsetError(
            f"the master's bytes at commit-log offset {valid_end} are not a valid record: {problem}"
        )

    def _dispatch_plain_records(self, written_end: int, arrived: dict[ConsumeQueue, list[int]]) -> int:
        """Dispatch the leading records up to *written_end* that ``scan_plain_records`` takes, each
        queue's units in one append, into *arrived*; return where they end (``walk_records`` takes the
        rest). Nothing is dispatched when a queue file cannot be created or grown: the record-by-record
        walk then meets that and keeps the records before it."""
        start = self._commitlog.max_offset
        found = scan_plain_records(
            self._commitlog, start, written_end, self._queues, _TIMED_TOPICS, self._batch_topics
        )
        units = found.units
        try:
            for cq, packed in units.items():
                cq.prepare(len(packed) // CQ_UNIT_SIZE)
        except OSError:
            return start
        for cq, packed in units.items():
            cq.append_units(packed)
        index = self._index
        if index is not None and found.index_entries:
            index.add_records(found.index_entries)
        if self._listeners:
            arrived.update(found.tags_codes)
        if found.last_store_timestamp > self._last_store_ts:
            self._last_store_ts = found.last_store_timestamp
        return found.end

    def _replicated_batch_record(self, rec: DecodedRecord, done: Dispatched) -> None:
        """A slave's bookkeeping for a record of a BatchCQ topic: its index entry, the arrival listeners
        (a slave serves pulls), the last store time."""
        if done is not Dispatched.WRITTEN:
            return
        index = self._index
        if index is not None:
            props = decode_properties(rec.properties)
            uniq_key, keys = props.get("UNIQ_KEY", ""), props.get("KEYS", "")
            if uniq_key or keys:
                index.add(rec.topic, uniq_key, keys, rec.commitlog_offset, rec.store_timestamp)
        bq = self._batch_queues.get(rec.topic, rec.queue_id)
        if self._listeners and bq is not None:
            self._notify(rec.topic, rec.queue_id, bq.max_offset, (0,))
        if rec.store_timestamp > self._last_store_ts:
            self._last_store_ts = rec.store_timestamp

    def _publish_replica(self, end: int, arrived: dict[ConsumeQueue, list[int]]) -> None:
        """``_publish`` for replicated records: their units and index entries are written; move the
        commit log's end to *end*, then wake arrival listeners and the flusher."""
        cl = self._commitlog
        if end <= cl.max_offset:
            return
        cl.max_offset = end
        for cq, tags_codes in arrived.items():
            self._notify(cq.topic, cq.queue_id, cq.max_offset, tags_codes)
        flusher = self._flusher
        if flusher is not None and end >= flusher.wake_at:
            flusher.poke()

    def _cut_replica(self, end: int) -> None:
        """Drop what a refused chunk wrote after *end*, and the partial record held (best effort:
        recovery would drop it too)."""
        with contextlib.suppress(OSError):
            self._commitlog.cut_to(end)
        self._replica_partial.clear()
        self._update_replica_partial()

    def _update_replica_partial(self) -> None:
        """Puts are refused while a partial record is held (``write_refusal``)."""
        if bool(self._replica_partial) == self._accepting:
            self._update_accepting()

    def _replica_write_refusal(self) -> str | None:
        """Why ``append_replica`` is refused right now, or None: a put's reasons, looked at again
        as a refused put does (at most once per ``_REFUSED_RECHECK_S``)."""
        recheck_due = time.monotonic() - self._last_disk_check >= _REFUSED_RECHECK_S
        if self._running and not self._accepting and recheck_due:
            self._check_disk()
        return self._writes_refused_because()

    def _writes_refused_because(self) -> str | None:
        """Why no write can go to the files now (puts and a slave's chunks alike), or None."""
        if not self._running:
            return "the store is not running (shutting down)"
        return (
            self.flush_failure
            or self._truncation_failure
            or self._cleaner.guard.refusal
            or self._out_of_space
        )

    def _refusal_for(self, exc: OSError, what: str) -> str:
        """``_refuse_for``'s refusal as the text of a ``StoreError``."""
        self._refuse_for(exc, what)
        return self._out_of_space or f"{what}: {exc.strerror or exc}"

    # -- reading -------------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.loaded_queue(topic, queue_id)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags_codes: frozenset[int] | None = None,
        max_bytes: int = 256 * 1024,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetResult:
        """Stored records from queue offset *offset* on; statuses and ``next_begin_offset`` follow
        docs/protocol.md#pull-results. Units filtered out by *tags_codes*, and records *record_filter* returns
        False for (the broker's SQL92 filter, as RocketMQ's isMatchedByCommitLog), still advance
        ``next_begin_offset``. In a BatchCQ topic, *max_count* counts messages and whole records are
        returned (``_get_from_batch_queue``)."""
        if self._batch_topics and topic in self._batch_topics:
            return self._get_from_batch_queue(
                topic, queue_id, offset, max_count, tags_codes, max_bytes, record_filter
            )
        cq = self._queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off = cq.min_offset
        max_off = cq.max_offset
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        units = cq.read_units(offset, max(_MAX_SCAN_UNITS, max_count))
        if units is None:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.next_file_start(offset), min_off, max_off)
        cl = self._commitlog
        seg = cl.cur
        if seg is None:
            return GetResult(GetStatus.MESSAGE_WAS_REMOVING, offset, min_off, max_off)
        status, scanned, buffers, count, total = _take(
            cl, seg, units, max_count, max_bytes, tags_codes, record_filter
        )
        return GetResult(status, offset + scanned, min_off, max_off, buffers, count, total)

    def _get_from_batch_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags_codes: frozenset[int] | None,
        max_bytes: int,
        record_filter: Callable[[memoryview], bool] | None,
    ) -> GetResult:
        """``get_messages`` from a batch consume queue: the whole records from the one covering
        *offset* on (RocketMQ 5 returns a batch whole; the client drops the messages before *offset*),
        up to *max_count* messages and *max_bytes* (at least one record), ``next_begin_offset`` past the
        last record looked at. Filters apply to records as RocketMQ's do: the unit's tags code (the
        record's own TAGS) and the record's properties, not those of the messages inside a batch."""
        bq = self._batch_queues.get(topic, queue_id)
        if bq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off = bq.min_offset
        max_off = bq.max_offset
        if not bq.units:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, max_off, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        cl = self._commitlog
        idx = bq.unit_index(offset)
        last = min(bq.units, idx + max(_MAX_SCAN_UNITS, max_count))
        buffers: list[memoryview] = []
        count = total = 0
        next_offset = offset
        gone = False
        seg: MappedFile | None = None
        run_start = run_end = -1
        while idx < last:
            coff, size, tags_code, _ts, base, inner = bq.unit(idx)
            if count and (count + inner > max_count or total + size > max_bytes):
                break
            idx += 1
            next_offset = base + inner
            if tags_codes is not None and tags_code not in tags_codes:
                continue
            if seg is None or not seg.start <= coff < seg.end:
                found = cl.segment_for(coff)
                if found is None:
                    gone = True
                    continue
                if run_end != run_start and seg is not None:
                    buffers.append(seg.view[run_start - seg.start : run_end - seg.start])
                seg = found
                run_start = run_end = coff
            record = seg.view[coff - seg.start : coff - seg.start + size]
            if record_filter is not None and not record_filter(record):
                continue
            if coff != run_end:
                if run_end != run_start:
                    buffers.append(seg.view[run_start - seg.start : run_end - seg.start])
                run_start = coff
            run_end = coff + size
            count += inner
            total += size
        if seg is not None and run_end != run_start:
            buffers.append(seg.view[run_start - seg.start : run_end - seg.start])
        status = _FOUND if count else GetStatus.MESSAGE_WAS_REMOVING if gone else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, min_off, max_off, buffers, count, total)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written; 0 for an unknown queue."""
        if self._batch_topics and topic in self._batch_topics:
            bq = self._batch_queues.get(topic, queue_id)
            return bq.max_offset if bq is not None else 0
        cq = self._queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        if self._batch_topics and topic in self._batch_topics:
            bq = self._batch_queues.get(topic, queue_id)
            return bq.min_offset if bq is not None else 0
        cq = self._queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def queue_unit(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """``(commit-log offset, size, tags code)`` of one consume-queue unit; None outside
        [min, max) or when its file is missing. The broker's delivery of delayed messages reads the
        delivery times of SCHEDULE_TOPIC_XXXX with it. In a BatchCQ topic, the unit of the record
        holding the message at *offset*."""
        if self._batch_topics and topic in self._batch_topics:
            bq = self._batch_queues.get(topic, queue_id)
            if bq is None or not bq.min_offset <= offset < bq.max_offset:
                return None
            coff, size, tags_code, _ts, _base, _count = bq.unit(bq.unit_index(offset))
            return coff, size, tags_code
        cq = self._queue(topic, queue_id)
        return cq.unit(offset) if cq is not None else None

    def _store_time(self, cq: ConsumeQueue, index: int) -> int:
        unit = cq.unit(index)
        return self._commitlog.store_timestamp_at(unit[0]) if unit is not None else -1

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Queue offset of the first message stored at *timestamp_ms*, else of the nearer neighbour
        (the earlier one on a tie); the last message's offset if all are older; 0 without data
        (docs/protocol.md#search-by-timestamp)."""
        if self._batch_topics and topic in self._batch_topics:
            return self._batch_offset_by_timestamp(topic, queue_id, timestamp_ms)
        cq = self._queue(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return 0
        lo = cq.min_offset
        a = self.first_offset_at(topic, queue_id, timestamp_ms)
        if a == cq.max_offset:
            return a - 1
        right = self._store_time(cq, a)
        if right == timestamp_ms or a == lo:
            return a
        left = self._store_time(cq, a - 1)
        return a if right - timestamp_ms < timestamp_ms - left else a - 1

    def _batch_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """``offset_by_timestamp`` over batch units: the messages of a record share its store time."""
        bq = self._batch_queues.get(topic, queue_id)
        if bq is None or not bq.units:
            return 0
        a = bq.first_unit_at(timestamp_ms)
        if a == bq.units:
            return bq.max_offset - 1
        right = bq.unit(a)[3]
        if right == timestamp_ms or a == 0:
            return bq.bases[a]
        left_unit = bq.unit(a - 1)
        if right - timestamp_ms < timestamp_ms - left_unit[3]:
            return bq.bases[a]
        return left_unit[4] + left_unit[5] - 1

    def first_offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Queue offset of the first message stored at or after *timestamp_ms*; the queue's max offset
        if all are older (0 for an unknown queue). Binary search: store times never decrease along a
        queue."""
        if self._batch_topics and topic in self._batch_topics:
            bq = self._batch_queues.get(topic, queue_id)
            if bq is None:
                return 0
            a = bq.first_unit_at(timestamp_ms)
            return bq.bases[a] if a < bq.units else bq.max_offset
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        low, high = cq.min_offset, cq.max_offset
        while low < high:
            mid = (low + high) // 2
            if self._store_time(cq, mid) < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first readable message; -1 if it has none."""
        return self.store_time_at(topic, queue_id, self.min_offset(topic, queue_id))

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        if self._batch_topics and topic in self._batch_topics:
            bq = self._batch_queues.get(topic, queue_id)
            if bq is None or not bq.min_offset <= offset < bq.max_offset:
                return -1
            return bq.unit(bq.unit_index(offset))[3]
        cq = self._queue(topic, queue_id)
        return self._store_time(cq, offset) if cq is not None else -1

    def message_at(self, commitlog_offset: int) -> memoryview | None:
        """The whole record at *commitlog_offset* (VIEW_MESSAGE_BY_ID); None if none starts there."""
        return self._commitlog.record_at(commitlog_offset)

    def query_messages(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, unique: bool = False
    ) -> QueryResult:
        """Records of *topic* stored in [begin_ms, end_ms] whose UNIQ_KEY (*unique*) or one of whose
        KEYS entries is *key*, newest first, at most *max_num* (QUERY_MESSAGE). Nothing while
        ``message_index_enable`` is off."""
        index = self._index
        if index is None:
            return QueryResult()
        return index.query(self._commitlog, topic, key, max_num, begin_ms, end_ms, unique)

    def queue_ids(self, topic: str) -> list[int]:
        if self._batch_topics and topic in self._batch_topics:
            return self._batch_queues.queue_ids(topic)
        t = self._topics.get(topic)
        return sorted(t.queue_ids()) if t is not None else []

    def delete_topic(self, topic: str) -> None:
        """Drop the topic's consume queues and their files (its records stay in the commit log)."""
        batch_removed = self._batch_queues.remove_topic(topic)
        if batch_removed:
            self._retire_files([mf for bq in batch_removed for mf in bq.files])
        self._retire_queues(self._queues.remove_topic(topic))

    def _retire_queues(self, removed: list[ConsumeQueue]) -> None:
        if not removed:
            return
        if self._flusher is not None:
            self._flusher.retire(removed)
        else:
            for cq in removed:
                cq.close()

    # -- retention and the disk guard (store._clean) ---------------------------------------------

    def clean(self, now_ms: int | None = None) -> CleanReport:
        """One retention pass: measure the disk (refusing or accepting writes), delete expired
        commit-log segments (at a ``delete_when`` hour, or at any hour above
        ``disk_max_used_space_ratio``; regardless of age above the force-clean level), then the
        consume-queue and index files that point only into them, and move min offsets.

        Runs on the writer's thread (the broker's housekeeping calls it every
        cleanResourceInterval); *now_ms* (default: now) decides the hour and what has expired.
        """
        now = _time_ns() // 1_000_000 if now_ms is None else now_ms
        if not self._running:
            ratio = self._cleaner.guard.measure()
            return CleanReport(ratio, False, False, False, True, self._commitlog.min_offset)
        self._last_disk_check = time.monotonic()
        self._out_of_space = None  # as _check_disk: the next put that needs room tries again
        report = self._cleaner.run(
            now,
            self._commitlog,
            self._queues,
            self._retire_files,
            self._index,
            self._batch_queues.all_queues(),
        )
        self._update_accepting()
        return report

    def _retire_files(self, files: list[MappedFile]) -> None:
        """Close deleted files once no sync can be using them (on the flush thread)."""
        if self._flusher is not None:
            self._flusher.retire(files)
        else:
            for mf in files:
                mf.close()

    def _update_accepting(self) -> None:
        self._accepting = self.write_refusal is None
        # The flush thread may have failed between the line above and now, and set False before our
        # True landed: look again (it sets ``failure`` before it calls _refuse_after_flush_failure).
        if self._accepting and self.flush_failure is not None:
            self._accepting = False

    def _refuse_after_flush_failure(self) -> None:
        # Called on the flush thread (a plain attribute store); see _update_accepting.
        self._accepting = False

    @property
    def flush_failure(self) -> str | None:
        """Why a sync failed (the store then takes no more writes), or None."""
        flusher = self._flusher
        return flusher.failure if flusher is not None else None

    @property
    def write_refusal(self) -> str | None:
        """Why puts answer SERVICE_NOT_AVAILABLE right now (the broker's remark), or None while
        writes are accepted."""
        refusal = self._writes_refused_because()
        if refusal is None and self._replica_partial:
            return "this store's commit log ends inside a record its master is still sending"
        return refusal

    def disk_usage_ratio(self) -> float:
        """Used fraction of the filesystem holding the store, measured now (-1 if unknown)."""
        return self._cleaner.guard.measure()

    @property
    def commitlog_min_offset(self) -> int:
        return self._commitlog.min_offset

    @property
    def last_store_timestamp(self) -> int:
        """Store time (ms) of the commit log's last record, 0 when it has none."""
        return self._last_store_ts

    @property
    def commitlog_max_offset(self) -> int:
        return self._commitlog.max_offset

    @property
    def commitlog_flushed_offset(self) -> int:
        """Commit-log bytes below this offset are on disk."""
        return self._commitlog.flushed_offset

    @property
    def flush_behind_bytes(self) -> int:
        """Commit-log bytes written but not yet on disk (RocketMQ's remainHowManyDataToFlush)."""
        return max(0, self._commitlog.max_offset - self._commitlog.flushed_offset)


# What get_messages's take loop returns: status, units scanned, buffers, records, bytes.
_Taken = tuple[GetStatus, int, list[memoryview], int, int]


def _take(
    cl: CommitLog,
    seg: MappedFile,
    units: bytes,
    max_count: int,
    max_bytes: int,
    tags_codes: frozenset[int] | None,
    record_filter: Callable[[memoryview], bool] | None,
) -> _Taken:
    """get_messages's one take loop: the records of the consume-queue *units* whose tags code is in
    *tags_codes* (None: any) and that *record_filter* accepts (None: all), up to the limits; *seg* is
    the commit-log segment to look in first.

    One slice is handed out per run of records that lie back to back in one segment rather than one
    per record: batched sends store a queue's messages contiguously, so a backlog pull of 256 KiB of
    records is a few slices, and the answer's encoding and writev handle a few buffers instead of
    one per record (docs/performance.md#consume). The limits are RocketMQ's,
    checked before the filters: once a record is taken, stop at the first unit that would exceed
    *max_count* or *max_bytes*, whatever it is. A queue's units have positive sizes and increasing
    commit-log offsets, as the store appends them.
    """
    seg_start = seg.start
    seg_end = seg.end
    view = seg.view
    buffers: list[memoryview] = []
    count = 0
    filtered = 0  # units passed over by a filter
    gone = 0  # units passed over because their segment is gone
    total = 0  # bytes taken, up to *counted_to* in the current run
    run_start = run_end = counted_to = -1  # the current run: [run_start, run_end), empty if equal
    # Without a filter a run may grow up to here with no other look at the unit (not even at *total*,
    # brought up to date once the stretch ends): the segment's end, or where max_bytes would be
    # exceeded. A filter must look at every unit: its runs never stretch.
    stretch_end = -1
    stretches = tags_codes is None and record_filter is None
    stretch_count = max_count if stretches else 0  # so that a filter's units fail the first test
    wanted = _ANY_BYTE if tags_codes is None else tags_codes
    for coff, size, tags_code in (_iter_units_untagged if tags_codes is None else _iter_units)(units):
        # The next record of the run, within the limits, in as few bytecodes as possible: the backlog's
        # fast path.
        if count < stretch_count and coff == run_end and (end := coff + size) <= stretch_end:
            run_end = end
            count += 1
            continue
        if stretches:
            total += run_end - counted_to
            counted_to = run_end
        if count and (count >= max_count or total + size > max_bytes):
            break
        if tags_code not in wanted:
            filtered += 1
            continue
        end = coff + size
        if not seg_start <= coff < seg_end:
            found = cl.segment_for(coff)
            if found is None:
                gone += 1
                continue
            if run_end != run_start:
                buffers.append(view[run_start - seg_start : run_end - seg_start])
            run_start = run_end = counted_to = -1
            seg_start = found.start
            seg_end = found.end
            view = found.view
        if record_filter is not None and not record_filter(view[coff - seg_start : end - seg_start]):
            filtered += 1
            continue
        if coff != run_end:
            if run_end != run_start:
                buffers.append(view[run_start - seg_start : run_end - seg_start])
            run_start = coff
        run_end = counted_to = end
        total += size
        stretch_end = min(seg_end, end + max_bytes - total) if stretches else -1
        count += 1
    total += run_end - counted_to
    if run_end != run_start:
        buffers.append(view[run_start - seg_start : run_end - seg_start])
    # FOUND once a record is taken, whatever was gone before it.
    status = _FOUND if count else GetStatus.MESSAGE_WAS_REMOVING if gone else GetStatus.NO_MATCHED_MESSAGE
    return status, count + filtered + gone, buffers, count, total
