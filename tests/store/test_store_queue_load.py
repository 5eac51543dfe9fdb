"""Loading consume queues: each queue's end found by binary search, and queues loaded on first use.

A start lists the topics' directories only; a queue's files are read when it is first used, and it
then gets what start-up would have done to it (trimmed to the recovered log, its min offset moved,
rebuilt when its files are damaged)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from store_testlib import bodies, crash, make_msg, small_config

from cometmq.store import MessageStore

UNITS_PER_FILE = 10


def started(root: Path) -> MessageStore:
    store = MessageStore(small_config(root, mapped_file_size_consume_queue=UNITS_PER_FILE * 20))
    store.start()
    return store


def fill(store: MessageStore, counts: dict[int, int]) -> None:
    for queue_id, count in counts.items():
        for n in range(count):
            store.put(make_msg("T", queue_id, f"{queue_id}-{n}".encode()))


def expected(counts: dict[int, int]) -> dict[int, list[bytes]]:
    return {q: [f"{q}-{n}".encode() for n in range(c)] for q, c in counts.items()}


def test_a_started_store_loads_no_queue_until_one_is_used(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    fill(store, {0: 3, 1: 12, 2: 0})
    store.shutdown()
    store = started(tmp_path / "s")
    try:
        assert store._queues.all_queues() == []
        assert store.queue_ids("T") == [0, 1]  # queue 2 never got a message: no directory
        assert store.max_offset("T", 1) == 12
        assert [cq.queue_id for cq in store._queues.all_queues()] == [1]
        # Looking a unit up loads the queue but maps none of its files.
        assert store.queue_unit("T", 1, 11) is not None
        assert store._queues.all_queues()[0].files == []
        assert store.put(make_msg("T", 0, b"0-3")).queue_offset == 3
        assert {q: bodies(store, "T", q) for q in (0, 1)} == expected({0: 4, 1: 12})
    finally:
        store.shutdown()


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.integers(0, 3 * UNITS_PER_FILE + 1), min_size=1, max_size=4), crashed=st.booleans())
def test_each_queue_ends_where_its_last_unit_is(counts: list[int], crashed: bool) -> None:
    """Ends at every position of a file (empty, mid-file, its last unit, the first unit of the
    next), after a clean shutdown or a kill -9 (in process: no final flush or checkpoint)."""
    with tempfile.TemporaryDirectory(prefix="cometmq-queue-load-") as tmp:
        root = Path(tmp)
        by_queue = dict(enumerate(counts))
        store = started(root)
        fill(store, by_queue)
        if crashed:
            crash(store)
        else:
            store.shutdown()
        store = started(root)
        try:
            for queue_id, count in by_queue.items():
                assert store.max_offset("T", queue_id) == count
                assert store.min_offset("T", queue_id) == 0
            assert {q: bodies(store, "T", q) for q in by_queue} == expected(by_queue)
        finally:
            store.shutdown()


def test_a_queue_damaged_on_disk_is_rebuilt_when_first_used(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    fill(store, {0: 25, 1: 5})
    store.shutdown()
    queue_dir = tmp_path / "s" / "consumequeue" / "T" / "0"
    files = sorted(queue_dir.iterdir())
    assert len(files) == 3
    files[1].unlink()  # a hole: the file after it is dropped at load, and the queue rebuilt
    store = started(tmp_path / "s")
    try:
        assert store.max_offset("T", 0) == 25
        assert bodies(store, "T", 0) == expected({0: 25})[0]
        assert store.put(make_msg("T", 0, b"0-25")).queue_offset == 25
    finally:
        store.shutdown()


def test_units_past_a_truncation_go_when_a_queue_loads_after_it(tmp_path: Path) -> None:
    store = started(tmp_path / "s")
    fill(store, {0: 4})
    cut = store.commitlog_max_offset
    fill(store, {1: 3})
    store.shutdown()
    store = started(tmp_path / "s")
    try:
        assert store._queues.all_queues() == []
        store.truncate_to(cut)  # queue 1 is not loaded: its units go when it is
        assert store.max_offset("T", 1) == 0
        assert store.max_offset("T", 0) == 4
        assert store.put(make_msg("T", 1, b"again")).queue_offset == 0
        assert bodies(store, "T", 1) == [b"again"]
    finally:
        store.shutdown()
