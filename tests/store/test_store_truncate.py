"""Truncation: a returning old master cuts the tail its new master never had, then follows it. The
commit log, consume queues, index and epoch file follow the cut, also across restarts and crashes; a
kill -9 at any point of a truncation leaves the store as it was before or as it is after."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_testlib import SMALL_COMMITLOG, crash, make_msg
from test_replica import (
    QUEUES,
    SCHEDULE,
    TOPICS,
    assert_replica_of,
    copy,
    first_segment_ends,
    log_bytes,
    messages,
    put_some,
    started,
)

from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import decode_records
from cometmq.store import (
    EpochEntry,
    FlushDiskType,
    GetStatus,
    MessageStore,
    PutStatus,
    StoreError,
    consistent_end,
)
from cometmq.store._mappedfile import MappedFile

NEVER = 1 << 62


def keyed(store: MessageStore, key: str) -> list[int]:
    """Commit-log offsets of the records of topic A indexed under *key*."""
    found = store.query_messages("A", key, 32, 0, NEVER)
    return sorted(r.commitlog_offset for r in decode_records(b"".join(found.buffers)))


def put_keyed(store: MessageStore, key: str) -> int:
    res = store.put(make_msg("A", 0, key.encode(), properties=encode_properties({"KEYS": key}), keys=key))
    assert res.status is PutStatus.PUT_OK
    return res.commitlog_offset


def diverge(
    tmp_path: Path, shared: int, old_tail: int, new_tail: int
) -> tuple[MessageStore, MessageStore, int]:
    """An old master and the slave that replaced it: they share *shared* messages (epoch 1); then the
    old master stored *old_tail* more the slave never got, and the slave, master in epoch 2, stored
    *new_tail* of its own. Returns (old master, new master, where their logs part)."""
    rng = random.Random(shared * 1000 + old_tail * 10 + new_tail)
    old, new = started(tmp_path / "old"), started(tmp_path / "new")
    old.begin_epoch(1)
    put_some(old, rng, shared, max_body=9000)
    put_keyed(old, "kept")
    copy(old, new, lambda: 5000, start=0)
    new.adopt_epochs(old.epochs())
    parted = new.replica_end()
    put_some(old, rng, old_tail, max_body=9000)
    put_keyed(old, "gone")
    new.begin_epoch(2)
    put_some(new, rng, new_tail, max_body=9000)
    put_keyed(new, "new")
    return old, new, parted


@pytest.mark.parametrize(
    ("shared", "old_tail", "new_tail"),
    [(10, 3, 5), (10, 40, 2), (30, 0, 30)],
    ids=["within the last segment", "segments of tail", "nothing of its own"],
)
def test_a_returning_master_truncates_to_where_the_logs_part_and_follows_the_new_master(
    tmp_path: Path, shared: int, old_tail: int, new_tail: int
) -> None:
    old, new, parted = diverge(tmp_path, shared, old_tail, new_tail)
    try:
        end = old.replica_end()
        assert consistent_end(old.epochs(), end, new.epochs(), new.replica_end()) == parted
        assert keyed(old, "gone")
        assert old.truncate_to(parted) == end - parted
        assert old.replica_end() == old.commitlog_max_offset == parted
        assert keyed(old, "gone") == [] and len(keyed(old, "kept")) == 1
        assert old.epochs() == [EpochEntry(1, 0)]
        old.adopt_epochs(new.epochs())
        copy(new, old, lambda: 7000)
        assert_replica_of(new, tmp_path / "new", old, tmp_path / "old")
        assert keyed(old, "new") == keyed(new, "new")
        for restart in (MessageStore.shutdown, crash):
            restart(old)
            old = started(tmp_path / "old")
            assert_replica_of(new, tmp_path / "new", old, tmp_path / "old")
            assert old.epochs() == new.epochs() == [EpochEntry(1, 0), EpochEntry(2, parted)]
            assert keyed(old, "gone") == [] and keyed(old, "new") == keyed(new, "new")
    finally:
        old.shutdown()
        new.shutdown()


def test_a_master_truncated_goes_on_taking_puts_at_the_cut(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    try:
        put_some(store, random.Random(3), 20, max_body=9000)
        cut = put_keyed(store, "x")
        put_some(store, random.Random(4), 20, max_body=9000)
        before = {(t, q): store.max_offset(t, q) for t in (*TOPICS, SCHEDULE) for q in range(QUEUES)}
        store.truncate_to(cut)
        # The next queue offset of every queue is where its records before the cut end.
        assert store.max_offset("A", 0) < before[("A", 0)]
        assert put_keyed(store, "y") == cut
        assert store.get_messages("A", 0, store.max_offset("A", 0) - 1, 1).status is GetStatus.FOUND
        assert keyed(store, "x") == [] and keyed(store, "y") == [cut]
        store.shutdown()
        store = started(tmp_path / "s")
        assert keyed(store, "y") == [cut] and store.commitlog_max_offset > cut
    finally:
        store.shutdown()


def test_a_truncation_to_a_blank_fillers_start_or_a_segment_start(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    try:
        put_some(store, random.Random(9), 40, max_body=9000)
        last_record, blank = first_segment_ends(store)
        assert store.commitlog_max_offset > SMALL_COMMITLOG + 10_000
        assert store.truncate_to(SMALL_COMMITLOG) > 0
        assert [p.name for p in sorted((tmp_path / "s" / "commitlog").iterdir())][-1].endswith(
            str(SMALL_COMMITLOG)
        )
        store.truncate_to(blank)
        assert store.commitlog_max_offset == blank
        assert len(list((tmp_path / "s" / "commitlog").iterdir())) == 1
        store.truncate_to(last_record)
        assert put_keyed(store, "z") == last_record
    finally:
        store.shutdown()


def test_an_offset_that_is_not_a_record_boundary_is_refused(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    try:
        first = put_keyed(store, "a")
        second = put_keyed(store, "b")
        end = store.replica_end()
        for offset in (second - 1, second + 1, end + 1, -1):
            with pytest.raises(ValueError, match="not a record boundary"):
                store.truncate_to(offset)
        assert store.truncate_to(end) == 0
        assert store.truncate_to(second) == end - second
        assert store.truncate_to(first) == second - first
        assert store.commitlog_max_offset == 0 and store.max_offset("A", 0) == 0
    finally:
        store.shutdown()


def test_a_partial_record_held_by_a_slave_is_dropped_by_a_truncation_to_its_start(tmp_path: Path) -> None:
    master, slave = started(tmp_path / "m"), started(tmp_path / "sl")
    try:
        put_keyed(master, "a")
        whole = put_keyed(master, "b")
        view = master.ha_readable(0, whole + 10)
        slave.append_replica(0, view)
        view.release()
        assert slave.replica_end() == whole + 10 and slave.write_refusal is not None
        assert slave.truncate_to(whole) == 10
        assert slave.replica_end() == whole and slave.write_refusal is None
    finally:
        master.shutdown()
        slave.shutdown()


# -- kill -9 during a truncation -------------------------------------------------------------------

# Truncates the store in argv[1] to argv[2], killed (by the parent) at its argv[3]-th system call that
# changes a file: a write, a sync, a truncate, an unlink, a link or rename. Says "paused" there, or
# "done" when the truncation took fewer calls.
_TRUNCATE_UNTIL_KILLED = """
import os, sys, threading
from pathlib import Path
from store_testlib import small_config
from cometmq.store import MessageStore, _flush

root, offset, stop_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
calls = 0
truncating = False
# Only the truncation's own calls count, and the flush thread makes none meanwhile: the same call
# number is the same point of the truncation in every child.
_flush.QUEUE_FLUSH_INTERVAL_S = 3600.0
truncation_thread = threading.get_ident()

def pausing(call):
    def wrapper(*args, **kwargs):
        global calls
        if truncating and threading.get_ident() == truncation_thread:
            calls += 1
            if calls == stop_at:
                print("paused", flush=True)
                sys.stdin.readline()  # killed here
        return call(*args, **kwargs)
    return wrapper

for name in ("pwrite", "write", "fsync", "fdatasync", "ftruncate", "truncate", "unlink", "link", "replace",
             "rename"):
    setattr(os, name, pausing(getattr(os, name)))
store = MessageStore(small_config(root, flush_interval_commitlog_ms=3_600_000))
store.start()
truncating = True
store.truncate_to(offset)
truncating = False
print("done", flush=True)
sys.stdin.readline()
"""


def snapshot(root: Path) -> dict[str, object]:
    """What a reader sees of the store in *root* after it starts: the log's end, every queue's
    messages at their queue offsets, the index, the epochs."""
    store = started(root)
    try:
        queues = {}
        for topic in (*TOPICS, SCHEDULE):
            for queue_id in range(QUEUES):
                low = store.min_offset(topic, queue_id)
                res = store.get_messages(topic, queue_id, low, 10_000, max_bytes=1 << 30)
                records = decode_records(b"".join(res.buffers), check_crc=True)
                queues[f"{topic}/{queue_id}"] = (
                    store.max_offset(topic, queue_id),
                    [(r.queue_offset, r.commitlog_offset, r.body) for r in records],
                )
        return {
            "end": store.replica_end(),
            "queues": queues,
            "kept": keyed(store, "kept"),
            "gone": keyed(store, "gone"),
            "epochs": store.epochs(),
        }
    finally:
        store.shutdown()


@pytest.mark.parametrize(
    ("old_tail", "segments"), [(30, 3), (2, 1)], ids=["segments to delete", "within the last segment"]
)
def test_a_truncation_killed_at_any_point_recovers_to_before_or_after(
    tmp_path: Path, old_tail: int, segments: int
) -> None:
    old, new, parted = diverge(tmp_path, 3, old_tail, 0)
    old.adopt_epochs([EpochEntry(1, 0), EpochEntry(3, old.replica_end() - 10)])  # one to drop
    new.shutdown()
    old.shutdown()
    template = tmp_path / "old"
    assert len(list((template / "commitlog").iterdir())) >= segments
    before = snapshot(template)
    after_root = tmp_path / "after"
    shutil.copytree(template, after_root)
    store = started(after_root)
    store.truncate_to(parted)
    store.shutdown()
    after = snapshot(after_root)
    assert before != after and after["end"] == parted and after["gone"] == []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    seen = []
    stop_at = 1
    while True:
        root = tmp_path / f"killed-{stop_at}"
        shutil.copytree(template, root)
        child = subprocess.Popen(
            [sys.executable, "-c", _TRUNCATE_UNTIL_KILLED, str(root), str(parted), str(stop_at)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            said = child.stdout.readline().strip()
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        assert said in ("paused", "done"), said
        recovered = snapshot(root)
        assert recovered in (before, after), f"killed at call {stop_at}"
        seen.append("before" if recovered == before else "after")
        shutil.rmtree(root)
        if said == "done":
            break
        stop_at += 1
    # Once recovery finds the cut, every later kill finds it too.
    assert seen[0] == "before" and seen[-1] == "after"
    assert seen == sorted(seen, key=["before", "after"].index), seen


def test_a_sync_flush_wait_for_bytes_the_truncation_cut_is_answered_false(tmp_path: Path) -> None:
    store = started(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    try:
        cut = put_keyed(store, "a")
        end = store.replica_end()

        async def main() -> tuple[bool, bool]:
            beyond = store.when_flushed(end + 1)  # waits for bytes not written yet
            store.truncate_to(cut)
            assert beyond.done()  # not left for the bytes written at the cut next
            put_keyed(store, "b")
            put_keyed(store, "c")
            return beyond.result(), await store.wait_flushed(store.replica_end())

        assert asyncio.run(main()) == (False, True)
    finally:
        store.shutdown()


def record_starts(store: MessageStore) -> list[int]:
    """Where each record and blank filler of the store's log starts, and its end."""
    starts = []
    offset, end = store.commitlog_min_offset, store.replica_end()
    while offset < end:
        starts.append(offset)
        view = store.ha_readable(offset, 8)
        total, _magic = struct.unpack(">iI", view)
        view.release()
        offset += total
    return [*starts, end]


def keys_of(store: MessageStore) -> set[str]:
    view = store.ha_readable(0, 1 << 30)
    data = view.tobytes()
    view.release()
    return {decode_properties(r.properties).get("KEYS", "") for r in decode_records(data) if r.topic == "A"}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), count=st.integers(1, 40), pick=st.floats(0, 1))
def test_a_slave_truncated_to_a_boundary_is_the_slave_that_only_ever_got_that_far(
    seed: int, count: int, pick: float
) -> None:
    with tempfile.TemporaryDirectory(prefix="cometmq-truncate-") as tmp:
        roots = [Path(tmp) / name for name in ("master", "truncated", "reference")]
        master, truncated, reference = (started(root) for root in roots)
        try:
            put_some(master, random.Random(seed), count, max_body=9000)
            starts = record_starts(master)
            cut = starts[int(pick * (len(starts) - 1))]
            copy(master, truncated, lambda: 3000, start=0)
            truncated.truncate_to(cut)
            offset = 0
            while offset < cut:
                view = master.ha_readable(offset, cut - offset)
                offset = reference.append_replica(offset, view)
                view.release()
            assert truncated.replica_end() == reference.replica_end() == cut
            assert truncated.commitlog_max_offset == reference.commitlog_max_offset
            assert log_bytes(roots[1], 0, cut) == log_bytes(roots[2], 0, cut)
            for topic in (*TOPICS, SCHEDULE):
                for queue_id in range(QUEUES):
                    assert truncated.max_offset(topic, queue_id) == reference.max_offset(topic, queue_id)
                    assert messages(truncated, topic, queue_id, 0) == messages(reference, topic, queue_id, 0)
            for key in keys_of(master):
                assert keyed(truncated, key) == keyed(reference, key)
            copy(master, truncated, lambda: 5000)
            assert_replica_of(master, roots[0], truncated, roots[1])
        finally:
            for store in (master, truncated, reference):
                store.shutdown()


def test_a_slave_that_began_at_its_masters_last_segment_can_be_cut_back_to_its_first_offset(
    tmp_path: Path,
) -> None:
    master, slave = started(tmp_path / "m"), started(tmp_path / "sl")
    try:
        put_some(master, random.Random(5), 30, max_body=9000)
        copy(master, slave, lambda: 4000)
        first = slave.commitlog_min_offset
        assert first > 0 and slave.replica_end() > first
        assert slave.truncate_to(first) == master.replica_end() - first
        assert slave.replica_end() == slave.commitlog_max_offset == first
        crash(slave)
        slave = started(tmp_path / "sl")
        assert slave.replica_end() == first
        copy(master, slave, lambda: 4000)
        assert_replica_of(master, tmp_path / "m", slave, tmp_path / "sl")
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_promoted_inside_a_record_drops_it_and_begins_its_epoch_at_the_last_whole_one(
    tmp_path: Path,
) -> None:
    master, slave = started(tmp_path / "m"), started(tmp_path / "sl")
    try:
        put_keyed(master, "a")
        whole = put_keyed(master, "b")
        view = master.ha_readable(0, whole + 10)
        slave.append_replica(0, view)
        view.release()
        assert slave.begin_epoch(2) == EpochEntry(2, whole)
        assert slave.replica_end() == whole and put_keyed(slave, "c") == whole
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_truncation_failing_part_way_refuses_writes_until_a_restart_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = started(tmp_path / "s")
    try:
        cut = put_keyed(store, "a")
        put_keyed(store, "b")

        def failing_zero_from(self: MappedFile, pos: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        # After the 8 bytes at the cut were zeroed and synced.
        monkeypatch.setattr(MappedFile, "zero_from", failing_zero_from)
        with pytest.raises(StoreError, match="could not truncate"):
            store.truncate_to(cut)
        monkeypatch.undo()
        assert store.put(make_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.write_refusal is not None and "restart the broker" in store.write_refusal
        store.shutdown()
        store = started(tmp_path / "s")
        assert store.commitlog_max_offset == cut and keyed(store, "b") == []
        assert put_keyed(store, "c") == cut
    finally:
        store.shutdown()
