"""SYNC_FLUSH writes records with pwrite into blocks the commit log wrote ahead of the writer.

The zeros ahead (``CommitLog.warm_ahead``) make every group commit a sync of blocks written before,
which is cheaper than one that also commits newly allocated blocks. These tests check where the zeros
go, that they never land on a record, and that a failed write loses nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from store_testlib import bodies, crash, make_msg, run_child, small_config

from cometmq.store import FlushDiskType, MessageStore, PutStatus
from cometmq.store._commitlog import RESERVE_STEP, WARM_AHEAD, WARM_CHUNK

SEGMENT = 16 << 20


def first_hole(path: Path, start: int = 0) -> int:
    """Where the first hole (unwritten blocks) at or after *start* begins; the file's size if none."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, start, os.SEEK_HOLE)
    finally:
        os.close(fd)


def segment_path(root: Path, start: int = 0) -> Path:
    return root / "commitlog" / f"{start:020d}"


def open_store(root: Path, mode: FlushDiskType, segment: int = SEGMENT) -> MessageStore:
    store = MessageStore(small_config(root, mapped_file_size_commitlog=segment, flush_disk_type=mode))
    store.start()
    return store


def test_sync_flush_keeps_the_blocks_ahead_of_the_writer_written(tmp_path: Path) -> None:
    store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH)
    try:
        for i in range(300):
            assert store.put(make_msg(body=bytes([i % 256]) * 1000)).status is PutStatus.PUT_OK
        end = store.commitlog_max_offset
        path = segment_path(tmp_path)
        # No hole from the start to at least a chunk short of WARM_AHEAD past the writer ...
        assert first_hole(path) >= end + WARM_AHEAD - WARM_CHUNK
        # ... and what lies ahead reads as zeros, as an unwritten tail does (recovery stops there).
        with path.open("rb") as f:
            f.seek(end)
            assert f.read(WARM_AHEAD - WARM_CHUNK) == bytes(WARM_AHEAD - WARM_CHUNK)
        assert bodies(store, "TopicTest", 0) == [bytes([i % 256]) * 1000 for i in range(300)]
    finally:
        store.shutdown()


def test_a_chunk_larger_than_the_zeros_kept_is_taken_as_their_size(tmp_path: Path) -> None:
    store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH)
    try:
        store._commitlog.warm_chunk = 4 * WARM_CHUNK
        assert store.put(make_msg(body=b"x" * 1000)).status is PutStatus.PUT_OK
        assert first_hole(segment_path(tmp_path)) >= store.commitlog_max_offset + WARM_AHEAD - WARM_CHUNK
    finally:
        store.shutdown()


@pytest.mark.parametrize("mode", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_a_segment_takes_disk_as_it_fills_with_its_blocks_reserved_ahead_of_the_writer(
    tmp_path: Path, mode: FlushDiskType
) -> None:
    """A store into a mapped page the filesystem has no block for is a SIGBUS on a full disk: every
    byte the writer stores is in blocks reserved before, a step at a time, so a new segment takes a
    step of disk rather than its full size."""
    segment = 256 << 20
    store = open_store(tmp_path, mode, segment)
    try:
        path = segment_path(tmp_path)
        cl = store._commitlog
        assert cl.cur is not None

        def on_disk() -> int:
            return os.stat(path).st_blocks * 512

        at_creation = on_disk()
        assert at_creation <= RESERVE_STEP
        while store.commitlog_max_offset < 3 * RESERVE_STEP:
            assert store.put(make_msg(body=b"x" * 1000)).status is PutStatus.PUT_OK
            assert cl.wrote_pos + 8 <= cl.cur.reserved_to  # the record and a blank filler after it
        assert on_disk() >= cl.cur.reserved_to > at_creation
        # Under SYNC_FLUSH also the zeros written ahead; far below the segment either way.
        assert on_disk() <= store.commitlog_max_offset + RESERVE_STEP + WARM_AHEAD + (1 << 20) < segment // 8
    finally:
        store.shutdown()


def test_zeros_never_land_on_records_when_a_batch_overtakes_them(tmp_path: Path) -> None:
    """A batch larger than WARM_AHEAD carries the writer past the zeros written so far; the next
    zeros must start after it, or they would wipe its tail."""
    store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH)
    expected: list[bytes] = []

    def single(tag: int) -> None:
        body = f"single-{tag}".encode() * 50
        assert store.put(make_msg(body=body)).status is PutStatus.PUT_OK
        expected.append(body)

    def batch(tag: int) -> None:
        batch_bodies = [f"batch-{tag}-{i}".encode() * 8000 for i in range(64)]  # ≈ 5 MiB
        assert sum(map(len, batch_bodies)) > WARM_AHEAD
        assert store.put_batch([make_msg(body=b) for b in batch_bodies]).status is PutStatus.PUT_OK
        expected.extend(batch_bodies)

    try:
        for round_ in range(2):
            single(round_)
            batch(round_)
            single(round_ + 10)
        assert bodies(store, "TopicTest", 0) == expected
        store.shutdown()
        store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH)
        assert bodies(store, "TopicTest", 0) == expected
        single(99)
        crash(store)
        store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH)  # recovery scans every record
        assert bodies(store, "TopicTest", 0) == expected
    finally:
        store.shutdown()


def test_each_new_segment_is_written_ahead_from_its_first_record(tmp_path: Path) -> None:
    segment = 1 << 20  # smaller than WARM_AHEAD: a segment is warmed whole
    store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH, segment)
    try:
        starts = []
        for i in range(2500):  # ≈ 2.6 MiB: three segments
            res = store.put(make_msg(body=b"%06d" % i * 170))
            assert res.status is PutStatus.PUT_OK
            start = res.commitlog_offset // segment * segment
            if start not in starts:
                starts.append(start)
                assert first_hole(segment_path(tmp_path, start)) == segment
        assert len(starts) == 3
        expected = [b"%06d" % i * 170 for i in range(2500)]
        assert bodies(store, "TopicTest", 0) == expected
        crash(store)
        store = open_store(tmp_path, FlushDiskType.SYNC_FLUSH, segment)
        assert bodies(store, "TopicTest", 0) == expected
    finally:
        store.shutdown()


_SYNC_WRITE_FAILS = """
import json, resource, signal, sys
from pathlib import Path
from store_testlib import bodies, crash, make_msg, small_config
from cometmq.store import FlushDiskType, MessageStore

def config():
    return small_config(Path(sys.argv[1]), flush_disk_type=FlushDiskType.SYNC_FLUSH)

store = MessageStore(config())
store.start()
# Writes past 12 KiB fail part way, as on a disk that fills up: the zeros the first put writes ahead
# (over the whole 64 KiB segment) stop short, then the puts that cross 12 KiB fail.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, hard))
statuses = [store.put(make_msg(body=f"a{i}".encode() * 1000)).status.name for i in range(7)]
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
crash(store)  # as kill -9: what the refused puts left in the file must not come back
store = MessageStore(config())
store.start()
after_crash = [b.decode()[:2] for b in bodies(store, "TopicTest", 0)]
statuses.append(store.put(make_msg(body=b"c0" * 100)).status.name)
store.shutdown()
store = MessageStore(config())
store.start()
print(json.dumps({"statuses": statuses, "after_crash": after_crash,
                  "bodies": [b.decode()[:2] for b in bodies(store, "TopicTest", 0)]}))
store.shutdown()
"""


def test_a_sync_flush_put_whose_write_fails_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """A real short write (RLIMIT_FSIZE, in a child process): the zeros ahead stop with a warning,
    each put that cannot be written is refused, none of it is readable, not even after a crash, and
    once writes work again the next put (a shorter one, so it does not cover what they left) takes
    their place."""
    done = run_child(_SYNC_WRITE_FAILS, str(tmp_path / "store"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 2 KiB bodies: five records fit below 12 KiB, the sixth and seventh cross it.
    # Refused as on a full disk (a short write means no room), and so is the next put until the
    # store looks at the disk again.
    assert result["statuses"] == ["PUT_OK"] * 5 + ["SERVICE_NOT_AVAILABLE"] * 2 + ["PUT_OK"]
    assert result["after_crash"] == ["a0", "a1", "a2", "a3", "a4"]
    assert result["bodies"] == ["a0", "a1", "a2", "a3", "a4", "c0"]
    assert "stopped writing ahead" in done.stderr
    assert "cannot write to the commit log" in done.stderr and "short write" in done.stderr


def test_both_modes_store_the_same_bytes(tmp_path: Path) -> None:
    """A record written with pwrite (SYNC_FLUSH) is the record the mapping holds under ASYNC_FLUSH."""
    records = []
    for mode in FlushDiskType:
        store = open_store(tmp_path / mode.value, mode)
        try:
            res = store.put(make_msg(body=b"same", properties="KEYS\x01k\x02", tags_code=7))
            record = store._commitlog.record_at(res.commitlog_offset)
            assert record is not None
            records.append(bytes(record[:56]) + bytes(record[64:]))  # all but STORETIMESTAMP
        finally:
            store.shutdown()
    assert records[0] == records[1]
