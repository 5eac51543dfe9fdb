"""A slave's store: commit-log bytes copied from a master store with ``ha_readable`` and
``append_replica``, as the HA link does, on real files with small (64 KiB) segments."""

from __future__ import annotations

import errno
import logging
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_testlib import SMALL_COMMITLOG, crash, make_msg, small_config

from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import BLANK_MAGIC_CODE, decode_records
from cometmq.store import GetStatus, MessageStore, PutStatus, ReplicaOffsetError, StoreError
from cometmq.store._dispatch import indexed_properties
from cometmq.store._mappedfile import MappedFile
from cometmq.store.format import file_name
from waiting import wait_until_blocking

OpenStore = Callable[..., MessageStore]
TOPICS = ("A", "B")
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
TIMER = "rmq_sys_wheel_timer"
QUEUES = 3


def started(root: Path, **kw: object) -> MessageStore:
    store = MessageStore(small_config(root, **kw))
    store.start()
    return store


def put_some(store: MessageStore, rng: random.Random, count: int, max_body: int = 6000) -> None:
    """*count* messages of random sizes over two topics and three queues, singly and in batches,
    with index keys; now and then a delayed or a timer message (its unit's tags code is its delivery
    time) or a prepared transaction message (no unit)."""
    done = 0
    while done < count:
        topic = rng.choice(TOPICS)
        queue_id = rng.randrange(QUEUES)
        n = min(count - done, rng.choice((1, 1, 1, 3)))
        msgs = []
        for _ in range(n):
            key = f"k{rng.randrange(1 << 30)}"
            msgs.append(
                make_msg(
                    topic,
                    queue_id,
                    rng.randbytes(rng.randrange(max_body)),
                    properties=encode_properties({"KEYS": key, "TAGS": "t"}),
                    tags_code=116,  # java_string_hash("t")
                    keys=key,
                )
            )
        kind = rng.randrange(10)
        if n == 1 and kind == 0:
            delay = encode_properties({"DELAY": str(queue_id + 1)})  # queue = delay level - 1
            msgs = [make_msg(SCHEDULE, queue_id, b"later", properties=delay)]
        elif n == 1 and kind == 1:
            msgs = [make_msg(topic, queue_id, b"prepared", sys_flag=0x4)]
        elif n == 1 and kind == 2:
            due = rng.randrange(1 << 40, 1 << 41)
            timed = encode_properties({"TIMER_OUT_MS": str(due), "TAGS": "t"})
            msgs = [make_msg(TIMER, 0, b"timed", properties=timed, tags_code=due)]
        res = store.put(msgs[0]) if n == 1 else store.put_batch(msgs)
        assert res.status is PutStatus.PUT_OK
        done += n


def copy(
    master: MessageStore, slave: MessageStore, chunk_size: Callable[[], int], start: int | None = None
) -> int:
    """Ship everything the master has to the slave, in chunks of ``chunk_size()`` bytes at most, as
    the HA link does: an empty slave starts at the master's last segment (or at *start*). Returns
    the chunk count."""
    offset = slave.replica_end() or (master.ha_start_for_empty_slave() if start is None else start)
    chunks = 0
    while True:
        view = master.ha_readable(offset, chunk_size())
        size = len(view)
        if not size:
            return chunks
        try:
            end = slave.append_replica(offset, view)
        finally:
            view.release()
        assert end == offset + size
        offset = end
        chunks += 1


def log_bytes(root: Path, start: int, end: int) -> bytes:
    """Commit-log bytes [start, end), read from the segment files."""
    out = bytearray()
    for path in sorted((root / "commitlog").iterdir()):
        seg_start = int(path.name)
        data = path.read_bytes()
        lo, hi = max(start, seg_start), min(end, seg_start + len(data))
        if lo < hi:
            out += data[lo - seg_start : hi - seg_start]
    assert len(out) == end - start
    return bytes(out)


def messages(store: MessageStore, topic: str, queue_id: int, start: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message from *start* on, read with get_messages."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        res = store.get_messages(topic, queue_id, offset, 32)
        if res.status is not GetStatus.FOUND:
            return out
        out += [(r.queue_offset, r.body) for r in decode_records(b"".join(res.buffers), check_crc=True)]
        offset = res.next_begin_offset


def assert_replica_of(master: MessageStore, master_root: Path, slave: MessageStore, slave_root: Path) -> None:
    """The slave's commit log is the master's, byte for byte over the slave's range (blank fillers
    included); consume-queue units agree where both have them; the same messages are read at the
    same queue offsets."""
    start, end = slave.commitlog_min_offset, slave.replica_end()
    assert end == master.replica_end()
    assert slave.commitlog_max_offset == master.commitlog_max_offset
    assert log_bytes(slave_root, start, end) == log_bytes(master_root, start, end)
    for topic in (*TOPICS, SCHEDULE, TIMER):
        for queue_id in range(QUEUES):
            low = slave.min_offset(topic, queue_id)
            high = slave.max_offset(topic, queue_id)
            if not high:  # none of the queue's records is in the slave's range
                newest = master.queue_unit(topic, queue_id, master.max_offset(topic, queue_id) - 1)
                assert newest is None or newest[0] < start
                continue
            assert high == master.max_offset(topic, queue_id)
            for offset in range(low, high):
                assert slave.queue_unit(topic, queue_id, offset) == master.queue_unit(topic, queue_id, offset)
            assert messages(slave, topic, queue_id, low) == messages(master, topic, queue_id, low)
            # The slave's queue starts at the queue's first record in the slave's range.
            unit = master.queue_unit(topic, queue_id, low)
            assert unit is not None and unit[0] >= start
            before = master.queue_unit(topic, queue_id, low - 1)
            assert low == master.min_offset(topic, queue_id) or (before is not None and before[0] < start)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    master = started(tmp_path / "master")
    slave = started(tmp_path / "slave")
    yield master, slave
    master.shutdown()
    slave.shutdown()


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    history=st.integers(0, 120),
    rounds=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from([1, 7, 100, 4096, 32768, 70000]),
            st.sampled_from(["go on", "go on", "restart", "crash"]),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_a_slave_copied_in_random_chunks_holds_the_masters_bytes_units_and_messages(
    seed: int, history: int, rounds: list[tuple[int, int, str]]
) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="cometmq-replica-") as tmp:
        master_root, slave_root = Path(tmp) / "master", Path(tmp) / "slave"
        master = started(master_root)
        slave = started(slave_root)
        try:
            put_some(master, rng, history)
            for puts, max_chunk, then in rounds:
                put_some(master, rng, puts)
                copy(master, slave, lambda: rng.randint(1, max_chunk))  # noqa: B023
                assert_replica_of(master, master_root, slave, slave_root)
                if then == "go on":
                    continue
                # Stop with the slave likely inside a record (or a blank filler): a clean shutdown
                # or a kill -9 (in process: no flush, no checkpoint) drops it, and copying resumes.
                put_some(master, rng, 3)
                end = slave.replica_end()
                view = master.ha_readable(end, rng.randint(1, 9000))
                slave.append_replica(end, view)
                view.release()
                if then == "crash":
                    crash(slave)
                else:
                    slave.shutdown()
                slave = started(slave_root)
                assert slave.replica_end() == slave.commitlog_max_offset
                assert end <= slave.replica_end() <= master.replica_end()
            newest = master.queue_unit("A", 0, slave.max_offset("A", 0) - 1)
            if newest is not None:  # the slave indexed the keys of what it holds
                record = master.message_at(newest[0])
                assert record is not None
                rec = decode_records(bytes(record))[0]
                found = slave.query_messages("A", decode_properties(rec.properties)["KEYS"], 8, 0, 1 << 62)
                assert [r.body for r in decode_records(b"".join(found.buffers))] == [rec.body]
        finally:
            master.shutdown()
            slave.shutdown()


@settings(max_examples=500)
@given(st.lists(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "S", "X", "\x01", "\x02", "é"]), max_size=12))
def test_a_slave_reads_tags_and_keys_as_decoding_the_properties_does(pieces: list[str]) -> None:
    properties = "".join(pieces)
    decoded = decode_properties(properties)
    wanted = tuple(decoded.get(name, "") for name in ("TAGS", "UNIQ_KEY", "KEYS"))
    assert indexed_properties(properties) == wanted


def test_an_empty_slave_starts_at_the_masters_last_segment(tmp_path: Path) -> None:
    master = started(tmp_path / "master")
    slave = started(tmp_path / "slave")
    try:
        put_some(master, random.Random(3), 200)  # several 64 KiB segments
        last = master.ha_start_for_empty_slave()
        assert last >= 3 * SMALL_COMMITLOG
        assert last % SMALL_COMMITLOG == 0
        assert last < master.commitlog_max_offset <= last + SMALL_COMMITLOG
        copy(master, slave, lambda: 32768)
        assert sorted(os.listdir(tmp_path / "slave" / "commitlog")) == [file_name(last)]
        assert slave.commitlog_min_offset == last
        for topic in TOPICS:
            for queue_id in range(QUEUES):
                if not slave.max_offset(topic, queue_id):
                    continue  # none of its records is in the last segment (assert_replica_of checks)
                low = slave.min_offset(topic, queue_id)
                assert low > master.min_offset(topic, queue_id)  # the master's history is not copied
                first = master.queue_unit(topic, queue_id, low)
                before = master.queue_unit(topic, queue_id, low - 1)
                assert first is not None and first[0] >= last
                assert before is not None and before[0] < last
                got = slave.get_messages(topic, queue_id, low - 1, 1)
                assert got.status is GetStatus.OFFSET_TOO_SMALL
        assert_replica_of(master, tmp_path / "master", slave, tmp_path / "slave")
        slave.shutdown()
        slave = started(tmp_path / "slave")  # the queues' min offsets survive a restart
        assert_replica_of(master, tmp_path / "master", slave, tmp_path / "slave")
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_record_larger_than_a_chunk_is_dispatched_once_complete(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    arrivals: list[tuple[str, int, int, int]] = []
    slave.add_arrival_listener(lambda *args: arrivals.append(args))
    assert master.put(make_msg("A", 1, b"x" * 20_000)).status is PutStatus.PUT_OK
    record_end = master.commitlog_max_offset
    offset = 0
    while offset + 4096 < record_end:
        view = master.ha_readable(offset, 4096)
        offset = slave.append_replica(offset, view)
        view.release()
        assert slave.replica_end() == offset  # the partial record's bytes count
        assert slave.commitlog_max_offset == 0  # but it is not published
        assert slave.max_offset("A", 1) == 0
        assert arrivals == []
        # Puts must not write after a partial record.
        assert slave.put(make_msg("A", 1, b"mine")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert slave.write_refusal is not None and "master is still sending" in slave.write_refusal
    view = master.ha_readable(offset, 4096)
    assert slave.append_replica(offset, view) == record_end
    view.release()
    assert slave.commitlog_max_offset == record_end
    assert messages(slave, "A", 1, 0) == [(0, b"x" * 20_000)]
    assert arrivals == [("A", 1, 1, 0)]
    assert slave.write_refusal is None
    flushed = wait_until_blocking(
        lambda: slave.commitlog_flushed_offset == record_end, message="the slave's flush thread to sync it"
    )
    assert flushed


def test_a_partial_record_waits_in_memory_and_is_sent_again_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    master = started(tmp_path / "master")
    slave = started(tmp_path / "slave")
    try:
        put_some(master, random.Random(5), 10)
        copy(master, slave, lambda: 100_000)
        first_end = slave.replica_end()
        assert master.put(make_msg("A", 0, b"y" * 9000)).status is PutStatus.PUT_OK
        view = master.ha_readable(first_end, 3000)
        slave.append_replica(first_end, view)
        view.release()
        assert slave.replica_end() == first_end + 3000
        slave.shutdown()
        caplog.clear()
        caplog.set_level(logging.INFO, logger="cometmq.store")
        slave = started(tmp_path / "slave")
        assert any("store opened after a clean shutdown" in m for m in caplog.messages)
        assert not any("recovery" in m for m in caplog.messages), caplog.messages
        assert slave.replica_end() == slave.commitlog_max_offset == first_end
        copy(master, slave, lambda: 5000)
        assert_replica_of(master, tmp_path / "master", slave, tmp_path / "slave")
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_chunk_the_disk_cannot_take_is_refused_and_the_copy_resumes(
    pair: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, slave = pair
    put_some(master, random.Random(6), 20, max_body=3000)
    view = master.ha_readable(master.ha_start_for_empty_slave(), 10_000)  # ends inside a record
    end = slave.append_replica(master.ha_start_for_empty_slave(), view)
    view.release()

    def failing_write(self: object, pos: int, data: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr(MappedFile, "write_at", failing_write)
        view = master.ha_readable(end, 10_000)
        with pytest.raises(StoreError, match="cannot write to the commit log"):
            slave.append_replica(end, view)
        view.release()
    assert slave.replica_end() == end  # nothing of the refused chunk is kept
    copy(master, slave, lambda: 10_000)
    assert slave.replica_end() == master.replica_end()


def test_an_offset_that_is_not_the_slaves_end_is_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    put_some(master, random.Random(1), 20)
    copy(master, slave, lambda: 1000)
    end = slave.replica_end()
    put_some(master, random.Random(2), 5)
    for wrong in (end - 1, end + 1, 0):
        view = master.ha_readable(end, 100)
        with pytest.raises(ReplicaOffsetError) as refused:
            slave.append_replica(wrong, view)
        view.release()
        assert f"from offset {wrong}, but this store's commit log ends at {end}" in str(refused.value)
    assert slave.replica_end() == end
    copy(master, slave, lambda: 1000)  # the right offset still goes on
    assert slave.replica_end() == master.replica_end()


def test_an_empty_slave_refuses_a_start_that_is_not_a_segment_start(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    _, slave = pair
    with pytest.raises(ReplicaOffsetError, match=r"not a segment start .*mappedFileSizeCommitLog"):
        slave.append_replica(SMALL_COMMITLOG + 4096, b"\0" * 16)
    assert slave.replica_end() == 0


@pytest.mark.parametrize("slave_segment", [SMALL_COMMITLOG // 2, SMALL_COMMITLOG * 2])
def test_a_segment_size_mismatch_is_refused_with_what_to_check(tmp_path: Path, slave_segment: int) -> None:
    master = started(tmp_path / "master")
    slave = started(tmp_path / "slave", mapped_file_size_commitlog=slave_segment)
    try:
        put_some(master, random.Random(4), 60)  # past the master's first segment
        fit = f"does not fit this store's segments: .*mappedFileSizeCommitLog.* {slave_segment} bytes"
        with pytest.raises(ReplicaOffsetError, match=fit):
            copy(master, slave, lambda: 32768, start=0)
        stopped_at = slave.replica_end()
        assert stopped_at == slave.commitlog_max_offset  # what was accepted is whole records
        assert stopped_at < master.replica_end()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_corrupt_chunk_is_refused_and_the_records_before_it_are_kept(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    sizes = []
    for i in range(5):
        assert master.put(make_msg("A", 0, bytes([i]) * 500)).status is PutStatus.PUT_OK
        sizes.append(master.commitlog_max_offset)
    chunk = bytearray(master.ha_readable(0, 1 << 20))
    chunk[sizes[2] + 200] ^= 0xFF  # inside the body of the fourth record
    with pytest.raises(ReplicaOffsetError, match=f"offset {sizes[2]} are not a valid record: .*CRC"):
        slave.append_replica(0, chunk)
    assert slave.replica_end() == slave.commitlog_max_offset == sizes[2]
    assert [body for _, body in messages(slave, "A", 0, 0)] == [bytes([i]) * 500 for i in range(3)]
    copy(master, slave, lambda: 700)  # the master sends the rest again from the slave's end
    assert [body for _, body in messages(slave, "A", 0, 0)] == [bytes([i]) * 500 for i in range(5)]


def test_a_record_in_rocketmq_5s_v2_format_is_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    assert master.put(make_msg("A", 0, b"one")).status is PutStatus.PUT_OK
    first_end = master.commitlog_max_offset
    assert master.put(make_msg("A", 0, b"two")).status is PutStatus.PUT_OK
    chunk = bytearray(master.ha_readable(0, 1 << 20))
    chunk[first_end + 4 : first_end + 8] = bytes.fromhex("DAA320AB")  # MESSAGE_MAGIC_CODE_V2
    with pytest.raises(ReplicaOffsetError, match=f"offset {first_end} .*message format V2"):
        slave.append_replica(0, chunk)
    assert slave.replica_end() == first_end


def test_zeros_where_a_record_should_start_are_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    _, slave = pair
    with pytest.raises(ReplicaOffsetError, match="zero bytes where a record should start"):
        slave.append_replica(0, bytes(200))
    assert slave.replica_end() == 0


def test_ha_readable_outside_the_log_is_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    put_some(master, random.Random(6), 200)
    copy(master, slave, lambda: 32768)
    low = slave.commitlog_min_offset
    assert low > 0
    with pytest.raises(
        ReplicaOffsetError, match=f"offset {low - 1} is below this store's first offset {low}"
    ):
        slave.ha_readable(low - 1, 100)
    end = master.replica_end()
    with pytest.raises(ReplicaOffsetError, match=f"offset {end + 1} is beyond this store's end {end}"):
        master.ha_readable(end + 1, 100)
    assert len(master.ha_readable(end, 100)) == 0
    assert len(slave.ha_readable(low, 100)) == 100  # a slave can be read from in turn


def test_a_sealed_segment_is_readable_to_its_end_and_a_chunk_never_crosses_it(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, _ = pair
    put_some(master, random.Random(8), 60)
    assert master.commitlog_min_offset == 0 and master.commitlog_max_offset > SMALL_COMMITLOG
    tail = master.ha_readable(SMALL_COMMITLOG - 100, 1 << 20)
    assert len(tail) == 100  # to the segment's end, past its last record (the blank filler's zeros)
    whole = master.ha_readable(0, 1 << 20)
    assert len(whole) == SMALL_COMMITLOG
    assert master.ha_readable(SMALL_COMMITLOG, 10).tobytes()[4:8] == bytes.fromhex("DAA320A7")


_APPEND_THEN_WAIT = """
import sys
from pathlib import Path
from store_testlib import small_config
from cometmq.store import MessageStore

master_root, slave_root, cut = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
master = MessageStore(small_config(master_root))
master.start()
slave = MessageStore(small_config(slave_root))
slave.start()
offset = 0
while offset < cut:
    view = master.ha_readable(offset, min(1777, cut - offset))
    offset = slave.append_replica(offset, view)
    view.release()
print(slave.replica_end(), slave.commitlog_max_offset, flush=True)
sys.stdin.readline()  # killed here
"""


def first_segment_ends(master: MessageStore) -> tuple[int, int]:
    """Where the first segment's last record starts, and where its blank filler starts."""
    data = master.ha_readable(0, SMALL_COMMITLOG).tobytes()
    last = pos = 0
    while True:
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC_CODE:
            return last, pos
        last, pos = pos, pos + total


@pytest.mark.parametrize("cut_inside", ["a record", "a blank filler's header", "a blank filler's zeros"])
def test_a_slave_killed_between_chunks_resumes_at_its_last_whole_record(
    tmp_path: Path, cut_inside: str
) -> None:
    master_root, slave_root = tmp_path / "master", tmp_path / "slave"
    master = started(master_root)
    put_some(master, random.Random(9), 40, max_body=9000)
    last_record, blank = first_segment_ends(master)
    assert SMALL_COMMITLOG - blank > 20
    master.shutdown()  # the child opens it (one store per directory)
    cut, published, recovered_end = {
        "a record": (last_record + 100, last_record, last_record),
        "a blank filler's header": (blank + 4, blank, blank),
        "a blank filler's zeros": (blank + 20, blank, blank),
    }[cut_inside]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-c", _APPEND_THEN_WAIT, str(master_root), str(slave_root), str(cut)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        state = child.stdout.readline()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert list(map(int, state.split())) == [cut, published]  # written, and published
    assert (slave_root / "abort").exists()
    master = started(master_root)
    slave = started(slave_root)
    try:
        assert slave.replica_end() == slave.commitlog_max_offset == recovered_end
        copy(master, slave, lambda: 1777)
        assert_replica_of(master, master_root, slave, slave_root)
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_restarts_cleanly_at_a_segment_end(tmp_path: Path) -> None:
    master = started(tmp_path / "master")
    slave = started(tmp_path / "slave")
    try:
        put_some(master, random.Random(11), 40, max_body=9000)
        assert master.commitlog_max_offset > SMALL_COMMITLOG
        view = master.ha_readable(0, SMALL_COMMITLOG)
        assert slave.append_replica(0, view) == SMALL_COMMITLOG
        view.release()
        assert slave.commitlog_max_offset == SMALL_COMMITLOG  # the blank filler is all there
        slave.shutdown()
        slave = started(tmp_path / "slave")
        assert slave.replica_end() == slave.commitlog_max_offset == SMALL_COMMITLOG
        copy(master, slave, lambda: 5000)
        assert_replica_of(master, tmp_path / "master", slave, tmp_path / "slave")
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_full_disk_refuses_a_chunk_as_it_refuses_a_put(tmp_path: Path) -> None:
    from small_disk import fill, mounted_tmpfs

    with mounted_tmpfs(tmp_path / "disk", 8) as disk:
        master = started(tmp_path / "master", mapped_file_size_commitlog=1 << 20)
        slave = started(disk / "slave", mapped_file_size_commitlog=1 << 20, disk_usage_probe=lambda path: 0.5)
        try:
            put_some(master, random.Random(10), 600)  # several 1 MiB segments
            filler = disk / "filler"
            fill(filler)
            with pytest.raises(StoreError, match="disk full") as refused:
                copy(master, slave, lambda: 32768)
            assert not isinstance(refused.value, ReplicaOffsetError)
            assert slave.replica_end() == slave.commitlog_max_offset
            # In the words a put's refusal uses, and puts are refused too.
            assert slave.write_refusal == str(refused.value)
            assert slave.put(make_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
            filler.unlink()
            slave.clean()  # the disk is looked at again (a refused chunk does so once a second)
            copy(master, slave, lambda: 32768)
            assert_replica_of(master, tmp_path / "master", slave, disk / "slave")
        finally:
            master.shutdown()
            slave.shutdown()


def test_a_full_disk_met_by_a_new_consume_queue_keeps_the_records_before_it(tmp_path: Path) -> None:
    from small_disk import fill, mounted_tmpfs

    with mounted_tmpfs(tmp_path / "disk", 8) as disk:
        master = started(tmp_path / "master", mapped_file_size_commitlog=1 << 20)
        # A 1 MiB segment is reserved whole when it is created: only the new queue's file needs room.
        slave = started(disk / "slave", mapped_file_size_commitlog=1 << 20, disk_usage_probe=lambda path: 0.5)
        try:
            for i in range(5):
                assert master.put(make_msg("A", 0, b"a%d" % i)).status is PutStatus.PUT_OK
            new_queue_at = master.commitlog_max_offset
            assert master.put(make_msg("B", 1, b"b")).status is PutStatus.PUT_OK
            assert master.put(make_msg("A", 0, b"a5")).status is PutStatus.PUT_OK
            view = master.ha_readable(0, new_queue_at)
            slave.append_replica(0, view)
            view.release()
            filler = disk / "filler"
            fill(filler)
            view = master.ha_readable(new_queue_at, 1 << 20)
            with pytest.raises(StoreError, match=r"^disk full: .*; no room for the store files to grow$"):
                slave.append_replica(new_queue_at, view)
            view.release()
            assert slave.replica_end() == slave.commitlog_max_offset == new_queue_at
            assert [body for _, body in messages(slave, "A", 0, 0)] == [b"a%d" % i for i in range(5)]
            filler.unlink()
            slave.clean()
            copy(master, slave, lambda: 1 << 20)
            assert messages(slave, "B", 1, 0) == [(0, b"b")]
            assert [body for _, body in messages(slave, "A", 0, 0)] == [b"a%d" % i for i in range(6)]
        finally:
            master.shutdown()
            slave.shutdown()
