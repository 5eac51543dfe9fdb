"""``cometmq bench produce|consume|latency`` against a real ``cometmq standalone`` process.

Benchmarks report speed, which tests never assert; these check that each workload does what its
report says: the messages counted were sent, stored and read, latencies come from real samples.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cometmq.cli._bench import _print_result, idle_halt_note, median_rows
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


def test_latency_reports_the_floor_sync_and_blocking_sends_and_every_end_to_end_message(
    namesrv_addr: str,
) -> None:
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
            # Every client, the floor's echo process and the consumer poll for a while after each
            # request (the other latency tests run without): the same rows, every message answered.
            "--busy-poll-us",
            "50",
            "--consumer-busy-poll-us",
            "50",
            "--json",
        )
    )
    floor, sync, blocking_sync, e2e = report
    # The echo process answered every frame (the bench fails otherwise), each measured once.
    assert floor["workload"] == "round trip without a broker"
    assert floor["messages"] == 200 and 0 < floor["p50_us"] <= floor["p99_us"] <= floor["max_us"]
    assert sync["messages"] == 200 and 0 < sync["p50_us"] <= sync["p99_us"] <= sync["max_us"]
    assert blocking_sync["workload"] == "one blocking send at a time"
    assert blocking_sync["messages"] == 200 and 0 < blocking_sync["p50_us"] <= blocking_sync["p99_us"]
    # Every message sent at 200/s for 2 s reached the consumer process.
    assert e2e["messages"] == 400 and 0 < e2e["p50_us"] <= e2e["p99_us"]


@pytest.mark.timing  # how evenly sends go out depends on how promptly the machine wakes the sender
def test_end_to_end_sends_are_spread_over_the_interval_not_sent_in_bursts(namesrv_addr: str) -> None:
    # At 2 000/s a send is due every 500 µs, finer than an event loop's millisecond timers: paced by
    # the loop, 56-61 % of the sends went out right behind the one before, and queued behind it. Paced
    # evenly, only the catch-up after a late wake-up does: 0-0.2 % of them on an idle machine, up to
    # 39 % with two other processes keeping both CPUs busy.
    args = ("latency", "--topic", "BenchP", "--count", "5", "--warmup", "20", "--no-floor", "--no-blocking")
    (_, e2e) = rows(bench(namesrv_addr, *args, "--rate", "2000", "--duration", "0.5", "--json"))
    assert e2e["messages"] == 1000
    assert e2e["bunched_sends"] <= 0.45, e2e


def test_latency_without_floor_blocking_and_e2e_reports_only_the_sync_sends(namesrv_addr: str) -> None:
    args = ("latency", "--topic", "BenchF", "--count", "50", "--warmup", "5", "--no-floor", "--no-e2e")
    args += ("--no-blocking",)
    result = bench(namesrv_addr, *args, "--json")
    (sync,) = rows(result)
    assert sync["workload"] == "one synchronous send at a time" and sync["messages"] == 50
    # The note on the VM's idle policy comes with the report exactly where this machine has that policy.
    note = idle_halt_note()
    assert json.loads(result.stdout).get("note") == note
    table = bench(namesrv_addr, *args).stdout.splitlines()
    assert table[2:] == ([f"note: {note}"] if note else [])


def test_a_note_is_printed_under_the_table_and_kept_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    # On every machine, whatever its idle policy (the test above sees the note only where it applies).
    report = {"rows": [{"workload": "sync", "messages": 5, "p50_us": 90.0}], "note": "a word on the machine"}
    _print_result(report, as_json=False)
    assert capsys.readouterr().out.splitlines()[-1] == "note: a word on the machine"
    _print_result(report, as_json=True)
    assert json.loads(capsys.readouterr().out)["note"] == "a word on the machine"


def _fake_sys(root: Path, driver: str | None, poll_ns: str | None) -> Path:
    if driver is not None:
        (root / "sys/devices/system/cpu/cpuidle").mkdir(parents=True)
        (root / "sys/devices/system/cpu/cpuidle/current_driver").write_text(driver + "\n")
    if poll_ns is not None:
        (root / "sys/module/haltpoll/parameters").mkdir(parents=True)
        (root / "sys/module/haltpoll/parameters/guest_halt_poll_ns").write_text(poll_ns + "\n")
    return root


@pytest.mark.parametrize(
    ("driver", "poll_ns", "noted"),
    [
        ("haltpoll", "0", True),  # a KVM guest that halts an idle vCPU at once
        ("haltpoll", "200000", False),  # polls 200 µs first: wake-ups within that cost no VM exit
        ("intel_idle", None, False),  # bare metal
        ("acpi_idle", "0", False),  # the haltpoll module loaded, another driver in use
        (None, None, False),  # no cpuidle at all (a container without /sys, say)
        ("haltpoll", "garbage", False),
        ("haltpoll", None, False),  # the driver without its parameter file: nothing to go by
    ],
)
def test_idle_halt_note_names_only_a_guest_that_halts_idle_vcpus_at_once(
    tmp_path: Path, driver: str | None, poll_ns: str | None, noted: bool
) -> None:
    note = idle_halt_note(_fake_sys(tmp_path, driver, poll_ns))
    assert (note is not None) == noted
    if noted:
        assert note is not None and "guest_halt_poll_ns 0" in note


def test_table_output_names_the_workload(namesrv_addr: str) -> None:
    result = bench(namesrv_addr, "produce", "--topic", "BenchD", "--count", "500", "--batch", "50")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    header, line = result.stdout.splitlines()
    assert header.split()[:3] == ["workload", "messages", "msg/s"]
    assert line.startswith("produce, batches of 50  500")


def test_rounds_report_the_median_of_each_figure_and_every_round(namesrv_addr: str) -> None:
    bench(namesrv_addr, "produce", "--topic", "BenchE", "--count", "600", "--batch", "50", "--json")
    # 601: the bench's warm-up send stores one message more than counted.
    consume = ("consume", "--topic", "BenchE", "--count", "601")
    (row,) = rows(bench(namesrv_addr, *consume, "--rounds", "3", "--json"))
    # Each round read the topic from its start again.
    assert row["messages"] == 601 and len(row["rounds"]) == 3
    assert row["msg_per_s"] == sorted(row["rounds"])[1]
    table = bench(namesrv_addr, *consume, "--rounds", "2")
    assert table.returncode == 0, table.stderr
    title, header, line = table.stdout.splitlines()
    assert title == "medians over the rounds" and header.endswith("rounds: min-max")
    assert line.startswith("consume from the start  601") and line.endswith("(2)")


def test_median_rows_takes_each_figure_on_its_own() -> None:
    def row(rate: int, p50: float, p99: float) -> dict[str, Any]:
        return {"workload": "w", "messages": 10, "msg_per_s": rate, "p50_us": p50, "p99_us": p99}

    latency = {"workload": "sync", "messages": 5, "p50_us": 90.0, "p99_us": 300.0}
    rounds = [
        [row(100, 5.0, 50.0), latency],
        [row(300, 1.0, 90.0), {**latency, "p50_us": 70.0}],
        [row(200, 9.0, 10.0), {**latency, "p50_us": 80.0}],
        [row(400, 3.0, 30.0), {**latency, "p50_us": 60.0}],
    ]
    first, sync = median_rows(rounds)["rows"]
    # Medians per figure (the mean of the middle two for an even count), not one round's row.
    assert (first["msg_per_s"], first["p50_us"], first["p99_us"]) == (250, 4.0, 40.0)
    assert first["rounds"] == [100, 300, 200, 400] and first["messages"] == 10
    # A row without throughput shows its median latency's spread.
    assert sync["p50_us"] == 75.0 and sync["rounds"] == [90.0, 70.0, 80.0, 60.0]
    # A round without latency samples (an end-to-end run all in its warm-up) has no p50: the median
    # is over the rounds that have one; a row without any headline figure lists no rounds.
    e2e = {"workload": "e2e", "messages": 4, "p50_us": 500.0}
    bare = {"workload": "bare", "messages": 3}
    rounds = [[e2e, bare], [{**e2e, "p50_us": 300.0}, bare], [{"workload": "e2e", "messages": 2}, bare]]
    partial, without = median_rows(rounds)["rows"]
    assert (
        partial["p50_us"] == 400.0 and partial["rounds"] == [500.0, 300.0, None] and partial["messages"] == 4
    )
    assert without == bare


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["produce", "--batch", "0"], "argument --batch: '0' is not a whole number of at least 1"),
        (["produce", "--inflight", "0"], "argument --inflight: '0' is not a whole number of at least 1"),
        (["produce", "--count", "many"], "argument --count: 'many' is not a whole number of at least 1"),
        (["produce", "--size", "8"], "argument --size: '8' is not a whole number of at least 16"),
        (["consume", "--pull-batch", "2000"], "argument --pull-batch: '2000' is not a whole number"),
        (["latency", "--rate", "0"], "argument --rate: '0' is not a whole number of at least 1"),
        (["consume", "--rounds", "0"], "argument --rounds: '0' is not a whole number of at least 1"),
        (
            ["latency", "--busy-poll-us", "100001"],
            "argument --busy-poll-us: '100001' is not a whole number of at least 0 and at most 100000",
        ),
    ],
)
def test_values_a_workload_cannot_run_with_are_usage_errors(args: list[str], error: str) -> None:
    # Checked before connecting: the address is never used.
    result = cometmq("bench", *args, "-n", "127.0.0.1:1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"cometmq bench {args[0]}: error: {error}")
