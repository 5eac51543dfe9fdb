"""The settled-offsets bitmap behind the check-back agrees with a plain set of offsets, its kinds with a
dict, and the discarded set keeps the newest offsets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker import _transaction
from cometmq.broker._transaction import DiscardedHalves, SettledHalves, op_offsets
from cometmq.protocol.transaction import Settlement


@given(
    start=st.integers(0, 100),
    settled=st.lists(st.integers(0, 300), max_size=200),
    advance_at=st.integers(0, 200),
    low=st.integers(0, 400),
    high=st.integers(0, 400),
)
def test_the_bitmap_agrees_with_a_set(
    start: int, settled: list[int], advance_at: int, low: int, high: int
) -> None:
    halves = SettledHalves(start)
    model = set(range(start))
    for i, offset in enumerate(settled):
        halves.add(offset)
        model.add(offset)
        if i == advance_at:
            halves.advance()
    first = halves.advance()
    expected_first = next(offset for offset in range(400) if offset not in model)
    assert first == halves.first_unsettled == expected_first
    assert [offset for offset in range(400) if offset in halves] == sorted(model | set(range(first)))
    assert list(halves.unsettled(0, 350)) == [offset for offset in range(350) if offset not in model]
    assert list(halves.unsettled(low, high)) == [o for o in range(low, high) if o not in model and o >= first]


@given(
    start=st.integers(0, 100),
    settled=st.lists(st.integers(0, 300), max_size=200),
    advance=st.booleans(),
    low=st.integers(0, 400),
    high=st.integers(0, 400),
)
def test_counting_the_unsettled_agrees_with_listing_them(
    start: int, settled: list[int], advance: bool, low: int, high: int
) -> None:
    halves = SettledHalves(start)
    for offset in settled:
        halves.add(offset)
    if advance:
        halves.advance()
    assert halves.count_unsettled(low, high) == sum(1 for _ in halves.unsettled(low, high))


def test_op_record_bodies_name_one_offset_or_several() -> None:
    assert list(op_offsets(b"7")) == [7]
    assert list(op_offsets(b"1,2,30")) == [1, 2, 30]
    assert list(op_offsets(b"4,,x,5")) == [4, 5]


@given(
    start=st.integers(0, 100),
    settled=st.lists(  # an offset is settled once
        st.tuples(st.integers(0, 300), st.sampled_from([*Settlement, None])),
        max_size=200,
        unique_by=lambda pair: pair[0],
    ),
    advance_at=st.integers(0, 200),
)
def test_the_kinds_agree_with_a_dict_at_and_past_h(
    start: int, settled: list[tuple[int, Settlement | None]], advance_at: int
) -> None:
    halves = SettledHalves(start)
    model: dict[int, Settlement | None] = {}
    for i, (offset, kind) in enumerate(settled):
        halves.add(offset, kind)
        if offset >= start:
            model[offset] = kind if kind in (Settlement.COMMIT, Settlement.ROLLBACK) else None
        if i == advance_at:
            halves.advance()
    first = halves.advance()
    assert [halves.kind(offset) for offset in range(first, 400)] == [
        model.get(offset) for offset in range(first, 400)
    ]


def test_the_discarded_set_keeps_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transaction, "_MAX_DISCARDED", 3)
    discarded = DiscardedHalves()
    for offset in range(5):
        discarded.add(offset, 1000 + offset, 15)
    discarded.add(3, 1003, 1)  # known already: neither moved nor recounted
    assert [offset for offset in range(5) if offset in discarded] == [2, 3, 4]
    assert discarded.checks(3, 1003) == 15 and discarded.checks(0, 1000) is None
    assert discarded.checks(3, 2000) is None  # another half at the same half offset (a log cut back)
    assert discarded.snapshot() == {"2": [1002, 15], "3": [1003, 15], "4": [1004, 15]}
    discarded.add(3, 2000, 2)  # that other half discarded too: it takes the offset's place, newest
    assert discarded.checks(3, 2000) == 2 and discarded.checks(3, 1003) is None
    assert list(discarded.snapshot()) == ["2", "4", "3"]
