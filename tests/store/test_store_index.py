"""The message index: lookups by key and unique key, index files, restarts, crashes, retention."""

from __future__ import annotations

import hashlib
import itertools
import logging
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_testlib import SMALL_COMMITLOG, crash, make_msg, small_config

import cometmq.store._store as store_module
from cometmq.common.properties import encode_properties
from cometmq.common.record import decode_records
from cometmq.store import MessageStore, MessageToStore, PutResult, PutStatus
from cometmq.store._index import IndexService, index_key_hash
from cometmq.store.format import INDEX_HEADER_SIZE, unpack_index_header

OpenStore = Callable[..., MessageStore]
FOREVER = 2**62


def keyed_msg(
    topic: str = "TopicTest", uniq: str = "", keys: str = "", body: bytes = b"x", **kw: int
) -> MessageToStore:
    """A message whose UNIQ_KEY / KEYS properties and fields agree, as the broker builds them."""
    props = {}
    if uniq:
        props["UNIQ_KEY"] = uniq
    if keys:
        props["KEYS"] = keys
    msg = make_msg(topic, kw.pop("queue_id", 0), body, encode_properties(props), **kw)
    msg.keys = keys
    msg.uniq_key = uniq
    return msg


def put(store: MessageStore, msg: MessageToStore) -> PutResult:
    result = store.put(msg)
    assert result.status is PutStatus.PUT_OK
    return result


def found(
    store: MessageStore,
    key: str,
    topic: str = "TopicTest",
    unique: bool = False,
    max_num: int = 1000,
    begin: int = 0,
    end: int = FOREVER,
) -> list[bytes]:
    """Bodies of the records a query returns, in its order (CRC-checked)."""
    res = store.query_messages(topic, key, max_num, begin, end, unique)
    return [rec.body for rec in decode_records(b"".join(res.buffers), check_crc=True)]


def index_dir(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "index").iterdir())


def colliding_keys(topic: str) -> tuple[str, str]:
    """Two different keys whose ``topic#key`` have the same crc32 (a birthday search)."""
    seen: dict[int, str] = {}
    for i in itertools.count():
        # Spread the difference over many bytes: crc32 never collides on differences within 32 bits.
        key = hashlib.sha256(b"%d" % i).hexdigest()[:16]
        h = index_key_hash(topic, key)
        if h in seen:
            return seen[h], key
        seen[h] = key
    raise AssertionError("unreachable")


def test_keys_and_unique_keys_are_found(open_store: OpenStore) -> None:
    store = open_store()
    put(store, keyed_msg(uniq="U1", keys="order-1 shared", body=b"a"))
    put(store, keyed_msg(uniq="U2", keys="order-2 shared", body=b"b"))
    put(store, keyed_msg(topic="Other", uniq="U3", keys="shared", body=b"c"))
    last = put(store, keyed_msg(keys=" spaced  out ", body=b"d"))  # empty entries are no keys
    put(store, keyed_msg(body=b"no keys"))

    assert found(store, "order-1") == [b"a"]
    assert found(store, "shared") == [b"b", b"a"]  # newest first, only the topic asked for
    assert found(store, "shared", topic="Other") == [b"c"]
    assert found(store, "U2", unique=True) == [b"b"]
    # As with RocketMQ's client: a key query matches KEYS only, a unique query UNIQ_KEY only.
    assert found(store, "U2") == []
    assert found(store, "order-1", unique=True) == []
    assert found(store, "spaced") == found(store, "out") == [b"d"]
    assert found(store, "") == found(store, "nothing") == []

    res = store.query_messages("TopicTest", "shared", 10, 0, FOREVER)
    assert res.index_last_update_phyoffset == last.commitlog_offset
    assert res.index_last_update_timestamp == last.store_timestamp


def test_time_range_and_max_num(open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_700_000_000_000]
    monkeypatch.setattr(store_module, "_time_ns", lambda: clock[0] * 1_000_000)
    store = open_store(max_index_num=3)  # several files, so whole files are skipped by time too
    times = []
    for i in range(10):
        clock[0] += 1000
        times.append(put(store, keyed_msg(uniq=f"U{i}", keys="k", body=bytes([i]))).store_timestamp)
    assert times == [1_700_000_000_000 + 1000 * (i + 1) for i in range(10)]

    assert found(store, "k", begin=times[3], end=times[6]) == [bytes([i]) for i in (6, 5, 4, 3)]
    assert found(store, "k", begin=times[9] + 1) == []
    assert found(store, "k", end=times[0] - 1) == []
    assert found(store, "U4", unique=True, begin=times[5]) == []
    assert found(store, "U4", unique=True, begin=times[4], end=times[4]) == [bytes([4])]
    assert found(store, "k", max_num=3) == [bytes([9]), bytes([8]), bytes([7])]
    assert found(store, "k", max_num=3, end=times[4]) == [bytes([4]), bytes([3]), bytes([2])]
    assert found(store, "k", max_num=0) == []


def test_hash_collisions_are_told_apart(open_store: OpenStore) -> None:
    k1, k2 = colliding_keys("TopicTest")
    assert k1 != k2 and index_key_hash("TopicTest", k1) == index_key_hash("TopicTest", k2)
    store = open_store()
    put(store, keyed_msg(keys=k1, body=b"1"))
    put(store, keyed_msg(uniq=k2, body=b"2"))
    put(store, keyed_msg(keys=k2, body=b"3"))
    assert found(store, k1) == [b"1"]
    assert found(store, k2) == [b"3"]
    assert found(store, k2, unique=True) == [b"2"]
    assert found(store, k1, unique=True) == []


def test_only_aligned_hash_matches_count(tmp_path: Path) -> None:
    """A hash whose bytes straddle two stored hashes is no match."""
    index = IndexService(tmp_path / "index", 10)
    index.dir.mkdir()
    index._append([0x11223344, 0x55667788, 0x11223344, 0x99AABBCC], [0, 100, 200, 300], 5)
    (f,) = index.files
    assert list(f.hits_newest_first(struct.pack(">I", 0x22334455))) == []
    assert list(f.hits_newest_first(struct.pack(">I", 0x778899AA))) == []
    assert list(f.hits_newest_first(struct.pack(">I", 0x11223344))) == [2, 0]
    assert list(f.hits_newest_first(struct.pack(">I", 0x99AABBCC))) == [3]
    index.close()


def test_many_keys_roll_over_several_files(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=5)
    for i in range(40):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"%d" % i))
    # 120 entries, 5 per file: a record's three entries often span two files.
    assert len(index_dir(root)) == 24
    everything = [b"%d" % i for i in reversed(range(40))]
    assert found(store, "all") == everything
    assert all(found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [b"%d" % i] for i in range(40))

    index = store._index
    assert index is not None
    ends = [(f.begin_offset, f.end_offset) for f in index.files]
    assert all(a <= b for a, b in ends) and all(p[1] <= n[0] for p, n in itertools.pairwise(ends))


def test_put_batch_is_indexed(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store(max_index_num=5)
    batch = [keyed_msg(uniq=f"B{i}", keys=f"b{i} batch" if i % 2 else "", body=b"%d" % i) for i in range(12)]
    result = store.put_batch(batch)
    assert result.status is PutStatus.PUT_OK
    assert found(store, "batch") == [b"%d" % i for i in (11, 9, 7, 5, 3, 1)]
    assert all(found(store, f"B{i}", unique=True) == [b"%d" % i] for i in range(12))
    assert found(store, "b3") == [b"3"]
    assert len(index_dir(tmp_path / "store")) == 5  # 24 entries
    assert store.put_batch([keyed_msg(body=b"plain")] * 3).status is PutStatus.PUT_OK
    assert len(index_dir(tmp_path / "store")) == 5


def test_clean_restart_keeps_the_index(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=7)
    for i in range(30):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i % 3}", body=b"%d" % i))
    before = {key: found(store, key) for key in ("k0", "k1", "k2")}
    files = index_dir(root)
    store.shutdown()

    store = open_store(max_index_num=7)
    assert index_dir(root) == files
    assert {key: found(store, key) for key in ("k0", "k1", "k2")} == before
    put(store, keyed_msg(uniq="U30", keys="k0", body=b"30"))
    assert found(store, "k0") == [b"30", *before["k0"]]
    assert found(store, "U30", unique=True) == [b"30"]


def header_counts(root: Path) -> int:
    """Entries the index headers on disk count, over all files."""
    total = 0
    for path in sorted((root / "index").iterdir()):
        header = unpack_index_header(path.read_bytes()[:INDEX_HEADER_SIZE])
        total += header.count if header is not None else 0
    return total


@pytest.mark.parametrize("synced", [True, False], ids=["header-behind", "never-synced"])
def test_crash_without_shutdown(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: bool
) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=8)
    index = store._index
    assert index is not None and store._flusher is not None
    for i in range(30):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"%d" % i))
    if synced:
        store._flusher.checkpoint_cycle()  # the headers count these 90 entries
    monkeypatch.setattr(index, "sync", lambda: None)  # and no later entry, whenever the thread runs
    for i in range(30, 50):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"%d" % i))
    crash(store)
    assert header_counts(root) == (90 if synced else 0)

    store = open_store(max_index_num=8)
    assert found(store, "all") == [b"%d" % i for i in reversed(range(50))]  # each once
    assert all(found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [b"%d" % i] for i in range(50))
    store.shutdown()
    assert header_counts(root) == 150


def _tear(root: Path, results: list[PutResult], how: str) -> int:
    """Damage the tail of the commit log from the 7th-last record on; return where it now ends."""
    torn = results[-7]
    seg = root / "commitlog" / f"{torn.commitlog_offset - torn.commitlog_offset % SMALL_COMMITLOG:020d}"
    rel = torn.commitlog_offset % SMALL_COMMITLOG
    with seg.open("r+b") as f:
        if how == "torn":
            f.truncate(rel + torn.wrote_bytes // 2)  # a record cut in the middle
        else:
            f.seek(rel)  # pages lost in a power cut read back as zeros
            f.write(bytes(SMALL_COMMITLOG - rel))
    return torn.commitlog_offset


@pytest.mark.parametrize("how", ["torn", "zeroed"])
def test_damaged_log_tail(open_store: OpenStore, tmp_path: Path, how: str) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=10)
    results = [
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"%d" % i + b"." * 300)) for i in range(120)
    ]
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()  # the index headers count the records about to be lost
    crash(store)
    end = _tear(root, results, how)

    store = open_store(max_index_num=10)
    assert store.commitlog_max_offset == end
    index = store._index
    assert index is not None and all(f.end_offset < end for f in index.files)
    kept = [b"%d" % i + b"." * 300 for i in range(113)]
    assert found(store, "all") == kept[::-1]
    assert all(found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [] for i in range(113, 120))

    # Sent again, the lost messages land where their records were: found once, the new copies.
    for i in range(113, 120):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"again %d" % i))
    assert all(
        found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [b"again %d" % i]
        for i in range(113, 120)
    )
    assert len(found(store, "all")) == 120
    crash(store)
    store = open_store(max_index_num=10)
    assert len(found(store, "all")) == 120


def test_damaged_index_files_are_rebuilt(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=6)
    for i in range(20):
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i} all", body=b"%d" % i))
    store.shutdown()
    files = index_dir(root)
    assert len(files) == 10
    with (root / "index" / files[4]).open("r+b") as f:  # a garbled header
        f.seek(12)
        f.write(b"\xff\xff")
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store(max_index_num=6)
    assert f"index file {files[4]} is damaged or out of order; deleting it and 5 later file(s)" in caplog.text
    assert index_dir(root)[:4] == files[:4]
    assert found(store, "all") == [b"%d" % i for i in reversed(range(20))]
    store.shutdown()

    # Lost pages at the end of the newest file: its header no longer matches its entries.
    last = root / "index" / index_dir(root)[-1]
    with last.open("r+b") as f:
        f.seek(64 + 4 * 6)
        f.write(bytes(8 * 6))
    store = open_store(max_index_num=6)
    assert found(store, "all") == [b"%d" % i for i in reversed(range(20))]


def test_deleting_the_index_directory_rebuilds_it(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=16)
    for i in range(200):  # several commit-log segments
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i % 7}", body=b"%d" % i + b"-" * 700))
    assert len(list((root / "commitlog").iterdir())) > 2
    before = {f"k{j}": found(store, f"k{j}") for j in range(7)}
    store.shutdown()
    shutil.rmtree(root / "index")

    store = open_store(max_index_num=16)
    assert {f"k{j}": found(store, f"k{j}") for j in range(7)} == before
    assert len(index_dir(root)) == 25  # 400 entries, 16 per file
    assert found(store, "U123", unique=True) == [b"123" + b"-" * 700]


def test_delete_files_before(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(max_index_num=4)
    results = [put(store, keyed_msg(keys=f"k{i}", body=b"%d" % i)) for i in range(20)]
    index = store._index
    assert index is not None
    files = index_dir(root)
    assert len(files) == 5  # entries 0-3, 4-7, 8-11, ...

    assert index.delete_files_before(results[3].commitlog_offset) == 0  # file 0 still ends there
    assert index.delete_files_before(results[9].commitlog_offset) == 2
    assert index_dir(root) == files[2:]
    assert found(store, "k7") == []  # gone from the index with its file
    assert found(store, "k8") == [b"8"]
    # Never the newest file, even if all of it points below.
    assert index.delete_files_before(FOREVER) == 2
    assert index_dir(root) == files[-1:]
    assert found(store, "k19") == [b"19"]
    store.shutdown()
    store = open_store(max_index_num=4)
    assert index_dir(root) == files[-1:]
    assert found(store, "k19") == [b"19"] and found(store, "k10") == []


def test_index_can_be_switched_off_and_on(open_store: OpenStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(message_index_enable=False)
    for i in range(5):
        put(store, keyed_msg(uniq=f"U{i}", keys="k", body=b"%d" % i))
    assert found(store, "k") == []
    assert not (root / "index").exists()
    store.shutdown()
    # On again: what was stored meanwhile is indexed at start.
    store = open_store()
    assert found(store, "k") == [b"4", b"3", b"2", b"1", b"0"]


def test_prepared_and_rolled_back_records_are_not_indexed(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    put(store, keyed_msg(uniq="P", keys="tx", body=b"prepared", sys_flag=0x4))
    put(store, keyed_msg(uniq="R", keys="tx", body=b"rolled back", sys_flag=0xC))
    put(store, keyed_msg(uniq="C", keys="tx", body=b"committed", sys_flag=0x8))
    assert found(store, "tx") == [b"committed"]
    assert found(store, "P", unique=True) == []
    crash(store)
    shutil.rmtree(tmp_path / "store" / "index")
    store = open_store()
    assert found(store, "tx") == [b"committed"]


# -- property: whatever the keys and topics, a lookup finds exactly what was indexed -------------

_KEY = st.text(
    st.characters(exclude_characters=" \x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=8
)
_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["T", "Topic-2", "%RETRY%g", "Zürich"]),
        st.one_of(st.just(""), _KEY),
        st.lists(_KEY, max_size=3),
    ),
    min_size=1,
    max_size=25,
)


def _expected(
    msgs: list[tuple[str, str, list[str]]], offsets: list[int], topic: str, key: str, unique: bool
) -> list[int]:
    return [
        offset
        for (t, uniq, keys), offset in zip(reversed(msgs), reversed(offsets), strict=True)
        if t == topic and (uniq == key if unique else key in keys)
    ]


def _lookups_match(store: MessageStore, msgs: list[tuple[str, str, list[str]]], offsets: list[int]) -> None:
    every_key = {k for _, uniq, keys in msgs for k in [uniq, *keys] if k} | {"absent"}
    for topic in {t for t, _, _ in msgs} | {"Elsewhere"}:
        for key in every_key:
            for unique in (False, True):
                res = store.query_messages(topic, key, 1000, 0, FOREVER, unique)
                got = [rec.commitlog_offset for rec in decode_records(b"".join(res.buffers), check_crc=True)]
                assert got == _expected(msgs, offsets, topic, key, unique), (topic, key, unique)


@settings(max_examples=40, deadline=None)
@given(_MESSAGES, st.integers(1, 6), st.sampled_from(["clean", "crash", "rebuild"]))
def test_every_indexed_key_is_found_and_nothing_else(
    msgs: list[tuple[str, str, list[str]]], capacity: int, restart: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="cometmq-index-") as tmp:
        root = Path(tmp)

        def start() -> MessageStore:
            store = MessageStore(small_config(root, max_index_num=capacity))
            store.start()
            return store

        store = start()
        try:
            offsets = [
                put(store, keyed_msg(topic, uniq, " ".join(keys), b"%d" % i)).commitlog_offset
                for i, (topic, uniq, keys) in enumerate(msgs)
            ]
            _lookups_match(store, msgs, offsets)
            if restart == "clean":
                store.shutdown()
            else:
                crash(store)
                if restart == "rebuild":
                    shutil.rmtree(root / "index", ignore_errors=True)
            store = start()
            _lookups_match(store, msgs, offsets)
        finally:
            store.shutdown()


def _indexed_to(root: Path) -> int:
    headers = [
        unpack_index_header(p.read_bytes()[:INDEX_HEADER_SIZE]) for p in sorted((root / "index").iterdir())
    ]
    return max(h.indexed_to for h in headers if h is not None)


def test_messages_without_keys_are_not_scanned_again_at_start(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    store = open_store()
    put(store, keyed_msg(uniq="U0", body=b"keyed"))
    for _ in range(300):  # a client that sets no UNIQ_KEY (the JS client)
        put(store, keyed_msg(body=b"plain" * 50))
    assert store._flusher is not None
    store._flusher.checkpoint_cycle()
    checkpointed = store.commitlog_max_offset
    put(store, keyed_msg(uniq="U1", body=b"after"))
    crash(store)
    assert _indexed_to(root) == checkpointed  # the header remembers how far the log was indexed

    with caplog.at_level(logging.INFO, logger="cometmq.store"):
        store = open_store()
    assert f"index: indexing commit log [{checkpointed}, " in caplog.text  # not from 0
    assert found(store, "U0", unique=True) == [b"keyed"] and found(store, "U1", unique=True) == [b"after"]
    end = store.commitlog_max_offset
    store.shutdown()
    assert _indexed_to(root) == end
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cometmq.store"):
        store = open_store()
    assert "index: indexing commit log" not in caplog.text  # a clean start scans nothing


def test_indexed_to_at_the_end_of_a_segment(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When the log's end sits where a segment's blank filler goes, recovery starts there."""
    root = tmp_path / "store"
    store = open_store()
    assert store._flusher is not None
    size = put(store, keyed_msg(uniq="U0", body=b"y" * 1000)).wrote_bytes
    i = 1
    while store.commitlog_max_offset % SMALL_COMMITLOG + size + 8 <= SMALL_COMMITLOG:
        put(store, keyed_msg(uniq=f"U{i}", body=b"y" * 1000))
        i += 1
    store._flusher.checkpoint_cycle()  # indexed to the end of the segment's last record
    boundary = store.commitlog_max_offset
    later = [put(store, keyed_msg(uniq=f"U{j}", body=b"z" * 1000)) for j in range(i, i + 5)]
    assert later[0].commitlog_offset == SMALL_COMMITLOG  # the blank filler went to `boundary`
    crash(store)
    assert _indexed_to(root) == boundary

    with caplog.at_level(logging.INFO, logger="cometmq.store"):
        store = open_store()
    assert "no record starts at" not in caplog.text
    assert f"index: indexing commit log [{boundary}, " in caplog.text
    assert all(found(store, f"U{j}", unique=True) == [b"z" * 1000] for j in range(i, i + 5))
    assert found(store, "U0", unique=True) == [b"y" * 1000]
