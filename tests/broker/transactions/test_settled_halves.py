"""The settled-offsets bitmap behind the check-back agrees with a plain set of offsets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker._transaction import SettledHalves, op_offsets


@given(
    start=st.integers(0, 100),
    settled=st.lists(st.integers(0, 300), max_size=200),
    advance_at=st.integers(0, 200),
)
def test_the_bitmap_agrees_with_a_set(start: int, settled: list[int], advance_at: int) -> None:
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


def test_op_record_bodies_name_one_offset_or_several() -> None:
    assert list(op_offsets(b"7")) == [7]
    assert list(op_offsets(b"1,2,30")) == [1, 2, 30]
    assert list(op_offsets(b"4,,x,5")) == [4, 5]
