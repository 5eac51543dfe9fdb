"""The message index: lookups by key and unique key, index files, restarts, crashes, retention."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_testlib import SMALL_COMMITLOG, crash, make_msg, small_config

import cometmq.store._store as store_module
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import decode_records
from cometmq.protocol.taghash import java_string_hash
from cometmq.store import MessageBatch, MessageStore, MessageToStore, PutResult, PutStatus
from cometmq.store._index import IndexFile, IndexService, index_key_hash
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
    index = IndexService(tmp_path / "index", 10, retire=lambda files: None)
    index.dir.mkdir()
    index._append([0x11223344, 0x55667788, 0x11223344, 0x99AABBCC], [0, 100, 200, 300], 5)
    (f,) = index.files
    assert list(f.hits_newest_first(struct.pack(">I", 0x22334455))) == []
    assert list(f.hits_newest_first(struct.pack(">I", 0x778899AA))) == []
    assert list(f.hits_newest_first(struct.pack(">I", 0x11223344))) == [2, 0]
    assert list(f.hits_newest_first(struct.pack(">I", 0x99AABBCC))) == [3]
    index.close()


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B"]),
            st.sampled_from(["", "U1", "U2"]),
            st.sampled_from(["", "k", "k j", " k  ", "k\u00e9"]),
            st.integers(0, 1000),
        ),
        max_size=30,
    )
)
def test_records_indexed_together_are_indexed_as_one_by_one(records: list[tuple[str, str, str, int]]) -> None:
    """``add_records`` (a slave's chunk) writes the entries and time range ``add`` writes per record."""
    with tempfile.TemporaryDirectory() as tmp:
        one_by_one = IndexService(Path(tmp) / "one", 7, retire=lambda files: None)
        together = IndexService(Path(tmp) / "together", 7, retire=lambda files: None)
        for index in (one_by_one, together):
            index.dir.mkdir()
        entries = [(topic, uniq, keys, n * 100, ts) for n, (topic, uniq, keys, ts) in enumerate(records)]
        for entry in entries:
            one_by_one.add(*entry)
        together.add_records(entries)
        try:
            assert [(f.count, f.begin_ts, f.end_ts) for f in together.files] == [
                (f.count, f.begin_ts, f.end_ts) for f in one_by_one.files
            ]
            for mine, theirs in zip(together.files, one_by_one.files, strict=True):
                assert bytes(mine.mm[: mine.off_at + 8 * mine.count]) == bytes(
                    theirs.mm[: theirs.off_at + 8 * theirs.count]
                )
        finally:
            one_by_one.close()
            together.close()


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


def test_a_message_batch_is_stored_and_indexed_as_its_columns_say(open_store: OpenStore) -> None:
    """The broker's form of a batch: bodies as views into the request, index names with owners."""
    store = open_store()
    request = b"..first..second..third"
    view = memoryview(request)
    texts = [
        encode_properties({"UNIQ_KEY": "U0", "KEYS": "a b"}),
        encode_properties({"TAGS": "t"}),
        encode_properties({"UNIQ_KEY": "U2", "KEYS": "b"}),
    ]
    first = keyed_msg()
    batch = MessageBatch(
        "TopicTest",
        0,
        0,
        first.born_timestamp,
        first.born_host,
        first.store_host,
        [7, 8, 9],
        [view[2:7], view[9:15], view[17:]],
        [text.encode() for text in texts],
        [0, java_string_hash("t"), 0],
        [b"U0", b"a", b"b", b"U2", b"b"],
        [0, 0, 0, 2, 2],
    )
    result = store.put_batch(batch)
    assert result.status is PutStatus.PUT_OK and result.count == 3
    got = store.get_messages("TopicTest", 0, 0, 10)
    records = decode_records(b"".join(got.buffers), check_crc=True)
    assert [(r.body, r.flag, r.properties, r.queue_offset) for r in records] == [
        (b"first", 7, texts[0], 0),
        (b"second", 8, texts[1], 1),
        (b"third", 9, texts[2], 2),
    ]
    assert found(store, "b") == [b"third", b"first"]
    assert found(store, "a") == [b"first"]
    assert found(store, "U2", unique=True) == [b"third"]
    # Columns that disagree, and index names owned by no message of the batch or not in message
    # order, are refused before anything is written.
    for spoil in (
        lambda b: b.tags_codes.pop(),
        lambda b: b.index_owners.pop(),
        lambda b: b.index_owners.__setitem__(-1, 3),
        lambda b: b.index_owners.__setitem__(0, -1),
        lambda b: b.index_owners.__setitem__(1, -1),  # owners in the middle count as much as the ends
        lambda b: b.index_owners.__setitem__(1, 3),
        lambda b: b.index_owners.reverse(),  # in range, out of order: headers vouch by the last entry
    ):
        spoilt = dataclasses.replace(
            batch, tags_codes=list(batch.tags_codes), index_owners=list(batch.index_owners)
        )
        spoil(spoilt)
        assert store.put_batch(spoilt).status is PutStatus.MESSAGE_ILLEGAL
    assert store.max_offset("TopicTest", 0) == 3
    assert store.commitlog_max_offset == result.commitlog_end_offset


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


# -- review regressions ----------------------------------------------------------------------------


def index_entries(root: Path) -> list[tuple[int, int]]:
    """(hash, commit-log offset) of every entry the headers on disk count, file by file in name order."""
    out: list[tuple[int, int]] = []
    for path in sorted((root / "index").iterdir()):
        data = path.read_bytes()
        header = unpack_index_header(data[:INDEX_HEADER_SIZE])
        assert header is not None
        hashes = struct.unpack_from(f">{header.count}I", data, INDEX_HEADER_SIZE)
        offsets = struct.unpack_from(f">{header.count}q", data, INDEX_HEADER_SIZE + 4 * header.capacity)
        out += zip(hashes, offsets, strict=True)
    return out


def test_a_failed_roll_leaves_the_rest_to_the_next_start(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a new index file, indexing stops; the headers vouch for no record it missed, so the
    next start indexes them (also the rest of a record whose first entries still fitted)."""
    root = tmp_path / "store"
    store = open_store(max_index_num=3)
    assert store._flusher is not None
    real_create = IndexFile.create
    full = [False]

    def create(path: Path, capacity: int) -> IndexFile:
        if full[0]:
            raise OSError(24, "Too many open files")
        return real_create(path, capacity)

    monkeypatch.setattr(IndexFile, "create", staticmethod(create))
    put(store, keyed_msg(uniq="U1", keys="k1", body=b"1"))
    full[0] = True
    second = put(store, keyed_msg(uniq="U2", keys="k2", body=b"2"))  # U2 fits, k2 does not
    put(store, keyed_msg(uniq="U3", body=b"3"))
    store._flusher.checkpoint_cycle()
    assert _indexed_to(root) == second.commitlog_offset
    store.shutdown()
    assert _indexed_to(root) == second.commitlog_offset

    full[0] = False
    store = open_store(max_index_num=3)
    for i in (1, 2, 3):
        assert found(store, f"U{i}", unique=True) == [b"%d" % i]
    assert found(store, "k1") == [b"1"] and found(store, "k2") == [b"2"]
    store.shutdown()
    assert len(index_entries(root)) == 5  # each key once


def test_an_empty_newest_file_does_not_stop_the_truncation(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 right after a roll: the new file's header counts nothing yet, and the entries the
    previous file holds past its "indexed to" must still go before they are indexed again."""
    root = tmp_path / "store"
    store = open_store(max_index_num=6)
    index = store._index
    assert index is not None
    monkeypatch.setattr(index, "sync", lambda: None)  # the test decides what headers count
    put(store, keyed_msg(uniq="U1", keys="k1", body=b"1"))
    log_end = store.commitlog_max_offset
    put(store, keyed_msg(uniq="U2", keys="k2", body=b"2"))
    put(store, keyed_msg(uniq="U3", keys="k3", body=b"3"))  # the first file is full
    # A sync that read the log's end before U2 and U3 were published, their entries' count after.
    index._flush_all(log_end)
    put(store, keyed_msg(uniq="U4", keys="k4", body=b"4"))  # rolls; never synced
    files = index_dir(root)
    crash(store)

    store = open_store(max_index_num=6)
    assert all(
        found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [b"%d" % i] for i in range(1, 5)
    )
    crash(store)
    assert len(index_entries(root)) == 8  # no entry twice
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store(max_index_num=6)
    assert "damaged or out of order" not in caplog.text
    assert index_dir(root) == files
    assert all(found(store, f"k{i}") == [b"%d" % i] for i in range(1, 5))


def test_entries_past_the_recovered_log_end_go(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Power loss: index headers synced before the commit log count entries for records the
    recovered log no longer has; an empty newest file must not keep them."""
    root = tmp_path / "store"
    store = open_store(max_index_num=6)
    index = store._index
    assert index is not None
    monkeypatch.setattr(index, "sync", lambda: None)  # the test decides what headers count
    results = [put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i}", body=b"%d" % i)) for i in range(1, 4)]
    index._flush_all(store.commitlog_max_offset)  # the headers count all six entries, the log is not synced
    put(store, keyed_msg(uniq="U4", keys="k4", body=b"4"))  # rolls; never synced
    crash(store)
    lost = results[1].commitlog_offset  # the log is on disk up to U1's record only
    seg = root / "commitlog" / f"{0:020d}"
    with seg.open("r+b") as f:
        f.seek(lost)
        f.write(bytes(SMALL_COMMITLOG - lost))

    store = open_store(max_index_num=6)
    assert store.commitlog_max_offset == lost
    index = store._index
    assert index is not None and all(f.end_offset < lost for f in index.files)
    assert found(store, "k1") == [b"1"] and found(store, "k2") == found(store, "k3") == []
    for i in (5, 6, 7):  # over the lost records' offsets
        put(store, keyed_msg(uniq=f"U{i}", keys=f"k{i}", body=b"%d" % i))
    crash(store)
    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store(max_index_num=6)
    assert "damaged or out of order" not in caplog.text
    assert all(
        found(store, f"k{i}") == found(store, f"U{i}", unique=True) == [b"%d" % i] for i in (1, 5, 6, 7)
    )
    store.shutdown()
    assert len(index_entries(root)) == 8


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time with daylight saving (US rules), whatever the machine's zone."""
    monkeypatch.setenv("TZ", "EST5EDT,M3.2.0,M11.1.0")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("new_york")
def test_file_names_keep_creation_order_across_a_dst_change(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    clock = [1_699_162_200_000]  # 2023-11-05 01:30 EDT
    monkeypatch.setattr(time, "time_ns", lambda: clock[0] * 1_000_000)
    store = open_store(max_index_num=2)
    put(store, keyed_msg(uniq="U1", body=b"1"))
    put(store, keyed_msg(uniq="U2", body=b"2"))
    clock[0] += 40 * 60_000  # 01:10 EST: local time went back
    put(store, keyed_msg(uniq="U3", body=b"3"))  # a new file
    index = store._index
    assert index is not None
    assert [f.path.name for f in index.files] == index_dir(root)  # name order is creation order
    store.shutdown()

    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store(max_index_num=2)
    assert "damaged or out of order" not in caplog.text
    assert all(found(store, f"U{i}", unique=True) == [b"%d" % i] for i in (1, 2, 3))


def test_a_file_out_of_name_order_costs_a_reindex_not_its_keys(
    open_store: OpenStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files named in local time (before names were UTC) can sort wrongly across a DST change."""
    root = tmp_path / "store"
    store = open_store(max_index_num=2)
    for i in range(6):
        put(store, keyed_msg(uniq=f"U{i}", body=b"%d" % i))
    store.shutdown()
    oldest, *_, newest = index_dir(root)
    (root / "index" / oldest).rename(root / "index" / f"{int(newest) + 1}")

    with caplog.at_level(logging.WARNING, logger="cometmq.store"):
        store = open_store(max_index_num=2)
    assert "is damaged or out of order" in caplog.text
    assert all(found(store, f"U{i}", unique=True) == [b"%d" % i] for i in range(6))
    store.shutdown()
    assert len(index_entries(root)) == 6


def test_retention_neither_waits_for_an_index_sync_nor_closes_files(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete_files_before runs on the event loop: it must not wait while the flush thread
    fdatasyncs an index file, and leaves closing the deleted files to that thread."""
    store = open_store(max_index_num=4)
    index, flusher = store._index, store._flusher
    assert index is not None and flusher is not None
    results = [put(store, keyed_msg(keys=f"k{i}", body=b"%d" % i)) for i in range(11)]  # 3 files
    flusher.checkpoint_cycle()
    old = list(index.files)
    index_fds = {f.mf.fd for f in old}
    syncing, release = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        if fd in index_fds and not release.is_set():
            syncing.set()
            release.wait(60)  # bounded only so that a broken delete cannot hang the run
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    put(store, keyed_msg(keys="k11", body=b"11"))  # into the third file: something to sync
    cycle = threading.Thread(target=flusher.checkpoint_cycle)
    cycle.start()
    try:
        assert syncing.wait(30)
        deleted = index.delete_files_before(results[8].commitlog_offset)
        # Returned while the fdatasync still hangs: the delete did not wait for the sync.
        assert not release.is_set() and cycle.is_alive()
        still_open = [f.mf.fd >= 0 for f in old]
    finally:
        release.set()
        cycle.join()
    assert deleted == 2
    assert still_open == [True, True, True]
    assert index.files == old[2:]
    flusher.checkpoint_cycle()  # the next cycle closes them
    assert [f.mf.fd >= 0 for f in old] == [False, False, True]
    assert found(store, "k7") == [] and found(store, "k11") == [b"11"]


def test_every_path_writes_the_same_entries(open_store: OpenStore, tmp_path: Path) -> None:
    """put (``add``), put_batch (``add_keys``) and the start-up scan (``_reindex``) hash alike."""
    msgs = [
        ("Zürich", "Ü-1", "straße  x"),
        ("Zürich", "", "日本 語"),
        ("Zürich", "U-3", ""),
        ("Zürich", "", " "),
        ("Zürich", "U-5", "single"),
    ]
    expected = [
        (index_key_hash(topic, key), i)
        for i, (topic, uniq, keys) in enumerate(msgs)
        for key in [uniq, *keys.split(" ")]
        if key
    ]

    def entries(root: Path, offsets: list[int]) -> list[tuple[int, int]]:
        return [(h, offsets.index(offset)) for h, offset in index_entries(root)]

    one = open_store(max_index_num=3)
    offsets = [put(one, keyed_msg(t, u, k, b"%d" % i)).commitlog_offset for i, (t, u, k) in enumerate(msgs)]
    one.shutdown()
    assert entries(tmp_path / "store", offsets) == expected
    shutil.rmtree(tmp_path / "store" / "index")
    open_store(max_index_num=3).shutdown()  # the start-up scan indexes everything again
    assert entries(tmp_path / "store", offsets) == expected

    cfg = small_config(tmp_path / "batch", max_index_num=3)
    batch = MessageStore(cfg)
    batch.start()
    try:
        res = batch.put_batch([keyed_msg(t, u, k, b"%d" % i) for i, (t, u, k) in enumerate(msgs)])
        assert res.status is PutStatus.PUT_OK
    finally:
        batch.shutdown()
    assert entries(tmp_path / "batch", offsets) == expected
