"""The POP in-flight journal on its own: replay gives back the state its appends made, a tail cut
anywhere loses only the changes after the cut, a corrupt line ends the replay there, and compaction
keeps the state."""

from __future__ import annotations

import copy
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker._popstate import JOURNAL_NAME, InFlight, PopJournal, QueueKey, QueueState
from cometmq.errors import RequestRefused

KEYS: list[QueueKey] = [("G1", "T", 0), ("G1", "T", 1), ("G2", "%RETRY%G2_T", 0)]

offsets = st.integers(min_value=0, max_value=40)
keys = st.sampled_from(KEYS)
operations = st.one_of(
    st.tuples(
        st.just("pop"),
        keys,
        st.lists(offsets, max_size=4, unique=True),
        st.booleans(),
        st.one_of(st.none(), st.sampled_from(["a1", "a2"])),
    ),
    st.tuples(st.just("ack"), keys, offsets),
    st.tuples(st.just("chg"), keys, offsets, st.integers(0, 10**6)),
    st.tuples(st.just("exp"), keys, offsets, st.integers(1, 5)),
    st.tuples(st.just("rst"), keys, offsets),
    st.tuples(st.just("drop"), st.sampled_from(["G1", "G2"])),
)


def _record(operation: tuple[object, ...], now: int) -> dict[str, object]:
    kind = operation[0]
    if kind == "pop":
        _, key, popped, order, attempt = operation
        cursor = max(popped, default=0) + 1  # type: ignore[type-var]
        return PopJournal.pop_record(key, cursor, sorted(popped), now, 30_000, order, attempt)  # type: ignore[arg-type]
    if kind == "ack":
        return PopJournal.ack_record(operation[1], operation[2])  # type: ignore[arg-type]
    if kind == "chg":
        return PopJournal.change_record(operation[1], operation[2], now, operation[3])  # type: ignore[arg-type]
    if kind == "exp":
        return PopJournal.expired_record(operation[1], operation[2], operation[3])  # type: ignore[arg-type]
    if kind == "rst":
        return PopJournal.reset_record(operation[1], operation[2])  # type: ignore[arg-type]
    return PopJournal.drop_group_record(operation[1])  # type: ignore[arg-type]


def _replayed(directory: Path) -> dict[QueueKey, QueueState]:
    journal = PopJournal(directory, sync_flush=False)
    journal.open()
    journal.close()
    return journal.states


@given(st.lists(operations, max_size=30), st.data())
def test_a_tail_cut_anywhere_keeps_exactly_the_whole_lines_before_it(
    tmp_path_factory: object, ops: list[tuple[object, ...]], data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("journal")  # type: ignore[attr-defined]
    journal = PopJournal(directory, sync_flush=False)
    journal.open()
    # The state after each whole line: (bytes of the file, states).
    history = [(0, {})]
    for n, operation in enumerate(ops):
        journal.append(_record(operation, 1_700_000_000_000 + n))
        history.append((journal.path.stat().st_size, copy.deepcopy(journal.states)))
    journal.close()
    whole = journal.path.read_bytes()  # before a replay compacts it
    assert _replayed(directory) == history[-1][1]
    cut = data.draw(st.integers(0, len(whole)))
    cut_dir = directory / "cut"
    cut_dir.mkdir()
    (cut_dir / JOURNAL_NAME).write_bytes(whole[:cut])
    expected = [states for size, states in history if size <= cut][-1]
    assert _replayed(cut_dir) == expected


def test_a_corrupt_line_ends_the_replay_and_is_cut(tmp_path: Path) -> None:
    journal = PopJournal(tmp_path, sync_flush=True)
    journal.open()
    key = KEYS[0]
    journal.append(PopJournal.pop_record(key, 3, [0, 1, 2], 1, 30_000, False))
    journal.append(PopJournal.ack_record(key, 0))
    journal.close()
    lines = journal.path.read_bytes().splitlines(keepends=True)
    flipped = lines[-1].replace(b'"o":0', b'"o":1')  # the CRC no longer matches
    journal.path.write_bytes(lines[0] + flipped)
    states = _replayed(tmp_path)
    assert sorted(states[key].inflight) == [0, 1, 2]
    assert b'"op":"ack"' not in journal.path.read_bytes()


def test_compaction_rewrites_the_live_state_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cometmq.broker import _popstate

    monkeypatch.setattr(_popstate, "COMPACT_AFTER_BYTES", 4096)
    journal = PopJournal(tmp_path, sync_flush=False)
    journal.open()
    key = KEYS[0]
    for offset in range(200):
        journal.append(PopJournal.pop_record(key, offset + 1, [offset], offset, 30_000, False))
        journal.append(PopJournal.ack_record(key, offset))
    journal.append(PopJournal.pop_record(key, 201, [200], 200, 30_000, True, "a1"))
    expected = copy.deepcopy(journal.states)
    journal.close()
    assert journal.path.stat().st_size < 4096
    assert _replayed(tmp_path) == expected
    assert expected[key].inflight[200].attempt_id == "a1"


def test_a_mostly_live_journal_is_not_written_out_to_decide_against_compacting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cometmq.broker import _popstate

    monkeypatch.setattr(_popstate, "COMPACT_AFTER_BYTES", 4096)
    journal = PopJournal(tmp_path, sync_flush=False)
    journal.open()
    written = []
    state_record = PopJournal._state_record
    monkeypatch.setattr(
        PopJournal, "_state_record", staticmethod(lambda *a: written.append(a) or state_record(*a))
    )
    for offset in range(1000):  # all in flight: nothing to compact away
        journal.append(PopJournal.pop_record(KEYS[0], offset + 1, [offset], offset, 30_000, False))
    assert written == []
    journal.close()


def test_a_write_that_fails_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = PopJournal(tmp_path, sync_flush=False)
    journal.open()
    key = KEYS[0]
    journal.append(PopJournal.pop_record(key, 1, [0], 1, 30_000, False))
    before = (copy.deepcopy(journal.states), journal.path.read_bytes())
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:5]))  # the disk fills up
    with pytest.raises(RequestRefused) as refused:
        journal.append(PopJournal.ack_record(key, 0))
    monkeypatch.setattr(os, "write", real_write)
    assert "cannot write the POP journal" in refused.value.remark
    assert (journal.states, journal.path.read_bytes()) == before
    journal.append(PopJournal.ack_record(key, 0))
    journal.close()
    assert not _replayed(tmp_path)[key].inflight


@given(st.lists(operations, max_size=30))
def test_the_low_water_mark_is_the_lowest_offset_not_settled(
    tmp_path_factory: object, ops: list[tuple[object, ...]]
) -> None:
    journal = PopJournal(tmp_path_factory.mktemp("journal"), sync_flush=False)  # type: ignore[attr-defined]
    journal.open()
    for n, operation in enumerate(ops):
        journal.append(_record(operation, 1_700_000_000_000 + n))
        for state in journal.states.values():
            assert state.low_water() == min([state.cursor, *state.inflight, *state.redeliver])
    journal.close()


class _NoScan(dict[int, InFlight]):
    def __iter__(self) -> Iterator[int]:
        raise AssertionError("every offset in flight scanned")


def test_the_low_water_mark_does_not_scan_what_is_in_flight() -> None:
    state = QueueState(1000)
    for offset in range(1000):
        state.put_in_flight(offset, InFlight(0, 30_000, False, 0))
    state.inflight = _NoScan(state.inflight)
    for offset in range(999):
        state.settle(offset)
        assert state.low_water() == offset + 1


def _no_compacting_file(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def refusing(path: object, flags: int, *args: int) -> int:
        if str(path).endswith(".compacting"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)


def test_a_compaction_that_fails_keeps_the_journal_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cometmq.broker import _popstate

    journal = PopJournal(tmp_path, sync_flush=False)
    journal.open()
    monkeypatch.setattr(_popstate, "COMPACT_AFTER_BYTES", 1024)
    _no_compacting_file(monkeypatch)
    key = KEYS[0]
    for offset in range(100):
        journal.append(PopJournal.pop_record(key, offset + 1, [offset], offset, 30_000, False))
        journal.append(PopJournal.ack_record(key, offset))
    journal.append(PopJournal.pop_record(key, 101, [100], 100, 30_000, False))
    expected = copy.deepcopy(journal.states)
    journal.close()
    assert journal.path.stat().st_size > 1024  # never compacted
    monkeypatch.undo()
    assert _replayed(tmp_path) == expected


def test_a_journal_that_cannot_be_compacted_at_open_still_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = PopJournal(tmp_path, sync_flush=True)
    journal.open()
    journal.append(PopJournal.pop_record(KEYS[0], 2, [0, 1], 1, 30_000, False))
    journal.close()
    _no_compacting_file(monkeypatch)
    reopened = PopJournal(tmp_path, sync_flush=True)
    reopened.open()
    reopened.append(PopJournal.ack_record(KEYS[0], 0))
    reopened.close()
    monkeypatch.undo()
    assert sorted(_replayed(tmp_path)[KEYS[0]].inflight) == [1]
