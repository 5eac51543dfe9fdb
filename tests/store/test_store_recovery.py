"""Start-up recovery after crashes: torn tails, corrupt records, lost consume queues, kill -9."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import SMALL_COMMITLOG, bodies, crash, cut_commit_log, make_msg

from cometmq.protocol.taghash import java_string_hash
from cometmq.store import MessageStore, PutResult
from cometmq.store.format import unpack_checkpoint
from waiting import wait_until_blocking

OpenStore = Callable[..., MessageStore]
Snapshot = dict[tuple[str, int], tuple[int, int, list[bytes]]]
KEYS = [(t, q) for t in ("A", "B") for q in range(3)]


def fill(store: MessageStore, count: int, first: int = 0) -> list[PutResult]:
    """Put messages number *first* .. *first* + count - 1 (the number decides queue, tag, body)."""
    results = []
    for i in range(first, first + count):
        t, q = KEYS[i % len(KEYS)]
        tag = f"tag{i % 4}"
        body = i.to_bytes(4, "big") * (20 + (i * 53) % 400)
        results.append(store.put(make_msg(t, q, body, f"TAGS\x01{tag}", java_string_hash(tag))))
    return results


def snapshot(store: MessageStore) -> Snapshot:
    return {key: (store.min_offset(*key), store.max_offset(*key), bodies(store, *key)) for key in KEYS}


def expected_prefix(results: list[PutResult], end: int) -> Snapshot:
    """What the queues must hold when the log ends at *end*: the messages written before it."""
    model: Snapshot = {key: (0, 0, []) for key in KEYS}
    for i, res in enumerate(results):
        if res.commitlog_offset + res.wrote_bytes <= end:
            key = KEYS[i % len(KEYS)]
            _, n, got = model[key]
            model[key] = (0, n + 1, [*got, i.to_bytes(4, "big") * (20 + (i * 53) % 400)])
    return model


def segment_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset - offset % SMALL_COMMITLOG:020d}"


def test_crash_without_shutdown_keeps_everything(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    results = fill(store, 300)
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()  # the scan then starts at the last segment
    results += fill(store, 10, first=300)
    before = snapshot(store)
    end = store.commitlog_max_offset
    crash(store)
    assert (tmp_path / "store" / "abort").exists()
    store = open_store()
    assert store.commitlog_max_offset == end
    assert snapshot(store) == before == expected_prefix(results, end)
    assert store.put(make_msg("A", 0)).queue_offset == before[("A", 0)][1]


def test_torn_tail_is_cut_and_queues_follow(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 300)
    crash(store)
    torn = results[-7]  # its record is cut in the middle
    seg = segment_path(root, torn.commitlog_offset)
    with seg.open("r+b") as f:
        f.truncate(torn.commitlog_offset % SMALL_COMMITLOG + torn.wrote_bytes // 2)
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store()
    assert "recovery" in caplog.text and "dropping" in caplog.text
    end = torn.commitlog_offset
    assert store.commitlog_max_offset == end
    assert snapshot(store) == expected_prefix(results, end)
    # The segment has its full size again and nothing but zeros after the end.
    data = seg.read_bytes()
    assert len(data) == SMALL_COMMITLOG
    assert not any(data[end % SMALL_COMMITLOG :])
    assert store.put(make_msg("A", 0)).commitlog_offset == end


def test_corrupt_record_ends_the_log_and_later_segments_go(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 400)
    crash(store)
    assert len(list((root / "commitlog").iterdir())) >= 4
    bad = next(r for r in results if r.commitlog_offset > SMALL_COMMITLOG + 1000)
    seg = segment_path(root, bad.commitlog_offset)
    with seg.open("r+b") as f:
        f.seek(bad.commitlog_offset % SMALL_COMMITLOG + 100)  # inside the body: CRC mismatch
        f.write(b"\xff\xfe")
    # Without a checkpoint the scan starts at the first segment, so it finds the damage.
    (root / "checkpoint").unlink()
    store = open_store()
    end = bad.commitlog_offset
    assert store.commitlog_max_offset == end
    assert snapshot(store) == expected_prefix(results, end)
    assert sorted(int(p.name) for p in (root / "commitlog").iterdir()) == [0, SMALL_COMMITLOG]


def test_a_missing_segment_ends_the_log_and_later_ones_are_moved_aside(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 400)
    store.shutdown()
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) >= 4
    segs[2].unlink()  # a bad copy or an operator: nothing can be read across the hole
    with caplog.at_level(logging.ERROR, logger="cometmq.store"):
        store = open_store()
    assert f"commit log has a hole before {segs[3].name}" in caplog.text
    end = int(segs[2].name)
    assert store.commitlog_max_offset == end
    assert snapshot(store) == expected_prefix(results, end)
    # Kept for the operator, not destroyed.
    left = sorted(p.name for p in (root / "commitlog").iterdir())
    assert left == sorted([segs[0].name, segs[1].name, *(p.name + ".orphan" for p in segs[3:])])
    assert store.put(make_msg("A", 0)).commitlog_offset == end


@pytest.mark.parametrize("lost", ["all", "one"])
def test_lost_consume_queues_are_rebuilt(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture, lost: str
) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 400)
    # A checkpoint vouching for units up to the last segment, so the scan starts there; queue B/0
    # gets records after it.
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()
    results += fill(store, 12, first=400)
    before = snapshot(store)
    units_before = {
        key: [cq.unit(i) for i in range(cq.max_offset)] for key in KEYS if (cq := store._queue(*key))
    }
    crash(store)
    # "all": the operator removed consumequeue/ (full rescan). "one": a queue with records after
    # the checkpoint lost its files; the scan notices the gap and rebuilds it from the start.
    doomed = root / "consumequeue" if lost == "all" else root / "consumequeue" / "B" / "0"
    for path in sorted(doomed.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store()
    if lost == "one":
        assert "rebuilding consume queues [('B', 0)]" in caplog.text
    assert snapshot(store) == before == expected_prefix(results, store.commitlog_max_offset)
    # Tags codes are recomputed from the TAGS property exactly as the broker gave them.
    for key, units in units_before.items():
        cq = store._queue(*key)
        assert cq is not None and [cq.unit(i) for i in range(cq.max_offset)] == units


def test_consume_queue_units_past_the_end_are_dropped(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 120)
    store.shutdown()
    # The commit log loses its tail while the consume queues still point into it.
    cut = results[100]
    cut_commit_log(root, cut.commitlog_offset)
    store = open_store()
    assert store.commitlog_max_offset == cut.commitlog_offset
    assert snapshot(store) == expected_prefix(results, cut.commitlog_offset)


def test_torn_checkpoint_and_missing_abort(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 200)
    end = store.commitlog_max_offset
    crash(store)
    # No abort file, but the checkpoint is not a clean one: still a recovery.
    (root / "abort").unlink()
    store = open_store()
    assert (store.commitlog_max_offset, snapshot(store)) == (end, expected_prefix(results, end))
    crash(store)
    with (root / "checkpoint").open("r+b") as f:
        f.seek(10)
        f.write(b"garbage")
    store = open_store()
    assert (store.commitlog_max_offset, snapshot(store)) == (end, expected_prefix(results, end))


def test_stale_records_beyond_the_end_never_come_back(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    results = fill(store, 60)
    crash(store)
    cut = results[30]
    # Damage one record in the middle; the (valid) records after it must not resurface later.
    with segment_path(root, cut.commitlog_offset).open("r+b") as f:
        f.seek(cut.commitlog_offset % SMALL_COMMITLOG + 4)
        f.write(b"\x00\x00\x00\x00")  # magic gone
    (root / "checkpoint").unlink()
    store = open_store()
    assert store.commitlog_max_offset == cut.commitlog_offset
    small = store.put(make_msg("A", 0, b"x"))
    crash(store)
    store = open_store()
    assert store.commitlog_max_offset == small.commitlog_offset + small.wrote_bytes
    model = expected_prefix(results, cut.commitlog_offset)
    lo, n, got = model[("A", 0)]
    model[("A", 0)] = (lo, n + 1, [*got, b"x"])
    assert snapshot(store) == model


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {testdir!r})
    from store_testlib import make_msg, small_config
    from cometmq.store import MessageStore
    store = MessageStore(small_config(Path({root!r})))
    store.start()
    for i in range(500):
        store.put(make_msg("K", i % 2, i.to_bytes(4, "big") * 30))
    print(store.commitlog_max_offset, flush=True)
    time.sleep(60)
    """
)


def test_kill_9(tmp_path: Path, open_store: OpenStore) -> None:
    root = tmp_path / "store"
    code = CHILD.format(testdir=str(Path(__file__).parent), root=str(root))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        end = int(child.stdout.readline())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert (root / "abort").exists()
    store = open_store()
    assert store.commitlog_max_offset == end
    for q in range(2):
        assert bodies(store, "K", q) == [i.to_bytes(4, "big") * 30 for i in range(q, 500, 2)]


def test_deleted_topic_stays_deleted_after_a_crash(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store()
    for i in range(50):
        store.put(make_msg("Doomed" if i % 2 else "Kept", 0, bytes([i])))
    store.delete_topic("Doomed")
    # delete_topic asks the flush thread for a checkpoint; wait for it to cover the topic's records.
    end = store.commitlog_max_offset

    def covered() -> bool:
        checkpoint = unpack_checkpoint((root / "checkpoint").read_bytes())
        return checkpoint is not None and checkpoint.dispatch_safe >= end

    wait_until_blocking(covered, message="a checkpoint covering the deleted topic")
    store.put(make_msg("Kept", 0, b"after"))
    crash(store)
    store = open_store()
    assert store.queue_ids("Doomed") == []
    assert not (root / "consumequeue" / "Doomed").exists()
    assert bodies(store, "Kept", 0) == [bytes([i]) for i in range(0, 50, 2)] + [b"after"]
