"""How much disk the store's files take: they are sparse, and their blocks are reserved a step at a
time ahead of the writer (so that no store into a mapping meets a hole), not all when created."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from store_testlib import bodies, make_msg, small_config

from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import decode_records
from cometmq.store import MessageStore, MessageToStore, PutStatus, StoreConfig
from cometmq.store._index import IndexFile

QUEUES = 8


def keyed(i: int, queue_id: int = 0) -> MessageToStore:
    uniq = f"U{i:08d}"
    msg = make_msg(queue_id=queue_id, body=b"%08d" % i, properties=encode_properties({"UNIQ_KEY": uniq}))
    msg.uniq_key = uniq
    return msg


def disk_use(root: Path) -> tuple[int, int]:
    """Bytes the store's files take on disk, and the sum of their sizes."""
    files = [p.stat() for p in root.rglob("*") if p.is_file()]
    return sum(st.st_blocks * 512 for st in files), sum(st.st_size for st in files)


def found(store: MessageStore, i: int) -> list[bytes]:
    res = store.query_messages("TopicTest", f"U{i:08d}", 10, 0, 2**62, True)
    return [rec.body for rec in decode_records(b"".join(res.buffers), check_crc=True)]


def test_a_fresh_store_takes_a_few_mebibytes_of_disk_not_its_files_sizes(tmp_path: Path) -> None:
    """Default sizes: a 1 GiB segment, 6 MB queue files, a 240 MB index file. On disk: a step of the
    segment (4 MiB), of each queue's file (64 KiB) and of the index (768 KiB), also after a restart
    (a file opened again is reserved on demand as well)."""
    root = tmp_path / "store"
    for run in range(2):
        store = MessageStore(StoreConfig(root))
        store.start()
        try:
            for q in range(QUEUES):
                assert store.put(keyed(run * QUEUES + q, q)).status is PutStatus.PUT_OK
            used, sizes = disk_use(root)
            assert sizes > (1 << 30) + QUEUES * 6_000_000 + 240_000_000
            assert used < 6 << 20
        finally:
            store.shutdown()
    store = MessageStore(StoreConfig(root))
    store.start()
    try:
        assert [bodies(store, "TopicTest", q) for q in range(QUEUES)] == [
            [b"%08d" % q, b"%08d" % (QUEUES + q)] for q in range(QUEUES)
        ]
    finally:
        store.shutdown()


def test_queue_and_index_files_filled_over_many_steps_and_a_restart_keep_every_message(
    tmp_path: Path,
) -> None:
    """Queue files of 5000 units (two steps each) and index files of 66 000 entries (a step of
    65 536 and the rest): the writer crosses steps and files, stops, reopens the files half full
    and goes on; every message is read back and found by its key."""
    config = small_config(
        tmp_path / "store",
        mapped_file_size_commitlog=16 << 20,
        mapped_file_size_consume_queue=20 * 5000,
        max_index_num=66_000,
    )
    count = 70_000
    for first, end in ((0, 40_000), (40_000, count)):
        store = MessageStore(config)
        store.start()
        try:
            for i in range(first, end):
                assert store.put(keyed(i)).status is PutStatus.PUT_OK
        finally:
            store.shutdown()
    store = MessageStore(config)
    store.start()
    try:
        assert bodies(store, "TopicTest", 0) == [b"%08d" % i for i in range(count)]
        for i in (0, 39_999, 40_000, 65_535, 65_536, 65_999, 66_000, count - 1):
            assert found(store, i) == [b"%08d" % i]
        queue_files = sorted((tmp_path / "store" / "consumequeue" / "TopicTest" / "0").iterdir())
        assert len(queue_files) == count // 5000
    finally:
        store.shutdown()


def test_index_entries_without_room_are_indexed_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index file cannot reserve the blocks of its next entries (disk full): the puts are
    stored, their keys are not indexed (never stored into a hole of the mapping), and the next start
    indexes them."""
    config = small_config(tmp_path / "store")
    real_reserve = IndexFile.reserve

    def disk_full(f: IndexFile, count: int) -> None:
        if count > f.reserved_count:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_reserve(f, count)

    store = MessageStore(config)
    store.start()
    try:
        monkeypatch.setattr(IndexFile, "reserve", disk_full)
        for i in range(3):
            assert store.put(keyed(i)).status is PutStatus.PUT_OK
        assert [found(store, i) for i in range(3)] == [[], [], []]
        assert bodies(store, "TopicTest", 0) == [b"%08d" % i for i in range(3)]
    finally:
        store.shutdown()
    monkeypatch.setattr(IndexFile, "reserve", real_reserve)
    store = MessageStore(config)
    store.start()
    try:
        assert [found(store, i) for i in range(3)] == [[b"%08d" % i] for i in range(3)]
    finally:
        store.shutdown()
