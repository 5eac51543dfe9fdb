"""Model-based test: random put / put_batch / put_together / get / restart / crash against a model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from store_testlib import bodies as stored_bodies
from store_testlib import crash, make_msg, small_config

from cometmq.protocol.record import decode_records
from cometmq.store import FlushDiskType, GetStatus, MessageStore, PutStatus

CQ_UNITS_PER_FILE = 5
topics = st.sampled_from(["A", "B"])
queue_ids = st.integers(0, 1)
bodies = st.binary(max_size=600)
tag_codes = st.sampled_from([0, 1, 2])


class StoreMachine(RuleBasedStateMachine):
    flush_disk_type = FlushDiskType.ASYNC_FLUSH
    segment_size = 8192

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="cometmq-store-"))
        self.store = self._open()
        self.model: dict[tuple[str, int], list[tuple[bytes, int]]] = {}

    def _open(self) -> MessageStore:
        cfg = small_config(
            self.dir,
            mapped_file_size_commitlog=self.segment_size,
            mapped_file_size_consume_queue=20 * CQ_UNITS_PER_FILE,
            flush_disk_type=self.flush_disk_type,
        )
        store = MessageStore(cfg)
        store.start()
        self._configure(store)
        return store

    def _configure(self, store: MessageStore) -> None:
        """Adjust a freshly started store before its first put."""

    @rule(topic=topics, queue_id=queue_ids, body=bodies, tag=tag_codes)
    def put(self, topic: str, queue_id: int, body: bytes, tag: int) -> None:
        res = self.store.put(make_msg(topic, queue_id, body, tags_code=tag))
        assert res.status is PutStatus.PUT_OK
        queue = self.model.setdefault((topic, queue_id), [])
        assert res.queue_offset == len(queue)
        queue.append((body, tag))

    @rule(
        topic=topics, queue_id=queue_ids, batch=st.lists(st.tuples(bodies, tag_codes), min_size=1, max_size=5)
    )
    def put_batch(self, topic: str, queue_id: int, batch: list[tuple[bytes, int]]) -> None:
        res = self.store.put_batch([make_msg(topic, queue_id, b, tags_code=t) for b, t in batch])
        assert res.status is PutStatus.PUT_OK
        queue = self.model.setdefault((topic, queue_id), [])
        assert (res.queue_offset, res.count) == (len(queue), len(batch))
        queue.extend(batch)

    @rule(group=st.lists(st.tuples(topics, queue_ids, bodies, tag_codes), min_size=1, max_size=5))
    def put_together(self, group: list[tuple[str, int, bytes, int]]) -> None:
        results = self.store.put_together([make_msg(t, q, b, tags_code=c) for t, q, b, c in group])
        for (topic, queue_id, body, tag), res in zip(group, results, strict=True):
            assert res.status is PutStatus.PUT_OK
            queue = self.model.setdefault((topic, queue_id), [])
            assert res.queue_offset == len(queue)
            queue.append((body, tag))

    @rule(
        topic=topics,
        queue_id=queue_ids,
        offset=st.integers(0, 30),
        max_count=st.integers(1, 8),
        codes=st.none() | st.frozensets(tag_codes),
    )
    def get(
        self, topic: str, queue_id: int, offset: int, max_count: int, codes: frozenset[int] | None
    ) -> None:
        res = self.store.get_messages(topic, queue_id, offset, max_count, codes)
        queue = self.model.get((topic, queue_id))
        if queue is None:
            assert (res.status, res.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
            return
        n = len(queue)
        assert (res.min_offset, res.max_offset) == (0, n)
        if offset > n:
            assert (res.status, res.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, n)
            return
        if offset == n:
            assert (res.status, res.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, n)
            return
        # One consume-queue file per call; stop once max_count messages are collected.
        file_end = min(n, (offset // CQ_UNITS_PER_FILE + 1) * CQ_UNITS_PER_FILE)
        expected: list[bytes] = []
        scanned = offset
        for body, tag in queue[offset:file_end]:
            if len(expected) >= max_count:
                break
            scanned += 1
            if codes is None or tag in codes:
                expected.append(body)
        got = [r.body for r in decode_records(b"".join(res.buffers), check_crc=True)]
        assert got == expected
        assert res.next_begin_offset == scanned
        assert res.status is (GetStatus.FOUND if expected else GetStatus.NO_MATCHED_MESSAGE)

    @rule()
    def restart(self) -> None:
        self.store.shutdown()
        self.store = self._open()

    @rule()
    def crash_and_recover(self) -> None:
        crash(self.store)
        self.store = self._open()

    @invariant()
    def offsets_match(self) -> None:
        for (topic, queue_id), queue in self.model.items():
            assert self.store.max_offset(topic, queue_id) == len(queue)
            assert self.store.min_offset(topic, queue_id) == 0

    @invariant()
    def every_message_reads_back(self) -> None:
        # Also what a write over a record would break (the SYNC_FLUSH zeros), wherever reads look.
        for (topic, queue_id), queue in self.model.items():
            assert stored_bodies(self.store, topic, queue_id) == [body for body, _ in queue]

    def teardown(self) -> None:
        self.store.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


class SyncFlushStoreMachine(StoreMachine):
    """The same under SYNC_FLUSH, where a single put writes its record with pwrite, and the commit
    log writes zeros ahead of the writer: here 256 bytes ahead in 64-byte chunks, so that within 16 KiB
    segments the zeros slide along, are overtaken by batches and start again in each new segment."""

    flush_disk_type = FlushDiskType.SYNC_FLUSH
    segment_size = 16384

    def _configure(self, store: MessageStore) -> None:
        store._commitlog.warm_window = 256
        store._commitlog.warm_chunk = 64


StoreMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
SyncFlushStoreMachine.TestCase.settings = StoreMachine.TestCase.settings
test_store_model = StoreMachine.TestCase
test_store_model_sync_flush = SyncFlushStoreMachine.TestCase
