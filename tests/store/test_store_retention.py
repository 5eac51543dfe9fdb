"""Retention and the disk guard: real files, 64 KiB segments, 100-unit consume-queue files.

Segments are aged with ``os.utime`` and ``clean`` gets the time it runs at. Disk usage comes from an
*injected disk-usage probe* (``InjectedDiskUsage``, via ``StoreConfig.disk_usage_probe``) except in
the last test, which fills a real 2 MiB tmpfs (skipped where mounting is not allowed).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from store_testlib import bodies, crash, make_msg, small_config

from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import decode_records
from cometmq.store import GetStatus, MessageStore, PutResult, PutStatus, StoreConfig, parse_delete_when
from cometmq.store._mappedfile import MappedFile
from retention_fakes import HOUR_MS, InjectedDiskUsage, at_hour
from waiting import wait_until_blocking

OpenStore = Callable[..., MessageStore]

BODY = b"x" * 1000  # ~1.1 KiB records: about 59 to a 64 KiB segment


def age(paths: list[Path], hours: float, now_ms: int) -> None:
    """Make *paths* look last written *hours* before *now_ms*."""
    ns = (now_ms - int(hours * HOUR_MS)) * 1_000_000
    for path in paths:
        os.utime(path, ns=(ns, ns))


def segment_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def queue_files(root: Path, topic: str, queue_id: int) -> list[Path]:
    return sorted((root / "consumequeue" / topic / str(queue_id)).iterdir())


def fill(store: MessageStore, count: int, topic: str = "TopicTest", queue_id: int = 0) -> list[PutResult]:
    results = []
    for i in range(count):
        res = store.put(make_msg(topic, queue_id, BODY[:-4] + b"%04d" % i))
        assert res.status is PutStatus.PUT_OK
        results.append(res)
    return results


def expected_min(results: list[PutResult], commitlog_min: int) -> int:
    """The queue offset of the first message still in the commit log (max if none)."""
    for res in results:
        if res.commitlog_offset >= commitlog_min:
            return res.queue_offset
    return results[-1].queue_offset + 1


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"  # where open_store puts its store


# -- parsing ---------------------------------------------------------------------------------------


def test_delete_when_is_a_list_of_hours_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    assert parse_delete_when("04") == {4}
    assert parse_delete_when(" 04 ; 16;23") == {4, 16, 23}
    for bad in ("", "4am", "24", "04;", "-1"):
        with pytest.raises(ValueError, match="deleteWhen"):
            parse_delete_when(bad)
    with pytest.raises(ValueError, match="deleteWhen"):
        MessageStore(StoreConfig(tmp_path, delete_when="4am"))


# -- retention by time -----------------------------------------------------------------------------


def test_expired_segments_are_deleted_only_at_a_delete_when_hour_and_never_the_current_one(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    fill(store, 300)
    segs = segment_files(root)
    assert 4 <= len(segs) <= 10
    at_4 = at_hour(4)
    age(segs, 100, at_4)  # the current segment too: it must survive anyway

    report = store.clean(at_hour(5))
    assert not report.time_up and not report.space_to_delete
    assert report.commitlog_deleted == []
    assert segment_files(root) == segs

    report = store.clean(at_4)
    assert report.time_up
    assert report.commitlog_deleted == segs[:-1]
    assert segment_files(root) == segs[-1:]
    assert store.commitlog_min_offset == report.commitlog_min_offset == int(segs[-1].name)
    assert store.put(make_msg(body=b"after")).status is PutStatus.PUT_OK  # the current one still works


def test_every_hour_listed_in_delete_when_is_a_deleting_hour(open_store: OpenStore, root: Path) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10), delete_when="03;16")
    fill(store, 150)
    segs = segment_files(root)
    at_16 = at_hour(16)
    age(segs, 100, at_16)
    assert store.clean(at_hour(4)).commitlog_deleted == []
    assert store.clean(at_16).commitlog_deleted == segs[:-1]


def test_segments_not_yet_expired_are_kept_and_deletion_stops_at_the_first_kept_one(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10), file_reserved_time=72)
    fill(store, 300)
    segs = segment_files(root)
    now = at_hour(4)
    age([segs[0]], 73, now)
    age([segs[1]], 72.5, now)
    age([segs[2]], 71, now)  # not expired: it and everything after it stay
    age([segs[3]], 100, now)  # expired, but behind a kept one (never a hole in the log)

    report = store.clean(now)
    assert report.commitlog_deleted == segs[:2]
    assert segment_files(root) == segs[2:]
    assert store.commitlog_min_offset == int(segs[2].name)


def test_a_pass_deletes_at_most_delete_file_batch_max_segments(open_store: OpenStore, root: Path) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10), delete_file_batch_max=2)
    fill(store, 300)
    segs = segment_files(root)
    now = at_hour(4)
    age(segs, 100, now)
    assert store.clean(now).commitlog_deleted == segs[0:2]
    assert store.clean(now).commitlog_deleted == segs[2:4]
    assert segment_files(root) == segs[4:]


# -- what points into deleted segments -------------------------------------------------------------


def test_queue_files_pointing_only_into_deleted_segments_go_and_min_offsets_move(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    q0 = fill(store, 250, queue_id=0)  # units 0..249 in three 100-unit files
    q1 = fill(store, 60, queue_id=1)
    q0_files = queue_files(root, "TopicTest", 0)
    assert len(q0_files) == 3
    segs = segment_files(root)
    now = at_hour(4)
    age(segs[:-2], 100, now)

    report = store.clean(now)
    cl_min = int(segs[-2].name)
    assert report.commitlog_deleted == segs[:-2]
    assert store.commitlog_min_offset == cl_min
    # Queue 0's units 0..99 and 100..199 all point below cl_min; units 200.. partly do not.
    assert q0[199].commitlog_offset < cl_min
    assert report.consumequeue_deleted == q0_files[:2]
    assert queue_files(root, "TopicTest", 0) == q0_files[2:]
    min0 = store.min_offset("TopicTest", 0)
    assert min0 == expected_min(q0, cl_min) > 200
    assert q1[0].commitlog_offset >= cl_min
    assert store.min_offset("TopicTest", 1) == 0  # queue 1 is all in the kept segments

    got = store.get_messages("TopicTest", 0, 0, 32)
    assert got.status is GetStatus.OFFSET_TOO_SMALL
    assert got.next_begin_offset == got.min_offset == min0
    got = store.get_messages("TopicTest", 0, min0 - 1, 32)
    assert got.status is GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == min0
    got = store.get_messages("TopicTest", 0, min0, 32)
    assert got.status is GetStatus.FOUND
    first = decode_records(b"".join(got.buffers))[0]
    assert (first.queue_offset, first.commitlog_offset) == (min0, q0[min0].commitlog_offset)
    assert bodies(store, "TopicTest", 0, min0) == [BODY[:-4] + b"%04d" % i for i in range(min0, 250)]


def test_the_last_file_of_a_queue_is_kept_even_if_all_it_points_at_is_gone(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    old = fill(store, 150, topic="Old")  # two files, both pointing into the first segments only
    fill(store, 200, topic="New")
    old_files = queue_files(root, "Old", 0)
    assert len(old_files) == 2
    segs = segment_files(root)
    now = at_hour(4)
    age(segs, 100, now)
    store.clean(now)
    assert old[-1].commitlog_offset < store.commitlog_min_offset
    assert queue_files(root, "Old", 0) == old_files[1:]
    assert store.min_offset("Old", 0) == store.max_offset("Old", 0) == 150
    got = store.get_messages("Old", 0, 0, 32)
    assert (got.status, got.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, 150)
    assert store.put(make_msg("Old", body=b"next")).queue_offset == 150
    assert bodies(store, "Old", 0, 150) == [b"next"]


def test_queue_files_of_a_queue_not_loaded_since_the_start_go_without_loading_it(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    idle = fill(store, 250, topic="Idle")  # three files, all pointing into the first segments
    fill(store, 100, topic="Busy")
    store.shutdown()
    idle_files = queue_files(root, "Idle", 0)
    assert len(idle_files) == 3

    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))  # "Idle" is not loaded again
    segs = segment_files(root)
    now = at_hour(4)
    age(segs, 100, now)
    report = store.clean(now)
    assert idle[-1].commitlog_offset < store.commitlog_min_offset
    assert report.consumequeue_deleted == idle_files[:2]  # never the last file
    assert queue_files(root, "Idle", 0) == idle_files[2:]
    # Loaded afterwards, the queue starts past what the pass deleted.
    assert store.min_offset("Idle", 0) == store.max_offset("Idle", 0) == 250
    assert store.put(make_msg("Idle", body=b"next")).queue_offset == 250
    assert bodies(store, "Idle", 0, 250) == [b"next"]


def test_index_files_pointing_only_into_deleted_segments_go(open_store: OpenStore, root: Path) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10), max_index_num=50)
    for i in range(300):
        key = f"k{i:04d}"
        msg = make_msg(body=BODY, properties=encode_properties({"KEYS": key}), keys=key)
        assert store.put(msg).status is PutStatus.PUT_OK
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) == 6  # 50 entries each
    now = at_hour(4)
    age(segment_files(root), 100, now)

    report = store.clean(now)
    assert report.index_files_deleted > 0
    left = sorted((root / "index").iterdir())
    assert left == index_files[report.index_files_deleted :]
    assert store.query_messages("TopicTest", "k0000", 32, 0, 2**62).buffers == []
    assert len(store.query_messages("TopicTest", "k0299", 32, 0, 2**62).buffers) == 1


def test_lookups_below_the_new_start_of_the_log_find_nothing(open_store: OpenStore, root: Path) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = fill(store, 300)
    segs = segment_files(root)
    now = at_hour(4)
    age(segs[:2], 100, now)
    store.clean(now)
    cl_min = store.commitlog_min_offset
    first_kept = expected_min(results, cl_min)
    assert store.min_offset("TopicTest", 0) == first_kept > 0
    assert store.message_at(results[0].commitlog_offset) is None
    assert store.message_at(results[first_kept].commitlog_offset) is not None
    kept_time = results[first_kept].store_timestamp
    assert store.earliest_store_time("TopicTest", 0) == kept_time
    assert store.offset_by_timestamp("TopicTest", 0, 0) == first_kept
    assert store.offset_by_timestamp("TopicTest", 0, kept_time) == first_kept


def test_units_left_pointing_into_deleted_segments_read_as_message_was_removing(
    open_store: OpenStore,
) -> None:
    # ``clean`` moves min offsets in the same pass, so readers never see this; the commit log and
    # get_messages must still cope (docs/protocol.md#pull-results: MESSAGE_WAS_REMOVING).
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = fill(store, 150)
    cl = store._commitlog
    store._retire_files(cl.drop_head(2))
    assert results[99].commitlog_offset < cl.min_offset <= results[149].commitlog_offset
    assert cl.segment_for(0) is None and cl.record_at(0) is None and cl.store_timestamp_at(0) == -1
    got = store.get_messages("TopicTest", 0, 0, 32)  # units 0..99: one consume-queue file
    assert (got.status, got.next_begin_offset, got.buffers) == (GetStatus.MESSAGE_WAS_REMOVING, 100, [])
    # Units 100..149 point first into the deleted segments, then into kept ones: those are found.
    first_kept = expected_min(results, cl.min_offset)
    assert 100 < first_kept < 150 - 16
    got = store.get_messages("TopicTest", 0, 100, 16)
    assert (got.status, got.message_count, got.next_begin_offset) == (GetStatus.FOUND, 16, first_kept + 16)
    kept = decode_records(b"".join(got.buffers), check_crc=True)
    assert [r.queue_offset for r in kept] == list(range(first_kept, first_kept + 16))


# -- restart ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["clean shutdown", "crash"])
def test_restart_after_retention_keeps_the_new_start(open_store: OpenStore, root: Path, how: str) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = fill(store, 300)
    segs = segment_files(root)
    now = at_hour(4)
    age(segs[:3], 100, now)
    store.clean(now)
    cl_min = store.commitlog_min_offset
    min0 = store.min_offset("TopicTest", 0)
    if how == "crash":
        crash(store)
    else:
        store.shutdown()

    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    assert store.commitlog_min_offset == cl_min == int(segs[3].name)
    assert store.min_offset("TopicTest", 0) == min0 == expected_min(results, cl_min)
    assert bodies(store, "TopicTest", 0, min0) == [BODY[:-4] + b"%04d" % i for i in range(min0, 300)]
    assert store.put(make_msg(body=b"next")).queue_offset == 300
    assert store.get_messages("TopicTest", 0, 0, 32).status is GetStatus.OFFSET_TOO_SMALL


def test_restart_with_head_segments_deleted_by_hand_moves_min_offsets_on_load(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = fill(store, 300)
    store.shutdown()
    segs = segment_files(root)
    for path in segs[:3]:  # an operator freeing space while the broker is down
        path.unlink()
    q_files = queue_files(root, "TopicTest", 0)

    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    cl_min = int(segs[3].name)
    assert store.commitlog_min_offset == cl_min
    min0 = store.min_offset("TopicTest", 0)
    assert min0 == expected_min(results, cl_min) > 0
    assert bodies(store, "TopicTest", 0, min0) == [BODY[:-4] + b"%04d" % i for i in range(min0, 300)]
    # The first pass after the start removes the queue files left pointing at nothing.
    report = store.clean(at_hour(5))
    assert report.commitlog_deleted == []
    assert report.consumequeue_deleted == [p for p in q_files if int(p.name) // 20 + 100 <= min0]
    assert report.consumequeue_deleted


def test_a_segment_that_cannot_be_deleted_keeps_the_log_without_holes(
    open_store: OpenStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    results = fill(store, 300)
    segs = segment_files(root)
    now = at_hour(4)
    age(segs, 100, now)
    real_unlink = MappedFile.unlink

    def unlink_failing_on_the_second(mf: MappedFile) -> None:
        if mf.path == segs[1]:
            raise PermissionError(13, "Permission denied", str(mf.path))
        real_unlink(mf)

    monkeypatch.setattr(MappedFile, "unlink", unlink_failing_on_the_second)
    report = store.clean(now)
    monkeypatch.undo()
    assert report.commitlog_deleted == segs[:1]
    assert segment_files(root) == segs[1:]  # the later ones were not unlinked either ...
    first = expected_min(results, int(segs[1].name))
    kept = [BODY[:-4] + b"%04d" % i for i in range(first, 300)]
    assert store.commitlog_min_offset == int(segs[1].name)  # ... and are still in use
    assert store.min_offset("TopicTest", 0) == first
    assert bodies(store, "TopicTest", 0, first) == kept
    store.shutdown()

    store = open_store(disk_usage_probe=InjectedDiskUsage(0.10))
    assert store.commitlog_min_offset == int(segs[1].name)
    assert not list((root / "commitlog").glob("*.orphan"))
    assert store.min_offset("TopicTest", 0) == first
    assert bodies(store, "TopicTest", 0, first) == kept
    assert store.clean(now).commitlog_deleted == segs[1:-1]  # the next pass finishes the job


# -- the disk guard --------------------------------------------------------------------------------


def test_above_disk_max_used_ratio_by_injected_probe_expired_segments_go_at_any_hour(
    open_store: OpenStore, root: Path
) -> None:
    disk = InjectedDiskUsage(0.74)
    store = open_store(disk_usage_probe=disk)
    fill(store, 300)
    segs = segment_files(root)
    now = at_hour(5)  # not a deleteWhen hour
    age(segs[:2], 100, now)
    assert store.clean(now).commitlog_deleted == []
    disk.ratio = 0.80
    report = store.clean(now)
    assert report.space_to_delete and not report.forced and not report.writes_refused
    assert report.commitlog_deleted == segs[:2]  # the unexpired ones stay
    assert segment_files(root) == segs[2:]


def test_above_85_percent_by_injected_probe_unexpired_segments_go_too(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.87))
    fill(store, 300)
    segs = segment_files(root)
    report = store.clean(at_hour(5))  # nothing is expired, and not a deleteWhen hour
    assert report.forced and not report.writes_refused
    assert report.commitlog_deleted == segs[:-1]
    assert segment_files(root) == segs[-1:]


def test_above_85_percent_without_clean_file_forcibly_only_expired_segments_go(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.87), clean_file_forcibly_enable=False)
    fill(store, 300)
    segs = segment_files(root)
    now = at_hour(5)
    age([segs[0]], 100, now)
    assert store.clean(now).commitlog_deleted == segs[:1]


def test_above_90_percent_by_injected_probe_writes_are_refused_with_a_reason_and_reads_work(
    open_store: OpenStore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = InjectedDiskUsage(0.50)
    store = open_store(disk_usage_probe=disk)
    fill(store, 10)
    assert store.write_refusal is None
    disk.ratio = 0.934
    with caplog.at_level(logging.WARNING, "cometmq.store"):
        report = store.clean(at_hour(5))
    assert report.writes_refused and report.disk_ratio == 0.934
    assert store.write_refusal == (f"disk full: 93.4% of {root} used (limit 90%); writes resume at 85%")
    assert any("refusing writes" in r.getMessage() for r in caplog.records)
    assert store.put(make_msg(body=b"refused")).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.put_batch([make_msg(body=b"a"), make_msg(body=b"b")]).status is (
        PutStatus.SERVICE_NOT_AVAILABLE
    )
    assert store.max_offset("TopicTest", 0) == 10
    assert bodies(store, "TopicTest", 0) == [BODY[:-4] + b"%04d" % i for i in range(10)]

    disk.ratio = 0.89  # below the refusal level but above the force-clean level: still refused
    report = store.clean(at_hour(5))
    assert report.writes_refused and store.put(make_msg(body=b"refused")).status is (
        PutStatus.SERVICE_NOT_AVAILABLE
    )

    disk.ratio = 0.85  # at the force-clean level: writes resume (RocketMQ's hysteresis)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "cometmq.store"):
        report = store.clean(at_hour(5))
    assert not report.writes_refused and store.write_refusal is None
    assert any("accepting writes again" in r.getMessage() for r in caplog.records)
    assert store.put(make_msg(body=b"accepted")).queue_offset == 10


def test_refused_writes_resume_by_themselves_once_the_injected_probe_shows_space(
    open_store: OpenStore,
) -> None:
    disk = InjectedDiskUsage(0.95)
    store = open_store(disk_usage_probe=disk)  # started on a full disk: refused at once
    assert store.write_refusal is not None and "95.0%" in store.write_refusal
    assert store.put(make_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
    disk.ratio = 0.40
    # A refused put looks at the disk again (at most once a second); no clean pass runs here.
    wait_until_blocking(
        lambda: store.put(make_msg(body=b"back")).status is PutStatus.PUT_OK, message="a put accepted again"
    )
    assert store.write_refusal is None


def test_the_disk_is_checked_when_a_new_segment_is_needed_between_passes(
    open_store: OpenStore, root: Path
) -> None:
    disk = InjectedDiskUsage(0.50)
    store = open_store(disk_usage_probe=disk)
    fill(store, 10)
    disk.ratio = 0.95  # no clean pass sees this: only the roll to a new segment does
    statuses = [store.put(make_msg(body=BODY)).status for _ in range(100)]
    accepted = statuses.index(PutStatus.SERVICE_NOT_AVAILABLE)
    assert 40 < 10 + accepted < 60  # the first segment filled up, then the roll was refused
    assert set(statuses[accepted:]) == {PutStatus.SERVICE_NOT_AVAILABLE}
    assert len(segment_files(root)) == 1
    assert store.write_refusal is not None and store.write_refusal.startswith("disk full: 95.0%")


# -- the flush thread ------------------------------------------------------------------------------


def test_deleted_segments_are_closed_by_the_flush_thread_never_during_a_sync(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.87))
    fill(store, 300)
    flusher = store._flusher
    assert flusher is not None
    old = list(store._commitlog.segments[:-1])
    with flusher._cycle_lock:  # as if the flush thread were in the middle of fdatasyncs
        report = store.clean(at_hour(5))
        assert report.commitlog_deleted == [seg.path for seg in old]
        assert not any(seg.path.exists() for seg in old)  # unlinked at once ...
        assert all(seg.fd >= 0 for seg in old)  # ... but still open for a sync in progress
    # Closed by the flush thread's next cycle.
    wait_until_blocking(lambda: all(seg.fd == -1 for seg in old), message="the old segments closed")


def test_forced_deletion_under_constant_flushing_loses_nothing_kept(
    open_store: OpenStore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The flush thread is poked every 4 KiB, so it syncs while segments are being deleted.
    store = open_store(disk_usage_probe=InjectedDiskUsage(0.87), flush_commitlog_least_pages=1)
    with caplog.at_level(logging.ERROR, "cometmq.store"):
        for round_ in range(30):
            fill(store, 40, queue_id=round_ % 2)
            store.clean(at_hour(5))
        time.sleep(0.2)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(segment_files(root)) == 1
    for qid in (0, 1):
        start = store.min_offset("TopicTest", qid)
        assert len(bodies(store, "TopicTest", qid, start)) == store.max_offset("TopicTest", qid) - start
    store.shutdown()
    reopened = open_store()
    assert reopened.commitlog_min_offset == int(segment_files(root)[0].name)


# -- a real small filesystem -----------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB filesystem (tmpfs); skipped unless this process may mount one."""
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_small_filesystem_filling_up_refuses_writes_and_space_coming_back_resumes_them(
    small_tmpfs: Path,
) -> None:
    store = MessageStore(small_config(small_tmpfs / "store"))  # the real statvfs probe
    store.start()
    try:
        fill(store, 10)
        assert 0 <= store.disk_usage_ratio() < 0.5 and store.write_refusal is None
        st = os.statvfs(small_tmpfs)
        ballast = small_tmpfs / "ballast"
        ballast.write_bytes(b"\1" * (st.f_bavail * st.f_frsize - st.f_blocks * st.f_frsize // 20))
        report = store.clean()
        assert report.disk_ratio > 0.90 and report.writes_refused
        assert store.write_refusal is not None and store.write_refusal.startswith("disk full: ")
        assert store.put(make_msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert len(bodies(store, "TopicTest", 0)) == 10
        ballast.unlink()
        assert not store.clean().writes_refused
        assert store.put(make_msg(body=b"room again")).queue_offset == 10
    finally:
        store.shutdown()
