"""bench/pop.py runs to the end and prints its figures (kept apart from test_bench_scripts.py, which
runs the other bench scripts the same way)."""

from __future__ import annotations

from test_bench_scripts import figures, run_bench


def test_pop_bench_prints_pop_beside_pull_and_their_ratio() -> None:
    output = run_bench("pop.py", "--count", "200", "--rounds", "1")
    figures(r"^LitePullConsumer\.read\s+([\d.]+)", output)
    figures(r"^SimpleConsumer receive \+ ack\s+([\d.]+)", output)
    figures(r"^pop / pull: ([\d.]+) of the rate", output)
