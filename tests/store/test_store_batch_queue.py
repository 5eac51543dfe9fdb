"""Batch consume queues (BatchCQ topics): one record and one 46-byte unit per inner batch, reads by any
offset inside a batch, limits counted in messages, and recovery of the units from the commit log."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import crash, cut_commit_log, make_msg

from cometmq.errors import StoreError
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, decode_records
from cometmq.protocol.taghash import java_string_hash
from cometmq.store import GetStatus, MessageStore, PutResult, PutStatus, _batchqueue
from cometmq.store.format import BCQ_UNIT, BCQ_UNIT_SIZE
from retention_fakes import HOUR_MS, InjectedDiskUsage, at_hour

OpenStore = Callable[..., MessageStore]
TOPIC = "Batched"
INNER = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


def put_batch(store: MessageStore, first: int, count: int, queue_id: int = 0, tag: str = "") -> PutResult:
    """An inner batch of *count* messages numbered from *first* (each body says its number)."""
    body = encode_batch_body([BatchEntry(0, b"m%05d" % (first + i), "") for i in range(count)])
    properties = f"INNER_NUM\x01{count}" + (f"\x02TAGS\x01{tag}" if tag else "")
    msg = make_msg(TOPIC, queue_id, body, properties, java_string_hash(tag) if tag else 0, sys_flag=INNER)
    return store.put_inner_batch(msg, count)


def fill(store: MessageStore, batches: int, queue_id: int = 0, first_batch: int = 0) -> list[PutResult]:
    """Batches of 1..7 messages; batch k starts at message 10 * k."""
    return [put_batch(store, 10 * k, 1 + k % 7, queue_id) for k in range(first_batch, first_batch + batches)]


def records(
    store: MessageStore, offset: int, max_count: int = 32, **kw: object
) -> tuple[GetStatus, int, list[int]]:
    """Status, next offset and the queue offsets of the records a get returns."""
    result = store.get_messages(TOPIC, 0, offset, max_count, **kw)  # type: ignore[arg-type]
    got = decode_records(b"".join(result.buffers), check_crc=True)
    return result.status, result.next_begin_offset, [r.queue_offset for r in got]


def units(store: MessageStore, queue_id: int = 0) -> list[tuple[int, ...]]:
    bq = store._batch_queues.get(TOPIC, queue_id)
    assert bq is not None
    return [bq.unit(i) for i in range(bq.units)]


def test_a_batch_is_one_record_with_one_unit_covering_its_offsets(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = open_store()
    first, second = put_batch(store, 0, 5), put_batch(store, 5, 3)
    assert (first.status, first.queue_offset, first.count) == (PutStatus.PUT_OK, 0, 5)
    assert (second.queue_offset, second.count) == (5, 3)
    assert (store.min_offset(TOPIC, 0), store.max_offset(TOPIC, 0)) == (0, 8)
    assert store.is_batch_topic(TOPIC)
    (record,) = decode_records(bytes(store.message_at(second.commitlog_offset) or b""))
    assert record.sys_flag & INNER == INNER and record.queue_offset == 5
    assert decode_properties(record.properties) == {"INNER_NUM": "3", "INNER_BASE": "5"}
    # RocketMQ's 46-byte unit: offset, size, tags code, store time, base, count, -1, 0.
    path = tmp_path / "store" / "batchconsumequeue" / TOPIC / "0" / f"{0:020d}"
    raw = path.read_bytes()[BCQ_UNIT_SIZE : 2 * BCQ_UNIT_SIZE]
    coff, size, tags, stored_at, base, count, compacted, reserved = BCQ_UNIT.unpack(raw)
    assert (coff, size, tags, base, count, compacted, reserved) == (
        second.commitlog_offset,
        second.wrote_bytes,
        0,
        5,
        3,
        -1,
        0,
    )
    assert stored_at == second.store_timestamp


def test_a_get_inside_a_batch_returns_the_whole_record_and_moves_past_it(open_store: OpenStore) -> None:
    store = open_store()
    fill(store, 6)  # batches of 1, 2, 3, 4, 5, 6 messages at offsets 0, 1, 3, 6, 10, 15 (end 21)
    assert records(store, 0) == (GetStatus.FOUND, 21, [0, 1, 3, 6, 10, 15])
    assert records(store, 4) == (GetStatus.FOUND, 21, [3, 6, 10, 15])
    assert records(store, 20) == (GetStatus.FOUND, 21, [15])
    # max_count counts messages, at least one record: 4 + 5 > 8.
    assert records(store, 7, max_count=8) == (GetStatus.FOUND, 10, [6])
    assert records(store, 7, max_count=9) == (GetStatus.FOUND, 15, [6, 10])
    assert records(store, 21)[0] is GetStatus.OFFSET_OVERFLOW_ONE
    assert records(store, 30)[0] is GetStatus.OFFSET_OVERFLOW_BADLY
    assert store.queue_unit(TOPIC, 0, 12) == units(store)[4][:3]


def test_filters_apply_to_the_record_as_rocketmq_does(open_store: OpenStore) -> None:
    store = open_store()
    put_batch(store, 0, 4)
    put_batch(store, 4, 4, tag="red")
    put_batch(store, 8, 4)
    red = frozenset({java_string_hash("red")})
    assert records(store, 0, tags_codes=red) == (GetStatus.FOUND, 12, [4])
    assert records(store, 8, tags_codes=red) == (GetStatus.NO_MATCHED_MESSAGE, 12, [])
    assert records(store, 0, record_filter=lambda record: False) == (GetStatus.NO_MATCHED_MESSAGE, 12, [])


def test_the_time_search_answers_batch_boundaries(open_store: OpenStore) -> None:
    store = open_store()
    results = fill(store, 5)
    stamps = [r.store_timestamp for r in results]
    assert store.first_offset_at(TOPIC, 0, stamps[0]) == 0
    assert store.first_offset_at(TOPIC, 0, stamps[-1] + 1) == store.max_offset(TOPIC, 0)
    assert store.offset_by_timestamp(TOPIC, 0, stamps[-1] + 10_000) == store.max_offset(TOPIC, 0) - 1
    assert store.store_time_at(TOPIC, 0, 7) == stamps[3]
    assert store.earliest_store_time(TOPIC, 0) == stamps[0]


def test_a_plain_message_to_a_batch_topic_gets_a_unit_of_one(open_store: OpenStore) -> None:
    store = open_store()
    store.declare_batch_topic(TOPIC)
    put_batch(store, 0, 3)
    single = store.put(make_msg(TOPIC, 0, b"single"))
    assert (single.status, single.queue_offset) == (PutStatus.PUT_OK, 3)
    assert [u[4:] for u in units(store)] == [(0, 3), (3, 1)]
    assert (
        store.put_batch([make_msg(TOPIC, 0, b"x"), make_msg(TOPIC, 0, b"y")]).status
        is PutStatus.MESSAGE_ILLEGAL
    )


def test_clean_restart_keeps_the_queues_and_the_topic_type(open_store: OpenStore) -> None:
    store = open_store()
    fill(store, 20, queue_id=1)
    before = units(store, 1)
    store.shutdown()
    store = open_store()
    assert store.is_batch_topic(TOPIC)
    assert units(store, 1) == before
    assert put_batch(store, 0, 2, queue_id=1).queue_offset == before[-1][4] + before[-1][5]


def crash_with_40_units_past_the_checkpoint(open_store: OpenStore) -> list[tuple[int, ...]]:
    """Fill queue 0 with 340 batches over several segments, the checkpoint taken after the first 300, and
    crash the store; the units it held."""
    store = open_store()
    fill(store, 300)
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()
    fill(store, 40, first_batch=300)
    before = units(store)
    crash(store)
    return before


def test_units_lost_after_the_checkpoint_are_rebuilt_from_the_log(
    open_store: OpenStore, tmp_path: Path
) -> None:
    before = crash_with_40_units_past_the_checkpoint(open_store)
    # The last 40 units never reached the disk (their pages were lost, as by a power loss).
    path = tmp_path / "store" / "batchconsumequeue" / TOPIC / "0" / f"{0:020d}"
    with path.open("r+b") as f:
        f.seek(300 * BCQ_UNIT_SIZE)
        f.write(bytes(40 * BCQ_UNIT_SIZE))
    store = open_store()
    assert units(store) == before
    assert records(store, before[-1][4])[2] == [before[-1][4]]


def test_units_past_the_commit_logs_end_are_dropped(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 200)
    store.shutdown()
    cut = results[150]
    cut_commit_log(root, cut.commitlog_offset)
    store = open_store()
    assert store.max_offset(TOPIC, 0) == cut.queue_offset
    assert len(units(store)) == 150
    assert put_batch(store, 0, 2).queue_offset == cut.queue_offset


def test_a_torn_unit_ends_the_queue_at_load_and_the_log_rewrites_the_rest(
    open_store: OpenStore, tmp_path: Path
) -> None:
    before = crash_with_40_units_past_the_checkpoint(open_store)
    path = tmp_path / "store" / "batchconsumequeue" / TOPIC / "0" / f"{0:020d}"
    with path.open("r+b") as f:
        f.seek(320 * BCQ_UNIT_SIZE)  # a unit whose base does not follow, then garbage
        f.write(BCQ_UNIT.pack(1, 1, 0, 0, 999_999, 1, -1, 0) + b"\xff" * 100)
    store = open_store()
    assert units(store) == before
    data = path.read_bytes()
    assert not any(data[340 * BCQ_UNIT_SIZE :])


def test_a_records_inner_batch_flag_does_not_make_an_ordinary_topic_batchcq(open_store: OpenStore) -> None:
    """Whether a topic is BatchCQ is the store's to know (declared, or its directory), not a record's: a
    flagged record of an ordinary topic stays in the ordinary queue through a crash recovery."""
    store = open_store()
    for k, sys_flag in enumerate((0, INNER, 0)):
        assert store.put(make_msg("Plain", 0, b"plain %d" % k, sys_flag=sys_flag)).status is PutStatus.PUT_OK
    crash(store)
    store = open_store()
    assert not store.is_batch_topic("Plain")
    assert (store.min_offset("Plain", 0), store.max_offset("Plain", 0)) == (0, 3)
    result = store.get_messages("Plain", 0, 0, 32)
    assert [r.queue_offset for r in decode_records(b"".join(result.buffers))] == [0, 1, 2]


@pytest.mark.parametrize("inner_num", ["abc", "40000", "-3", "0", ""])
def test_a_rebuilt_unit_whose_inner_num_is_not_a_count_covers_one_offset(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture, inner_num: str
) -> None:
    store = open_store()
    store.declare_batch_topic(TOPIC)
    body = encode_batch_body([BatchEntry(0, b"m", "") for _ in range(4)])
    msg = make_msg(TOPIC, 0, body, f"INNER_NUM\x01{inner_num}", sys_flag=INNER)
    assert store.put_inner_batch(msg, 4).status is PutStatus.PUT_OK
    crash(store)
    path = tmp_path / "store" / "batchconsumequeue" / TOPIC / "0" / f"{0:020d}"
    path.write_bytes(bytes(path.stat().st_size))  # the unit never reached the disk: rebuilt from the log
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store()
    assert [unit[4:] for unit in units(store)] == [(0, 1)]
    (warning,) = [r for r in caplog.records if "INNER_NUM" in r.getMessage()]
    assert warning.exc_info is None and repr(inner_num) in warning.getMessage()


@pytest.mark.parametrize("with_ordinary_topic", [False, True], ids=["batch topics only", "mixed topics"])
def test_a_crash_recovery_redispatches_from_the_checkpoint_not_the_whole_log(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture, with_ordinary_topic: bool
) -> None:
    store = open_store()
    store.declare_batch_topic(TOPIC)
    for k in range(300):  # several segments
        put_batch(store, 10 * k, 1 + k % 7)
        if with_ordinary_topic and k % 3 == 0:
            assert store.put(make_msg("Plain", 0, b"plain %d" % k)).status is PutStatus.PUT_OK
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()
    safe = store._checkpoint.read().dispatch_safe
    fill(store, 20, first_batch=300)
    before = units(store)
    plain_end = store.max_offset("Plain", 0)
    crash(store)
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store()
    (scan,) = [r for r in caplog.records if r.getMessage().startswith("recovery: scanned commit log")]
    assert scan.args is not None
    start, _end, _records, rewritten = scan.args[:4]  # type: ignore[index]
    assert 0 < start <= safe
    assert rewritten == 0  # the units written before the crash are in the page cache: present, not rewritten
    assert units(store) == before
    assert store.max_offset("Plain", 0) == plain_end


def test_a_batch_queue_file_of_another_size_stops_the_start_and_stays(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = open_store()
    fill(store, 5)
    store.shutdown()
    path = tmp_path / "store" / "batchconsumequeue" / TOPIC / "0" / f"{0:020d}"
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(StoreError, match="is not one this store writes"):
        open_store()
    assert path.exists()


def test_truncating_the_log_drops_the_batch_units_of_the_records_cut(open_store: OpenStore) -> None:
    """A slave's tail its new master does not have: the batch queues follow the cut, as the others do."""
    store = open_store()
    results = fill(store, 20)
    cut = results[12]
    store.truncate_to(cut.commitlog_offset)
    assert store.max_offset(TOPIC, 0) == cut.queue_offset
    assert len(units(store)) == 12
    assert put_batch(store, 0, 3).queue_offset == cut.queue_offset


def test_retention_deletes_batch_queue_files_below_the_logs_start_and_moves_min_offset(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_batchqueue, "UNITS_PER_FILE", 10)
    root = tmp_path / "store"
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = []
    body = encode_batch_body([BatchEntry(0, b"x" * 1000, "") for _ in range(4)])
    for _ in range(60):
        msg = make_msg(TOPIC, 0, body, "INNER_NUM\x014", sys_flag=INNER)
        results.append(store.put_inner_batch(msg, 4))
    queue_dir = root / "batchconsumequeue" / TOPIC / "0"
    assert len(list(queue_dir.iterdir())) == 6
    now = at_hour(4)
    segments = sorted((root / "commitlog").iterdir())
    for path in segments[:-1]:
        ns = (now - 100 * HOUR_MS) * 1_000_000
        os.utime(path, ns=(ns, ns))
    report = store.clean(now)
    cl_min = store.commitlog_min_offset
    assert report.commitlog_deleted and cl_min > 0
    first_kept = next(r for r in results if r.commitlog_offset >= cl_min)
    assert store.min_offset(TOPIC, 0) == first_kept.queue_offset
    # Whole files whose units all point below the log's start are gone, never the last one.
    whole_files_gone = sum(1 for k in range(0, 60, 10) if results[k + 9].commitlog_offset < cl_min)
    assert whole_files_gone > 0
    assert [p.name for p in report.consumequeue_deleted] == [
        f"{k * 10 * BCQ_UNIT_SIZE:020d}" for k in range(whole_files_gone)
    ]
    assert len(list(queue_dir.iterdir())) == 6 - whole_files_gone
    got = store.get_messages(TOPIC, 0, store.min_offset(TOPIC, 0), 8)
    assert got.status is GetStatus.FOUND
    assert decode_records(b"".join(got.buffers))[0].queue_offset == first_kept.queue_offset
    assert store.get_messages(TOPIC, 0, 0, 8).status is GetStatus.OFFSET_TOO_SMALL
    before = units(store)
    assert put_batch(store, 0, 2).queue_offset == 240
    store.shutdown()
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    assert store.min_offset(TOPIC, 0) == first_kept.queue_offset
    assert units(store)[: len(before)] == before
    assert store.max_offset(TOPIC, 0) == 242


def test_a_queue_loads_by_reading_its_written_units_not_its_whole_file(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    fill(store, 5)
    before = units(store)
    store.shutdown()
    read: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        read.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(_batchqueue.os, "pread", pread)
    store = open_store()
    assert units(store) == before
    assert sum(read) < 5 * BCQ_UNIT_SIZE + 4 * 40  # the units, and a binary search's 4-byte reads
