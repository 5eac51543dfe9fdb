"""``cometmq bench produce|consume|latency`` against a real ``cometmq standalone`` process.

Benchmarks report speed, which tests never assert; these check that each workload does what its
report says: the messages counted were sent, stored and read, latencies come from real samples.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from processes import cometmq


def bench(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cometmq("bench", *args, "-n", namesrv, timeout=180)


def rows(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stdout + result.stderr
    report: list[dict[str, Any]] = json.loads(result.stdout)["rows"]
    return report


def test_produce_then_consume_reads_back_exactly_what_was_produced(namesrv_addr: str) -> None:
    produced = rows(
        bench(namesrv_addr, "produce", "--topic", "BenchA", "--count", "3000", "--batch", "64", "--json")
    )
    assert produced[0]["messages"] == 3000
    assert produced[0]["msg_per_s"] > 0 and produced[0]["p50_us"] <= produced[0]["p99_us"]
    # The bench's warm-up send stores one message more than counted.
    consumed = rows(bench(namesrv_addr, "consume", "--topic", "BenchA", "--count", "3001", "--json"))
    assert consumed[0]["messages"] == 3001
    assert consumed[0]["mb_per_s"] > 0


def test_consume_refuses_a_topic_without_enough_messages(namesrv_addr: str) -> None:
    bench(namesrv_addr, "produce", "--topic", "BenchB", "--count", "10", "--json")
    result = bench(namesrv_addr, "consume", "--topic", "BenchB", "--count", "1000")
    assert result.returncode == 1
    assert "holds 11 messages, fewer than --count 1000" in result.stderr
    assert "Traceback" not in result.stderr


def test_latency_reports_sync_sends_and_every_end_to_end_message(namesrv_addr: str) -> None:
    report = rows(
        bench(
            namesrv_addr,
            "latency",
            "--topic",
            "BenchC",
            "--count",
            "200",
            "--warmup",
            "20",
            "--rate",
            "200",
            "--duration",
            "2",
            "--json",
        )
    )
    sync, e2e = report
    assert sync["messages"] == 200 and 0 < sync["p50_us"] <= sync["p99_us"] <= sync["max_us"]
    # Every message sent at 200/s for 2 s reached the consumer process.
    assert e2e["messages"] == 400 and 0 < e2e["p50_us"] <= e2e["p99_us"]


def test_table_output_names_the_workload(namesrv_addr: str) -> None:
    result = bench(namesrv_addr, "produce", "--topic", "BenchD", "--count", "500", "--batch", "50")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    header, line = result.stdout.splitlines()
    assert header.split()[:3] == ["workload", "messages", "msg/s"]
    assert line.startswith("produce, batches of 50  500")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["produce", "--batch", "0"], "argument --batch: '0' is not a whole number of at least 1"),
        (["produce", "--inflight", "0"], "argument --inflight: '0' is not a whole number of at least 1"),
        (["produce", "--count", "many"], "argument --count: 'many' is not a whole number of at least 1"),
        (["produce", "--size", "8"], "argument --size: '8' is not a whole number of at least 16"),
        (["consume", "--pull-batch", "2000"], "argument --pull-batch: '2000' is not a whole number"),
        (["latency", "--rate", "0"], "argument --rate: '0' is not a whole number of at least 1"),
    ],
)
def test_values_a_workload_cannot_run_with_are_usage_errors(args: list[str], error: str) -> None:
    # Checked before connecting: the address is never used.
    result = cometmq("bench", *args, "-n", "127.0.0.1:1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"cometmq bench {args[0]}: error: {error}")
