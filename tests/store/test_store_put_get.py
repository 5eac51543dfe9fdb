"""put / put_batch / get_messages and the offset queries of MessageStore."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import (
    BORN_HOST,
    SMALL_COMMITLOG,
    SMALL_CQ,
    STORE_HOST,
    bodies,
    crash,
    make_msg,
    run_child,
    small_config,
)

import cometmq.store._store as store_module
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    decode_offset_msg_id,
    decode_records,
    encode_host,
    offset_msg_id,
)
from cometmq.protocol.taghash import java_string_hash
from cometmq.store import GetStatus, MessageBatch, MessageStore, PutStatus

OpenStore = Callable[..., MessageStore]


def test_put_get_round_trip_every_field(open_store: OpenStore) -> None:
    store = open_store()
    props = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB" * 16})
    msg = make_msg(
        "TopicTest",
        3,
        b"\x00body\xff" * 10,
        props,
        java_string_hash("TagA"),
        flag=9,
        sys_flag=0x1,
        born_timestamp=1234,
        reconsume_times=2,
        prepared_transaction_offset=77,
    )
    res = store.put(msg)
    assert res.status is PutStatus.PUT_OK
    assert (res.commitlog_offset, res.queue_offset, res.count) == (0, 0, 1)
    assert res.msg_ids == [offset_msg_id(STORE_HOST, 0)]
    assert store.commitlog_max_offset == res.wrote_bytes == res.commitlog_end_offset

    got = store.get_messages("TopicTest", 3, 0, 32)
    assert got.status is GetStatus.FOUND
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (1, 0, 1)
    assert got.message_count == 1 and got.buffer_total_size == res.wrote_bytes
    (rec,) = decode_records(got.buffers[0], check_crc=True)
    assert rec.total_size == res.wrote_bytes
    assert (rec.queue_id, rec.flag, rec.queue_offset, rec.commitlog_offset) == (3, 9, 0, 0)
    assert (rec.sys_flag, rec.born_timestamp, rec.reconsume_times) == (1, 1234, 2)
    assert rec.prepared_transaction_offset == 77
    assert (rec.born_host, rec.store_host) == (BORN_HOST, STORE_HOST)
    assert rec.store_timestamp == res.store_timestamp
    assert (rec.body, rec.topic, rec.properties) == (msg.body, "TopicTest", props)
    assert rec.offset_msg_id == res.msg_ids[0]
    # VIEW_MESSAGE_BY_ID: the id leads back to the same bytes.
    _, _, offset = decode_offset_msg_id(res.msg_ids[0])
    view = store.message_at(offset)
    assert view is not None and bytes(view) == bytes(got.buffers[0])
    assert store.message_at(offset + 1) is None
    assert store.message_at(10**9) is None
    assert store.queue_ids("TopicTest") == [3]


def test_batch_has_consecutive_offsets(open_store: OpenStore) -> None:
    store = open_store()
    store.put(make_msg(queue_id=1, body=b"first"))
    shared = {"sys_flag": 0x1, "born_timestamp": 42, "reconsume_times": 3}
    batch = [
        make_msg(queue_id=1, body=f"m{i}".encode(), properties=f"P\x01{i}", tags_code=i, flag=i, **shared)
        for i in range(5)
    ]
    res = store.put_batch(batch)
    assert res.status is PutStatus.PUT_OK
    assert (res.queue_offset, res.count) == (1, 5)
    recs = decode_records(b"".join(store.get_messages("TopicTest", 1, 1, 32).buffers), check_crc=True)
    assert [r.queue_offset for r in recs] == [1, 2, 3, 4, 5]
    assert [(r.body, r.flag, r.properties) for r in recs] == [
        (f"m{i}".encode(), i, f"P\x01{i}") for i in range(5)
    ]
    # What the batch shares reaches every record.
    assert {
        (r.sys_flag, r.born_timestamp, r.reconsume_times, r.prepared_transaction_offset) for r in recs
    } == {(0x1, 42, 3, 0)}
    assert {(r.born_host, r.store_host, r.topic) for r in recs} == {(BORN_HOST, STORE_HOST, "TopicTest")}
    assert res.msg_ids == [r.offset_msg_id for r in recs]
    assert recs[0].commitlog_offset == res.commitlog_offset
    assert sum(r.total_size for r in recs) == res.wrote_bytes
    assert {r.store_timestamp for r in recs} == {res.store_timestamp}
    assert store.max_offset("TopicTest", 1) == 6


def test_batch_is_all_or_nothing(open_store: OpenStore) -> None:
    store = open_store()
    mixed = [make_msg(queue_id=0), make_msg(queue_id=1)]
    assert store.put_batch(mixed).status is PutStatus.MESSAGE_ILLEGAL
    big_props = [make_msg(), make_msg(properties="K\x01" + "v" * 40000)]
    assert store.put_batch(big_props).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_batch([]).status is PutStatus.MESSAGE_ILLEGAL
    prepared = [make_msg(sys_flag=0x4)]
    assert store.put_batch(prepared).status is PutStatus.MESSAGE_ILLEGAL
    too_big = [make_msg(body=b"x" * 20_000) for _ in range(4)]  # > one 64 KiB segment
    assert store.put_batch(too_big).status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog_max_offset == 0
    assert store.max_offset("TopicTest", 0) == 0


@pytest.mark.parametrize(
    "change",
    [
        {"topic": "OtherTopic"},
        {"sys_flag": 0x1},
        {"born_timestamp": 1_700_000_000_001},
        {"born_host": encode_host("10.0.0.9", 1)},
        {"store_host": encode_host("10.0.0.9", 2)},
        {"reconsume_times": 1},
        {"prepared_transaction_offset": 5},
        {"properties": "K\x01\ud800"},  # a lone surrogate: not representable in a record
    ],
)
def test_a_list_that_does_not_share_what_a_batch_shares_is_refused(
    open_store: OpenStore, change: dict[str, object]
) -> None:
    store = open_store()
    messages = [make_msg(), dataclasses.replace(make_msg(), **change)]  # type: ignore[arg-type]
    assert store.put_batch(messages).status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog_max_offset == 0
    assert store.put_batch([make_msg(), make_msg()]).status is PutStatus.PUT_OK  # the same, shared


def test_segment_roll_over_with_blank_filler(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    sent = []
    for i in range(400):
        body = bytes([i % 256]) * (100 + (i * 37) % 900)
        sent.append(body)
        res = store.put(make_msg(queue_id=i % 2, body=body))
        assert res.status is PutStatus.PUT_OK
        # A record never spans two segments.
        start = res.commitlog_offset
        assert start // SMALL_COMMITLOG == (start + res.wrote_bytes - 1) // SMALL_COMMITLOG
    segments = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert len(segments) > 3
    assert all(p.stat().st_size == SMALL_COMMITLOG for p in segments)
    assert [int(p.name) for p in segments] == [i * SMALL_COMMITLOG for i in range(len(segments))]
    assert all(len(p.name) == 20 for p in segments)
    # Each full segment ends with a blank record reaching exactly its end.
    for path in segments[:-1]:
        data = path.read_bytes()
        pos = 0
        while True:
            total, magic = struct.unpack_from(">iI", data, pos)
            if magic == BLANK_MAGIC_CODE:
                assert pos + total == SMALL_COMMITLOG
                break
            pos += total
    cq_files = sorted((tmp_path / "store" / "consumequeue" / "TopicTest" / "0").iterdir())
    assert [int(p.name) for p in cq_files] == [0, SMALL_CQ]
    assert bodies(store, "TopicTest", 0) == sent[0::2]
    assert bodies(store, "TopicTest", 1) == sent[1::2]


def test_get_reads_one_consume_queue_file_per_call(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(150):
        store.put(make_msg())
    res = store.get_messages("TopicTest", 0, 90, 32)
    # Units 90..99 are in the first file (100 units per file); RocketMQ stops at the file's end.
    assert (res.message_count, res.next_begin_offset) == (10, 100)
    assert store.get_messages("TopicTest", 0, 100, 32).message_count == 32


def test_get_statuses_per_wire_facts(open_store: OpenStore, tmp_path: Path) -> None:
    (tmp_path / "store" / "consumequeue" / "Empty" / "0").mkdir(parents=True)
    store = open_store()
    res = store.get_messages("Unknown", 0, 5, 32)
    assert (res.status, res.next_begin_offset, res.buffers) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, [])
    res = store.get_messages("Empty", 0, 5, 32)
    assert (res.status, res.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    assert store.queue_ids("Empty") == [0]

    for i in range(10):
        store.put(make_msg(body=bytes([i])))
    res = store.get_messages("TopicTest", 0, 10, 32)
    assert (res.status, res.next_begin_offset, res.min_offset, res.max_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        10,
        0,
        10,
    )
    res = store.get_messages("TopicTest", 0, 25, 32)
    assert (res.status, res.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)
    res = store.get_messages("TopicTest", 0, 4, 3)
    assert (res.status, res.next_begin_offset, res.message_count) == (GetStatus.FOUND, 7, 3)


def test_offset_too_small_after_files_are_gone(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    for _ in range(250):
        store.put(make_msg())
    store.shutdown()
    (tmp_path / "store" / "consumequeue" / "TopicTest" / "0" / f"{0:020d}").unlink()
    store = open_store()
    assert (store.min_offset("TopicTest", 0), store.max_offset("TopicTest", 0)) == (100, 250)
    res = store.get_messages("TopicTest", 0, 3, 32)
    assert (res.status, res.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, 100)
    assert store.get_messages("TopicTest", 0, 100, 32).status is GetStatus.FOUND


def test_tag_filtering(open_store: OpenStore) -> None:
    store = open_store()
    a, b = java_string_hash("TagA"), java_string_hash("TagB")
    for i in range(10):
        store.put(make_msg(body=bytes([i]), tags_code=a if i % 3 == 0 else b))
    res = store.get_messages("TopicTest", 0, 0, 32, frozenset({a}))
    assert res.status is GetStatus.FOUND
    assert [r.body[0] for r in decode_records(b"".join(res.buffers))] == [0, 3, 6, 9]
    assert res.next_begin_offset == 10  # filtered units count too
    # Batch full after 2 matches: stop right there, at the unit after the second match.
    res = store.get_messages("TopicTest", 0, 0, 2, frozenset({a}))
    assert (res.message_count, res.next_begin_offset) == (2, 4)
    # Nothing matches: NO_MATCHED_MESSAGE, but the scanned units are skipped.
    res = store.get_messages("TopicTest", 0, 1, 32, frozenset({java_string_hash("TagC")}))
    assert (res.status, res.next_begin_offset, res.buffers) == (GetStatus.NO_MATCHED_MESSAGE, 10, [])
    # An untagged message (code 0) only matches "*" (None).
    store.put(make_msg(body=b"untagged"))
    assert store.get_messages("TopicTest", 0, 10, 32, frozenset({a})).status is GetStatus.NO_MATCHED_MESSAGE
    assert store.get_messages("TopicTest", 0, 10, 32, None).status is GetStatus.FOUND


def test_record_filter_applies_after_the_tag_filter(open_store: OpenStore) -> None:
    """``record_filter`` (the broker's SQL92 filter) sees each stored record that passed the tags;
    rejected records advance ``next_begin_offset`` like filtered units."""
    store = open_store()
    a, b = java_string_hash("TagA"), java_string_hash("TagB")
    for i in range(10):
        store.put(make_msg(body=bytes([i]), tags_code=a if i % 3 else b))
    seen: list[int] = []

    def even(record: memoryview) -> bool:
        (body,) = [r.body for r in decode_records(record)]
        seen.append(body[0])
        return body[0] % 2 == 0

    res = store.get_messages("TopicTest", 0, 0, 32, frozenset({a}), record_filter=even)
    assert seen == [1, 2, 4, 5, 7, 8]  # only what the tags let through
    assert [r.body[0] for r in decode_records(b"".join(res.buffers))] == [2, 4, 8]
    assert (res.status, res.message_count, res.next_begin_offset) == (GetStatus.FOUND, 3, 10)
    # Full after 2 matches: stop at the unit after the second match.
    res = store.get_messages("TopicTest", 0, 0, 2, None, record_filter=even)
    assert (res.message_count, res.next_begin_offset) == (2, 3)
    # Nothing matches: NO_MATCHED_MESSAGE, past every scanned record.
    res = store.get_messages("TopicTest", 0, 0, 32, record_filter=lambda record: False)
    assert (res.status, res.next_begin_offset, res.buffers) == (GetStatus.NO_MATCHED_MESSAGE, 10, [])


def test_max_bytes_limit_returns_at_least_one(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(5):
        store.put(make_msg(body=b"x" * 1000))
    res = store.get_messages("TopicTest", 0, 0, 32, max_bytes=10)
    assert (res.message_count, res.next_begin_offset) == (1, 1)
    res = store.get_messages("TopicTest", 0, 0, 32, max_bytes=2500)
    assert res.message_count == 2 and res.buffer_total_size <= 2500


def test_a_batch_with_properties_that_are_not_utf8_is_refused(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    good = MessageBatch.of([make_msg(properties="K\x01v"), make_msg(properties="K\x01w")])
    assert good is not None
    spoilt = dataclasses.replace(good, properties=[b"K\x01v", b"K\x01\xff"])
    assert store.put_batch(spoilt).status is PutStatus.MESSAGE_ILLEGAL
    # Cut at the join between two messages' properties: still refused.
    cut = dataclasses.replace(good, properties=[b"K\x01\xc3", b"\xa9"])
    assert store.put_batch(cut).status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog_max_offset == 0
    assert store.put_batch(good).status is PutStatus.PUT_OK
    # Crash recovery decodes every record's properties: a stored non-UTF-8 one would end the log there.
    crash(store)
    assert open_store().max_offset("TopicTest", 0) == 2


def test_put_rejections(open_store: OpenStore) -> None:
    store = open_store(max_message_size=1000)
    assert store.put(make_msg(body=b"x" * 1001)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put(make_msg(properties="K\x01" + "v" * 33000)).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put(make_msg(topic="t" * 128)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put(make_msg(topic="../etc")).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put(make_msg(queue_id=-1)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put(make_msg(sys_flag=0x10)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put(make_msg(flag=2**40)).status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog_max_offset == 0
    assert store.put(make_msg(topic="t" * 127)).status is PutStatus.PUT_OK
    store.shutdown()
    assert store.put(make_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_prepared_transaction_records_get_no_unit(open_store: OpenStore) -> None:
    store = open_store()
    res = store.put(make_msg(sys_flag=0x4))
    assert res.status is PutStatus.PUT_OK and res.queue_offset == 0
    assert store.max_offset("TopicTest", 0) == 0
    view = store.message_at(res.commitlog_offset)
    assert view is not None and decode_records(view)[0].queue_offset == 0
    assert store.put(make_msg(sys_flag=0x8)).queue_offset == 0  # commit: a normal unit
    assert store.max_offset("TopicTest", 0) == 1


def test_schedule_topic_tags_code_is_delivery_time(open_store: OpenStore) -> None:
    store = open_store()
    res = store.put(make_msg("SCHEDULE_TOPIC_XXXX", 2, properties="DELAY\x013\x02TAGS\x01x"))
    cq = store._queue("SCHEDULE_TOPIC_XXXX", 2)
    assert cq is not None
    unit = cq.unit(0)
    assert unit is not None and unit[2] == res.store_timestamp + 10_000  # level 3 = 10s
    # A batch gets each message's own delivery time.
    batch = [make_msg("SCHEDULE_TOPIC_XXXX", 2, properties=f"DELAY\x01{level}") for level in (1, 4)]
    res = store.put_batch(batch)
    assert res.status is PutStatus.PUT_OK
    units = [cq.unit(1), cq.unit(2)]
    assert [u[2] if u else None for u in units] == [res.store_timestamp + 1_000, res.store_timestamp + 30_000]


def test_offset_by_timestamp(open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    assert store.offset_by_timestamp("TopicTest", 0, 5) == 0
    assert store.earliest_store_time("TopicTest", 0) == -1
    clock = iter([1000, 1000, 2000, 4000, 4000, 9000])
    monkeypatch.setattr(store_module, "_time_ns", lambda: next(clock) * 1_000_000)
    for _ in range(6):
        store.put(make_msg())
    # store times by offset: 0:1000 1:1000 2:2000 3:4000 4:4000 5:9000
    assert store.offset_by_timestamp("TopicTest", 0, 1000) == 0  # exact: the first one
    assert store.offset_by_timestamp("TopicTest", 0, 4000) == 3
    assert store.offset_by_timestamp("TopicTest", 0, 500) == 0  # before all: first
    assert store.offset_by_timestamp("TopicTest", 0, 99999) == 5  # after all: last, not max
    assert store.offset_by_timestamp("TopicTest", 0, 2900) == 2  # nearer is the left one
    assert store.offset_by_timestamp("TopicTest", 0, 3100) == 3  # nearer is the right one
    assert store.offset_by_timestamp("TopicTest", 0, 3000) == 2  # tie: left
    assert store.earliest_store_time("TopicTest", 0) == 1000
    assert store.store_time_at("TopicTest", 0, 5) == 9000
    assert store.store_time_at("TopicTest", 0, 6) == -1


def test_store_timestamps_never_go_back(open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    clock = iter([5000, 3000])
    monkeypatch.setattr(store_module, "_time_ns", lambda: next(clock) * 1_000_000)
    assert store.put(make_msg()).store_timestamp == 5000
    assert store.put(make_msg()).store_timestamp == 5000


def test_arrival_listener(open_store: OpenStore) -> None:
    store = open_store()
    calls: list[tuple[str, int, int, int]] = []
    store.add_arrival_listener(lambda *args: calls.append(args))

    def broken(*args: object) -> None:
        raise RuntimeError("listener bug")

    store.add_arrival_listener(broken)  # logged, never breaks a put
    store.put(make_msg(queue_id=2, tags_code=7))
    store.put_batch([make_msg(queue_id=2, tags_code=t) for t in (1, 2, 1)])
    assert calls == [("TopicTest", 2, 1, 7), ("TopicTest", 2, 4, 1), ("TopicTest", 2, 4, 2)]


def test_delete_topic(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    for q in range(3):
        store.put(make_msg("Gone", q))
    store.put(make_msg("Kept", 0))
    store.delete_topic("Gone")
    assert not (tmp_path / "store" / "consumequeue" / "Gone").exists()
    assert store.queue_ids("Gone") == []
    assert store.get_messages("Gone", 0, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.max_offset("Gone", 0) == 0
    assert bodies(store, "Kept", 0) == [b"hello"]
    # Re-created, the queue starts over.
    assert store.put(make_msg("Gone", 0)).queue_offset == 0
    store.shutdown()
    store = open_store()
    assert store.queue_ids("Gone") == [0] and store.max_offset("Gone", 0) == 1


def test_clean_restart_keeps_everything(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    for i in range(300):
        store.put(make_msg(f"T{i % 3}", i % 4, bytes([i % 256]) * (i + 1), f"TAGS\x01t{i % 5}", i % 5))
    before = {
        (t, q): (store.min_offset(t, q), store.max_offset(t, q), bodies(store, t, q))
        for t in ("T0", "T1", "T2")
        for q in range(4)
    }
    end = store.commitlog_max_offset
    store.shutdown()
    store.shutdown()  # idempotent
    assert not (tmp_path / "store" / "abort").exists()
    store = open_store()
    assert (tmp_path / "store" / "abort").exists()
    assert store.commitlog_max_offset == end
    after = {
        (t, q): (store.min_offset(t, q), store.max_offset(t, q), bodies(store, t, q)) for (t, q) in before
    }
    assert after == before
    res = store.put(make_msg("T0", 0))
    assert res.commitlog_offset == end and res.queue_offset == before[("T0", 0)][1]


def test_same_object_restarts(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.start()
    store.start()  # already running: no-op
    store.put(make_msg(body=b"one"))
    store.shutdown()
    store.start()
    try:
        assert store.put(make_msg(body=b"two")).queue_offset == 1
        assert bodies(store, "TopicTest", 0) == [b"one", b"two"]
    finally:
        store.shutdown()


_WRITE_FAILS_PART_WAY = """
import json, resource, signal, sys
from pathlib import Path
from store_testlib import bodies, crash, make_msg, small_config
from cometmq.store import MessageStore

def batch(tag):
    return [make_msg(body=f"{tag}{i}".encode() * 1000) for i in range(4)]  # 8.4 KiB a batch

store = MessageStore(small_config(Path(sys.argv[1])))
store.start()
statuses = [store.put_batch(batch("a")).status.name]
# Writes past 12 KiB now fail part way, as on a disk that fills up during the write.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, hard))
statuses.append(store.put_batch(batch("b")).status.name)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
crash(store)  # as kill -9: b's first record, written whole before the cut, must not come back
store = MessageStore(small_config(Path(sys.argv[1])))
store.start()
after_crash = [b.decode()[:2] for b in bodies(store, "TopicTest", 0)]
statuses.append(store.put_batch(batch("c")).status.name)
store.shutdown()
store = MessageStore(small_config(Path(sys.argv[1])))
store.start()
print(json.dumps({"statuses": statuses, "after_crash": after_crash,
                  "bodies": [b.decode()[:2] for b in bodies(store, "TopicTest", 0)]}))
store.shutdown()
"""


def test_a_batch_whose_write_fails_part_way_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """A real short write, made with RLIMIT_FSIZE in a child process (the limit is per process):
    the batch is refused as on a full disk, nothing of it is ever readable, not even after a crash
    (its first record was written whole), and the next batch takes its place."""
    done = run_child(_WRITE_FAILS_PART_WAY, str(tmp_path / "store"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statuses"] == ["PUT_OK", "SERVICE_NOT_AVAILABLE", "PUT_OK"]
    assert result["after_crash"] == ["a0", "a1", "a2", "a3"]
    assert result["bodies"] == ["a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3"]
    assert "cannot write to the commit log" in done.stderr and "short write" in done.stderr


@pytest.mark.parametrize("how", ["clean", "crash"])
def test_the_last_store_time_is_read_back_from_the_log_at_start(open_store: OpenStore, how: str) -> None:
    store = open_store()
    assert store.last_store_timestamp == 0
    for i in range(200):  # several segments: the last record is not in the first one
        store.put(make_msg(f"T{i % 3}", 0, b"x" * 500))
    last = store.store_time_at("T1", 0, store.max_offset("T1", 0) - 1)
    assert store.last_store_timestamp == last > 0
    if how == "crash":
        crash(store)
    else:
        store.shutdown()
    assert open_store().last_store_timestamp == last
