"""Client unique message ids (UNIQ_KEY): the batch form against the one-at-a-time form."""

from __future__ import annotations

import itertools
import sys
import threading

from hypothesis import given
from hypothesis import strategies as st

from cometmq.client._msgid import UniqueIdGenerator


def _generator(counter_start: int) -> UniqueIdGenerator:
    generator = UniqueIdGenerator("10.0.0.1")
    generator._counter = itertools.count(counter_start)
    # The clock held still (a stand-in, named as such): ids compare equal only within one millisecond.
    generator._ms_into_month = lambda: 0x01020304  # type: ignore[method-assign]
    return generator


@given(st.integers(0, 0xFFFF), st.integers(1, 300))
def test_a_batch_of_ids_is_what_as_many_single_ids_are_and_counting_goes_on_from_it(
    counter_start: int, count: int
) -> None:
    batch_maker, single_maker = _generator(counter_start), _generator(counter_start)
    single_maker._prefix_hex = batch_maker._prefix_hex  # the same process, as far as ids tell
    batch = batch_maker.next_ids(count)
    singles = [single_maker.next_id() for _ in range(count)]
    assert batch == singles
    assert batch_maker.next_id() == single_maker.next_id()
    for uniq_key in batch:
        assert len(uniq_key) == 32 and uniq_key == uniq_key.upper()
        assert uniq_key.startswith("0A000001") and uniq_key[20:28] == "01020304"
    # The counter (last 2 bytes) wraps at 0xFFFF.
    assert [int(uniq_key[28:], 16) for uniq_key in batch] == [
        (counter_start + i) & 0xFFFF for i in range(count)
    ]


def test_threads_making_single_ids_and_batches_of_ids_at_once_never_get_the_same_id() -> None:
    # A blocking producer makes ids on its callers' threads while its loop makes batches of them.
    generator = UniqueIdGenerator("10.0.0.1")
    made: list[list[str]] = [[], [], []]

    def singles(out: list[str]) -> None:
        for _ in range(15_000):
            out.append(generator.next_id())

    def batches(out: list[str]) -> None:
        for _ in range(10_000):
            out += generator.next_ids(3)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [
            threading.Thread(target=singles, args=(made[0],)),
            threading.Thread(target=singles, args=(made[1],)),
            threading.Thread(target=batches, args=(made[2],)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    every = made[0] + made[1] + made[2]
    assert len(every) == 60_000
    # Fewer ids than the 65 536 counter values: any repeat is two threads taking the same counter.
    assert len(set(every)) == len(every)
