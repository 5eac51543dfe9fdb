"""The cost of one SQL92 filter match (the figures quoted in ``cometmq.broker.sql92``'s docstring).

.venv/bin/python bench/sql92.py
"""

from __future__ import annotations

import argparse
import functools
import timeit

from cometmq.broker.sql92 import compile_sql92

PROPERTIES = {
    "TAGS": "TagA",
    "KEYS": "k1",
    "price": "150",
    "region": "eu",
    "UNIQ_KEY": "X" * 32,
    "CLUSTER": "c",
}
EXPRESSIONS = ("TAGS = 'TagA'", "TAGS = 'TagA' AND price > 100 AND region IN ('eu', 'us')")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000, help="matches per repeat (1000000)")
    runs = parser.parse_args().runs
    for text in EXPRESSIONS:
        matches = functools.partial(compile_sql92(text).matches, PROPERTIES)
        seconds = min(timeit.repeat(matches, number=runs, repeat=5))
        print(f"{seconds / runs * 1e6:.3f} µs per match  {text}")


if __name__ == "__main__":
    main()
