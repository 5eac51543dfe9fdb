"""Epochs: the epoch file's format (RocketMQ's), ``consistent_end`` against a model of diverging logs,
and a store's history across begin_epoch, adopt_epochs and restarts."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_testlib import make_msg, small_config

from cometmq.store import EpochEntry, MessageStore, PutStatus, StoreError, consistent_end
from cometmq.store._epochs import EPOCH_FILE_NAME, pack_epochs, unpack_epochs

OpenStore = Callable[..., MessageStore]


def histories() -> st.SearchStrategy[list[EpochEntry]]:
    """Valid histories: epochs increase, start offsets never decrease."""
    steps = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10**12)), max_size=8)
    return steps.map(_history_of)


def _history_of(steps: list[tuple[int, int]]) -> list[EpochEntry]:
    entries, epoch, start = [], 0, 0
    for epoch_step, start_step in steps:
        epoch += epoch_step
        start += start_step
        entries.append(EpochEntry(epoch, start))
    return entries


# -- the file -------------------------------------------------------------------------------------


def test_the_epoch_file_is_rocketmqs_count_crc_and_one_line_per_entry() -> None:
    lines = b"1-0\n3-4096\n"
    crc = zlib.crc32(lines) & 0x7FFFFFFF  # Java's UtilAll.crc32
    assert pack_epochs([EpochEntry(1, 0), EpochEntry(3, 4096)]) == b"2\n" + str(crc).encode() + b"\n" + lines


@given(histories())
def test_an_epoch_file_reads_back_as_written(entries: list[EpochEntry]) -> None:
    assert unpack_epochs(pack_epochs(entries)) == entries


def test_a_crc_of_zero_is_not_checked_as_in_rocketmq() -> None:
    assert unpack_epochs(b"1\n0\n7-100\n") == [EpochEntry(7, 100)]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],  # torn: the last line cut
        lambda data: data.replace(b"4096", b"4097"),  # the CRC no longer matches
        lambda data: b"3" + data[1:],  # the count does not match
        lambda data: b"",
    ],
)
def test_a_torn_or_damaged_epoch_file_is_refused(damage: Callable[[bytes], bytes]) -> None:
    assert unpack_epochs(damage(pack_epochs([EpochEntry(1, 0), EpochEntry(3, 4096)]))) is None


@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_an_epoch_history_or_refused(data: bytes) -> None:
    entries = unpack_epochs(data)
    assert entries is None or unpack_epochs(pack_epochs(entries)) == entries


# -- consistent_end ---------------------------------------------------------------------------------


@st.composite
def diverged_logs(draw: st.DrawFn) -> tuple[list[int], list[EpochEntry], list[int], list[EpochEntry]]:
    """Two stores' logs as the epoch of each byte, with their histories: a history both share (every
    epoch but its last wholly on both), of whose last epoch each side holds a prefix, then epochs of
    each side's own (epoch numbers one side has and the other does not, some writing nothing)."""
    shared = draw(st.lists(st.integers(0, 6), max_size=4))  # the length each shared epoch wrote
    last_local, last_master = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    numbers = iter(range(1, 100))
    base = [(next(numbers), length) for length in shared]
    own_local = draw(st.lists(st.integers(0, 6), max_size=3))
    own_master = draw(st.lists(st.integers(0, 6), max_size=3))
    # Epoch numbers after the shared ones, each number on one side only, increasing along each side.
    after = [next(numbers) for _ in range(len(own_local) + len(own_master))]
    which = draw(st.permutations(range(len(after))))
    local_numbers = sorted(after[i] for i in which[: len(own_local)])
    master_numbers = sorted(after[i] for i in which[len(own_local) :])

    def side(last: int, own: list[tuple[int, int]]) -> tuple[list[int], list[EpochEntry]]:
        epochs = [*base[:-1], (base[-1][0], min(last, base[-1][1]))] if base else []
        labels: list[int] = []
        entries = []
        for epoch, length in [*epochs, *own]:
            entries.append(EpochEntry(epoch, len(labels)))
            labels += [epoch] * length
        return labels, entries

    local = side(last_local, list(zip(local_numbers, own_local, strict=True)))
    master = side(last_master, list(zip(master_numbers, own_master, strict=True)))
    return local[0], local[1], master[0], master[1]


@given(diverged_logs())
def test_the_consistent_end_is_where_the_two_logs_part(
    logs: tuple[list[int], list[EpochEntry], list[int], list[EpochEntry]],
) -> None:
    local_bytes, local, master_bytes, master = logs
    common = 0
    while common < min(len(local_bytes), len(master_bytes)) and local_bytes[common] == master_bytes[common]:
        common += 1
    assert consistent_end(local, len(local_bytes), master, len(master_bytes)) == common


@given(histories(), st.integers(0, 10**12), histories(), st.integers(0, 10**12))
def test_the_consistent_end_is_symmetric_and_within_both_logs(
    local: list[EpochEntry], local_extra: int, master: list[EpochEntry], master_extra: int
) -> None:
    # Each log ends at or after its last epoch's start.
    local_end = (local[-1].start_offset if local else 0) + local_extra
    master_end = (master[-1].start_offset if master else 0) + master_extra
    found = consistent_end(local, local_end, master, master_end)
    assert found == consistent_end(master, master_end, local, local_end)
    assert 0 <= found <= min(local_end, master_end)


def test_a_store_without_history_agrees_up_to_the_shorter_log() -> None:
    assert consistent_end([], 700, [EpochEntry(1, 0), EpochEntry(2, 500)], 600) == 600


def test_histories_without_a_common_epoch_share_nothing() -> None:
    assert consistent_end([EpochEntry(1, 0)], 700, [EpochEntry(2, 0)], 600) == 0
    # The same epoch at another start is another mastership's bytes.
    assert consistent_end([EpochEntry(1, 0), EpochEntry(2, 100)], 700, [EpochEntry(2, 0)], 600) == 0


def test_rocketmqs_example_a_returning_master_keeps_what_its_epoch_shares() -> None:
    old_master = [EpochEntry(1, 0), EpochEntry(2, 1000)]
    new_master = [EpochEntry(1, 0), EpochEntry(2, 1000), EpochEntry(3, 1500)]
    assert consistent_end(old_master, 1800, new_master, 2100) == 1500


# -- the store's history ------------------------------------------------------------------------------


def test_begin_epoch_appends_the_logs_end_and_the_history_survives_a_restart(open_store: OpenStore) -> None:
    store = open_store()
    assert store.epochs() == []
    assert store.begin_epoch(1) == EpochEntry(1, 0)
    assert store.put(make_msg()).status is PutStatus.PUT_OK
    end = store.commitlog_max_offset
    assert store.begin_epoch(4) == EpochEntry(4, end)
    store.shutdown()
    root = Path(store._config.root_dir)
    assert (root / EPOCH_FILE_NAME).read_bytes() == pack_epochs([EpochEntry(1, 0), EpochEntry(4, end)])
    again = open_store()
    assert again.epochs() == [EpochEntry(1, 0), EpochEntry(4, end)]


def test_an_epoch_must_exceed_the_last(open_store: OpenStore) -> None:
    store = open_store()
    store.begin_epoch(3)
    for epoch in (3, 2):
        with pytest.raises(ValueError, match="does not exceed"):
            store.begin_epoch(epoch)
    assert store.epochs() == [EpochEntry(3, 0)]


def test_a_stopped_store_refuses_to_begin_an_epoch(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not running"):
        MessageStore(small_config(tmp_path)).begin_epoch(1)


def test_a_slave_adopts_its_masters_history(open_store: OpenStore) -> None:
    store = open_store()
    store.begin_epoch(1)
    master = [EpochEntry(1, 0), EpochEntry(2, 0), EpochEntry(5, 9000)]
    store.adopt_epochs(master)
    assert store.epochs() == master
    with pytest.raises(ValueError, match="must increase"):
        store.adopt_epochs([EpochEntry(2, 0), EpochEntry(2, 10)])
    with pytest.raises(ValueError, match="must not decrease"):
        store.adopt_epochs([EpochEntry(1, 10), EpochEntry(2, 0)])
    assert store.epochs() == master


def test_begin_epoch_drops_adopted_epochs_this_log_never_reached(open_store: OpenStore) -> None:
    store = open_store()
    store.adopt_epochs([EpochEntry(1, 0), EpochEntry(2, 9000)])
    assert store.begin_epoch(3) == EpochEntry(3, 0)
    assert store.epochs() == [EpochEntry(1, 0), EpochEntry(3, 0)]


def test_a_damaged_epoch_file_falls_back_to_its_backup(open_store: OpenStore) -> None:
    store = open_store()
    store.begin_epoch(1)
    store.begin_epoch(2)  # the file before this is the .bak
    store.shutdown()
    path = Path(store._config.root_dir) / EPOCH_FILE_NAME
    path.write_bytes(path.read_bytes()[:-2])
    assert open_store().epochs() == [EpochEntry(1, 0)]


def test_epochs_beginning_beyond_the_recovered_log_are_dropped_at_start(open_store: OpenStore) -> None:
    store = open_store()
    store.put(make_msg())
    end = store.commitlog_max_offset
    store.adopt_epochs([EpochEntry(1, 0), EpochEntry(2, end), EpochEntry(3, end + 1)])
    store.shutdown()
    assert open_store().epochs() == [EpochEntry(1, 0), EpochEntry(2, end)]
