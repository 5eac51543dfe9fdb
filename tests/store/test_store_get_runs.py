"""get_messages hands out one slice per run of records that lie back to back in one commit-log segment.

Whatever the slicing, the bytes, counts, ``next_begin_offset`` and statuses must be exactly those of
reading the records one by one: ``expected_get`` does that through the public per-unit API
(``queue_unit`` and ``message_at``), the way get_messages worked before it coalesced records.
"""

from __future__ import annotations

import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_testlib import make_msg, small_config

from cometmq.store import GetResult, GetStatus, MessageStore, PutStatus

OpenStore = Callable[..., MessageStore]
RecordFilter = Callable[[memoryview], bool]

SEGMENT = 4096  # the smallest commit-log segment: a roll every few records
UNITS_PER_CQ_FILE = 7


@dataclass
class Expected:
    records: list[bytes]
    runs: int  # how many slices coalescing should make: records back to back in one segment share one
    next_begin_offset: int
    status: GetStatus


def expected_get(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    units_per_file: int,
    *,
    max_bytes: int = 256 * 1024,
    codes: frozenset[int] | None = None,
    accept: RecordFilter | None = None,
) -> Expected:
    """A pull of offsets the queue holds (min <= offset < max), one record at a time: one
    consume-queue file per call, limits checked before the filters (docs/protocol.md#pull-results)."""
    end = min(store.max_offset(topic, queue_id), (offset // units_per_file + 1) * units_per_file)
    records: list[bytes] = []
    runs = 0
    prev_end = -1
    total = 0
    scanned = offset
    missing_first = False
    for index in range(offset, end):
        unit = store.queue_unit(topic, queue_id, index)
        assert unit is not None
        coff, size, tags_code = unit
        if records and (len(records) >= max_count or total + size > max_bytes):
            break
        scanned += 1
        if codes is not None and tags_code not in codes:
            continue
        record = store.message_at(coff)
        if record is None:  # its segment is gone
            missing_first = missing_first or not records
            continue
        assert len(record) == size
        if accept is not None and not accept(record):
            continue
        if coff != prev_end or coff % SEGMENT == 0:
            runs += 1
        prev_end = coff + size
        records.append(bytes(record))
        total += size
    if records:
        status = GetStatus.FOUND
    elif missing_first:
        status = GetStatus.MESSAGE_WAS_REMOVING
    else:
        status = GetStatus.NO_MATCHED_MESSAGE
    return Expected(records, runs, scanned, status)


def check(got: GetResult, want: Expected) -> None:
    assert b"".join(got.buffers) == b"".join(want.records)
    assert got.message_count == len(want.records)
    assert got.buffer_total_size == sum(len(b) for b in want.records) == sum(len(b) for b in got.buffers)
    assert (got.status, got.next_begin_offset) == (want.status, want.next_begin_offset)
    assert len(got.buffers) == want.runs


def unit_size(store: MessageStore, queue_id: int, index: int) -> int:
    unit = store.queue_unit("TopicTest", queue_id, index)
    assert unit is not None
    return unit[1]


def crc_filter(residue: int) -> RecordFilter:
    return lambda record: zlib.crc32(record) % 3 != residue


def test_a_batch_comes_back_as_one_slice(open_store: OpenStore) -> None:
    store = open_store()
    res = store.put_batch([make_msg(body=b"m%03d" % i) for i in range(50)])
    assert res.status is PutStatus.PUT_OK
    got = store.get_messages("TopicTest", 0, 0, 32)
    assert (got.status, got.message_count, got.next_begin_offset, len(got.buffers)) == (
        GetStatus.FOUND,
        32,
        32,
        1,
    )
    check(got, expected_get(store, "TopicTest", 0, 0, 32, 100))


def test_runs_break_where_other_queues_interleave_and_at_tag_gaps(open_store: OpenStore) -> None:
    store = open_store()
    for i in range(4):  # queue 0 and queue 1 take turns, 5 records at a time
        for queue_id in (0, 1):
            batch = [
                make_msg(queue_id=queue_id, body=b"%d-%d-%d" % (queue_id, i, j), tags_code=j % 2)
                for j in range(5)
            ]
            assert store.put_batch(batch).status is PutStatus.PUT_OK
    got = store.get_messages("TopicTest", 0, 0, 32)
    assert (got.message_count, len(got.buffers)) == (20, 4)
    check(got, expected_get(store, "TopicTest", 0, 0, 32, 100))
    # The limits count the records of every run: full after 7 records (a run of 5, then 2 of the next).
    size = got.buffer_total_size // 20
    for got in (
        store.get_messages("TopicTest", 0, 0, 32, max_bytes=7 * size),
        store.get_messages("TopicTest", 0, 0, 32, max_bytes=8 * size - 1),
        store.get_messages("TopicTest", 0, 0, 7),
    ):
        assert (got.message_count, got.next_begin_offset, len(got.buffers)) == (7, 7, 2)
    # Tag code 0 only: records 0, 2, 4 of each batch, none adjacent.
    got = store.get_messages("TopicTest", 1, 0, 32, frozenset({0}))
    assert (got.message_count, len(got.buffers)) == (12, 12)
    check(got, expected_get(store, "TopicTest", 1, 0, 32, 100, codes=frozenset({0})))


def test_runs_break_at_segment_boundaries(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commitlog=SEGMENT)
    for i in range(40):  # ~160-byte records: a new segment every ~25
        assert store.put(make_msg(body=b"%03d" % i + b"x" * 60)).status is PutStatus.PUT_OK
    got = store.get_messages("TopicTest", 0, 0, 64)
    assert got.message_count == 40 and len(got.buffers) >= 2
    check(got, expected_get(store, "TopicTest", 0, 0, 64, 100))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(
            st.integers(0, 2),  # queue id
            st.lists(
                st.tuples(st.integers(0, 500), st.integers(0, 2)), min_size=1, max_size=6
            ),  # body size, tag
        ),
        min_size=1,
        max_size=25,
    ),
    data=st.data(),
)
def test_slices_give_exactly_the_records_one_by_one_reads_give(
    batches: list[tuple[int, list[tuple[int, int]]]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(prefix="cometmq-runs-") as tmp:
        store = MessageStore(
            small_config(
                Path(tmp),
                mapped_file_size_commitlog=SEGMENT,
                mapped_file_size_consume_queue=20 * UNITS_PER_CQ_FILE,
            )
        )
        store.start()
        try:
            for n, (queue_id, spec) in enumerate(batches):
                msgs = [
                    make_msg(queue_id=queue_id, body=bytes([n, j]) * (size // 2), tags_code=tag)
                    for j, (size, tag) in enumerate(spec)
                ]
                res = store.put(msgs[0]) if len(msgs) == 1 else store.put_batch(msgs)
                assert res.status is PutStatus.PUT_OK
            # Segments deleted under the consume queue (as before ``clean`` moves the min offsets):
            # their units read as removed (MESSAGE_WAS_REMOVING), later ones still as found.
            store._retire_files(store._commitlog.drop_head(data.draw(st.integers(0, 3))))
            for _ in range(8):
                queue_id = data.draw(st.sampled_from(sorted({q for q, _ in batches})))
                max_offset = store.max_offset("TopicTest", queue_id)
                offset = data.draw(st.integers(0, max_offset - 1))
                max_count = data.draw(st.integers(1, 12))
                # Byte limits right at, below and above where records end hit the edges of the checks.
                ends = list(accumulate(unit_size(store, queue_id, i) for i in range(offset, max_offset)))
                max_bytes = data.draw(
                    st.sampled_from([1, 1500, 256 * 1024])
                    | st.builds(int.__add__, st.sampled_from(ends[:12]), st.integers(-1, 1))
                )
                codes = data.draw(st.none() | st.frozensets(st.integers(0, 2)))
                residue = data.draw(st.none() | st.integers(0, 2))
                accept = crc_filter(residue) if residue is not None else None
                got = store.get_messages("TopicTest", queue_id, offset, max_count, codes, max_bytes, accept)
                want = expected_get(
                    store,
                    "TopicTest",
                    queue_id,
                    offset,
                    max_count,
                    UNITS_PER_CQ_FILE,
                    max_bytes=max_bytes,
                    codes=codes,
                    accept=accept,
                )
                check(got, want)
        finally:
            store.shutdown()
