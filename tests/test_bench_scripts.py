"""The scripts in bench/ run to the end and print every figure they are documented to print.

Each runs as a user runs it (`.venv/bin/python bench/X.py`), on a workload small enough for the suite;
the figures themselves are not judged (timings belong to the benchmarks, not to tests), only that
each row is there with a number a reader can use. The scripts check themselves that their workloads
stored every message they sent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
NUMBER = r"([\d,]+(?:\.\d+)?)"


def run_bench(script: str, *args: str, timeout: float = 240, pythonpath: str | None = None) -> str:
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def figures(pattern: str, output: str) -> list[float]:
    """The numbers *pattern*'s groups capture on the line it matches; each must be above zero."""
    found = re.search(pattern, output, re.MULTILINE)
    assert found is not None, f"no line matches {pattern!r} in:\n{output}"
    numbers = [float(group.replace(",", "")) for group in found.groups()]
    assert all(n > 0 for n in numbers), found.group(0)
    return numbers


def test_store_bench_prints_the_disk_every_workload_and_the_flush_mode_ratio(tmp_path: Path) -> None:
    out = run_bench(
        "store.py", "--count", "640", "--sync-count", "320", "--rounds", "1", "--dir", str(tmp_path)
    )
    figures(rf"^disk: dd sequential write {NUMBER} MB/s; 4 KiB append\+fdatasync {NUMBER} µs", out)
    # the group commit's cost, as the store pays it (blocks written ahead) and as it would without
    figures(
        rf"KiB\+fdatasync into blocks written before {NUMBER} µs \(into a new sparse file {NUMBER} µs\)$", out
    )
    for mode, workload in (
        ("ASYNC_FLUSH", "put, 1 at a time"),
        ("ASYNC_FLUSH", "put_batch of 32"),
        ("ASYNC_FLUSH", "16 producers"),
        ("SYNC_FLUSH", "16 producers"),
        ("SYNC_FLUSH", "put_batch of 32"),
        ("ASYNC_FLUSH", "16 producers, broker"),
        ("SYNC_FLUSH", "16 producers, broker"),
    ):
        # appends/s, flushed/s, (MB/s and the share of the disk, which round to 0 on a slow run or a
        # fast disk), the round's flushed/s
        figures(rf"^  {mode} +{re.escape(workload)} +{NUMBER} +{NUMBER} +[\d,]+ +[\d.]+ +{NUMBER}$", out)
    _, at_most, _ = figures(
        rf"^SYNC_FLUSH / ASYNC_FLUSH, 16 producers: {NUMBER} in the store \(at most {NUMBER} on this disk"
        rf".*\), {NUMBER} through the broker$",
        out,
    )
    assert at_most <= 1.0
    assert list(tmp_path.iterdir()) == []  # the stores, segments and the dd file are gone

    only = run_bench(
        "store.py", "--sync-count", "320", "--rounds", "1", "--dir", str(tmp_path), "--only-broker"
    )
    assert "put_batch" not in only and "in the store" not in only  # no in-store workload ran
    for mode in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        figures(rf"^  {mode} +16 producers, broker +{NUMBER} +{NUMBER} ", only)
    figures(rf"^SYNC_FLUSH / ASYNC_FLUSH, 16 producers: {NUMBER} through the broker$", only)


def test_broker_send_bench_prints_the_cpu_of_a_batched_and_a_single_send() -> None:
    out = run_bench("broker_send.py", "--batches", "20", "--batch", "10", "--rounds", "1")
    for workload in ("SEND_BATCH_MESSAGE of 10", "SEND_MESSAGE_V2"):
        # The thread's user and kernel µs come from getrusage, which may count this little work as 0;
        # the process's µs from its CPU clock.
        figures(rf"^{workload} +[\d.]+ +[\d.]+ +{NUMBER}$", out)


def test_mypyc_build_compiles_a_copy_that_broker_send_runs_on(tmp_path: Path) -> None:
    only = ["cometmq/protocol/codec.py", "cometmq/broker/_send.py"]
    out = tmp_path / "build"
    src = run_bench("mypyc_build.py", "--out", str(out), "--only", *only).strip()
    assert src == str(out / "src")
    probe = (
        "import cometmq.broker._send, cometmq.protocol.codec, cometmq.store._store\n"
        "print(cometmq.broker._send.__file__, cometmq.protocol.codec.__file__, cometmq.store._store.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    send, codec, store = done.stdout.split()
    # The copy's modules are imported, the listed ones compiled and the rest as they were.
    assert send.startswith(src) and send.endswith(".so")
    assert codec.startswith(src) and codec.endswith(".so")
    assert store == os.path.join(src, "cometmq", "store", "_store.py")
    # broker_send runs on the copy, through its compiled send handler.
    printed = run_bench("broker_send.py", "--batches", "20", "--batch", "10", "--rounds", "1", pythonpath=src)
    figures(rf"^SEND_MESSAGE_V2 +[\d.]+ +[\d.]+ +{NUMBER}$", printed)
    assert not list((BENCH.parent / "src").rglob("*.so"))  # the checkout itself is left as it was
    # A later build replaces only what a build made, and never anything inside the checkout.
    (tmp_path / "other" / "src").mkdir(parents=True)
    for elsewhere in (tmp_path / "other", BENCH.parent / "build" / "mypyc"):
        refused = subprocess.run(
            [sys.executable, str(BENCH / "mypyc_build.py"), "--out", str(elsewhere), "--only", only[0]],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode != 0 and refused.stdout == "", refused.stderr
        assert "mypyc_build: " in refused.stderr
    assert (tmp_path / "other" / "src").is_dir()


def test_index_bench_prints_puts_with_and_without_the_index_lookups_and_a_rebuild() -> None:
    out = run_bench("index.py", "--count", "320", "--rounds", "1")
    for state in ("on ", "off"):
        figures(
            rf"^index {state}: put {NUMBER} µs, put_batch\(32\) {NUMBER} µs \({NUMBER} µs per message\)$", out
        )
    figures(rf"^IndexService.add \(one UNIQ_KEY\) {NUMBER} µs, add_keys\(32\) {NUMBER} µs$", out)
    # The lookup's ms and the rebuild's s are printed to two decimals, which a fast machine may round to 0.
    (entries,) = figures(rf"^unique-key lookup among {NUMBER} entries: [\d.]+ ms$", out)
    assert entries >= 320
    records, _ = figures(rf"^full rebuild: [\d.]+ s for {NUMBER} records \({NUMBER} µs each\)$", out)
    assert records == 320 + 320  # single puts and batched puts of the one round


def test_dedup_bench_prints_batched_produce_with_deduplication_off_and_on_and_their_ratio() -> None:
    out = run_bench("dedup.py", "--count", "2000", "--rounds", "1")
    figures(rf"deduplication off: {NUMBER} msg/s", out)
    figures(rf"deduplication on: +{NUMBER} msg/s", out)
    figures(rf"on / off: {NUMBER}$", out)


def test_metrics_bench_prints_produce_and_consume_with_metrics_off_and_on_and_their_ratios() -> None:
    out = run_bench("metrics.py", "--count", "20000", "--rounds", "1")
    for workload in ("produce", "consume"):
        figures(rf"{workload} metrics off: {NUMBER} msg/s, server CPU {NUMBER} µs/msg", out)
        figures(rf"{workload} metrics on: +{NUMBER} msg/s, server CPU {NUMBER} µs/msg", out)
        figures(rf"^{workload} server CPU off / on: {NUMBER}$", out)
        figures(rf"^{workload} on / off: {NUMBER}$", out)
    assert re.search(r"^scrapes answered: \d+, failed: 0$", out, re.MULTILINE), out


def test_sql92_bench_prints_the_cost_of_each_expression() -> None:
    out = run_bench("sql92.py", "--runs", "1000")
    figures(rf"^{NUMBER} µs per match  TAGS = 'TagA'$", out)
    figures(rf"^{NUMBER} µs per match  TAGS = 'TagA' AND price > 100", out)


def test_fuzz_servers_bench_prints_each_servers_inputs_closes_crashes_memory_and_rate() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "fuzz_servers.py"), "--count", "900", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = done.stdout
    # It exits 1 exactly when it lists failures, each kind with its count and examples.
    assert done.returncode == (1 if re.search(r"^\w+: \d+ x ", out, re.MULTILINE) else 0), out + done.stderr
    for server, inputs in (("broker", 600), ("namesrv", 300)):
        assert re.search(
            rf"^{server}: {inputs:,}/{inputs:,} inputs, \d+ failures, max RSS", out, re.MULTILINE
        ), out
        # inputs, connections the server closed, crashes (none), failures, max RSS MiB, inputs/s
        counted, _, _ = figures(rf"^{server} +{NUMBER} +[\d,]+ +0 +\d+ +{NUMBER} +{NUMBER}$", out)
        assert counted == inputs


@pytest.mark.interop
def test_polling_bench_prints_latency_rows_and_the_cpu_of_broker_producer_and_consumer() -> None:
    out = run_bench(
        "polling.py",
        *("--no-redis", "--count", "50", "--warmup", "10", "--rate", "200", "--duration", "1"),
        *("--idle-seconds", "0.5", "--load-seconds", "4"),
    )
    for row in ("one synchronous send", "one blocking send", "end to end at 200 msg/s"):
        figures(rf"^\| {row} \| default \| {NUMBER} \| {NUMBER} \|", out)
    share = r"([\d,]+\.\d+)"  # a share of a core: 0.00 when idle is a figure too
    assert re.search(rf"^\| idle \| default \| {share} \|", out, re.MULTILINE), out
    load_row = rf"^\| 100 msg/s end to end \| default \| {share} \| {share} \| {share} \|"
    assert re.search(load_row, out, re.MULTILINE), out


def test_cpp_client_bench_sends_and_consumes_every_message() -> None:
    out = run_bench("cpp_client.py", "--count", "100", "--threads", "1")
    figures(rf"^send_sync 1 KiB, 1 producer thread\(s\) +{NUMBER}$", out)
    consumed, _ = figures(rf"^push consume 1 KiB, 1 consumer \({NUMBER} msgs\) +{NUMBER}$", out)
    assert consumed >= 100


def test_spark_bench_reads_through_the_connector_and_the_ceiling(tmp_path: Path) -> None:
    out = run_bench(
        "spark.py",
        "--messages",
        "2000",
        "--rounds",
        "1",
        "--no-stream",
        "--master",
        "local[2]",  # the standalone-cluster master is tested in tests/spark/test_spark_cluster.py
        "--dir",
        str(tmp_path),
        timeout=280,
    )
    for job in ("cometmq", "synthetic", "synthetic-prebuilt"):
        figures(rf"^  round 1 {job} +{NUMBER} s +{NUMBER} msg/s", out)
    figures(rf"^local\[2\]: cometmq batch read / synthetic ceiling: {NUMBER} \(of the medians\)", out)


def test_replication_bench_prints_each_mode_beside_no_replication_and_the_slave_copy(tmp_path: Path) -> None:
    pytest.importorskip("cometmq.replication", reason="replication is not in this build")
    out = run_bench("replication.py", "--quick", "--dir", str(tmp_path), timeout=280)
    figures(rf"^disk: write\+fsync of 16 MiB {NUMBER} MB/s; loopback TCP, 16 MiB {NUMBER} MB/s$", out)
    for mode in ("no replication", "ASYNC_MASTER", "SYNC_MASTER"):
        for workload in ("16 producers, 1 message each", "batches of 100, 8 in flight"):
            # msgs/s, MB/s, the ratio to no replication, then the answers counted (the bench itself checks
            # that the master stored every message and the slave reached its end)
            figures(rf"^  {mode} +{re.escape(workload)} +{NUMBER} +{NUMBER} +{NUMBER}  .*SEND_OK [\d,]+", out)
    # its share of the disk's and the loopback's speed may round to 0 on a quick run
    copied, _, _ = figures(
        rf"^slave copy: {NUMBER} MiB in {NUMBER} s: {NUMBER} MB/s "
        r"\([\d.]+ of the disk, [\d.]+ of the loopback\)$",
        out,
    )
    assert copied >= 16
    figures(rf"^the slave's apply path alone \(append_replica in process, .*\): {NUMBER} MB/s", out)
    for mode in ("ASYNC_MASTER", "SYNC_MASTER"):
        figures(rf"^{mode} / no replication: {NUMBER} \(16 producers.*\), {NUMBER} \(batches", out)
    figures(rf"^SYNC_MASTER / ASYNC_MASTER: {NUMBER} \(16 producers.*\), {NUMBER} \(batches", out)
    assert list(tmp_path.iterdir()) == []  # the servers' directories are gone


def test_failover_bench_prints_each_round_the_median_and_max_and_that_nothing_acknowledged_was_lost(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cometmq.failover", reason="failover is not in this build")
    # The lease TTL of tests/failover (TEST_LEASE_TTL_S): each round waits for the dead master's lease to
    # expire, and 3 s still keeps a loaded 2-core machine's leases alive.
    out = run_bench("failover.py", "--quick", "--lease-ttl", "3", "--dir", str(tmp_path), timeout=400)
    for round_number in (1, 2):
        figures(rf"^  round {round_number}: {NUMBER} s \(broker-f-\d killed, broker-f-\d elected\)$", out)
    figures(rf"^master death to first SEND_OK: median {NUMBER} s, max {NUMBER} s \(2 failovers\)$", out)
    # the bench itself fails when an acknowledged message is not stored exactly once
    acknowledged = figures(rf"^acknowledged: {NUMBER} messages, 0 not stored exactly once", out)
    assert acknowledged[0] > 0
    assert re.search(r"^consumer group: every acknowledged message received, \d+ deliveries", out, re.M)
    assert list(tmp_path.iterdir()) == []  # the servers' directories are gone


def test_security_bench_prints_every_figure_for_plain_acl_tls_and_both_with_ratios_to_plain(
    tmp_path: Path,
) -> None:
    out = run_bench("security.py", "--quick", "--dir", str(tmp_path), timeout=400)
    assert re.search(r"^figure +plain +acl +tls +acl\+tls$", out, re.M), out
    ratio = rf"{NUMBER} \({NUMBER}x\)"
    for figure in (
        "produce, batches of 100 msg_per_s",
        "consume from the start msg_per_s",
        "one synchronous send at a time p50_us",
        "one blocking send at a time p50_us",
        "end to end at 2000 msg/s p50_us",
    ):
        figures(rf"^{re.escape(figure)} +{NUMBER} +{ratio} +{ratio} +{ratio}$", out)
    assert list(tmp_path.iterdir()) == []  # the servers' directories are gone


def test_transactions_bench_prints_transactional_beside_plain_sends_and_dedup_on_beside_off(
    tmp_path: Path,
) -> None:
    out = run_bench("transactions.py", "--quick", "--dir", str(tmp_path))
    # msg/s, p50 µs, then the broker's and this process's CPU µs per message (which a quick run's
    # clock ticks may round to 0), and the one round's msg/s
    cpu = r"[\d.]+ +[\d.]+"
    plain = figures(rf"^send, 16 producers +{NUMBER} +{NUMBER} +{cpu} +{NUMBER}$", out)
    transactional = figures(
        rf"^send_in_transaction, 16 producers +{NUMBER} +{NUMBER}x +{NUMBER} +{cpu} +{NUMBER}$", out
    )
    assert abs(transactional[1] - transactional[0] / plain[0]) < 0.006  # to the plain figure above
    # bench/dedup.py's rounds: msg/s alone
    off = figures(rf"^batches of 100, deduplication off +{NUMBER} +{NUMBER}$", out)
    on = figures(rf"^batches of 100, deduplication on +{NUMBER} +{NUMBER}x +{NUMBER}$", out)
    assert abs(on[1] - on[0] / off[0]) < 0.006
    figures(rf"^transactional / plain: {NUMBER} \(target >= 0.5: (?:met|not met)\)$", out)
    figures(rf"^deduplication on / off: {NUMBER} \(target >= 0.8: (?:met|not met)\)$", out)
    # the bench itself stops when a count differs from the messages sent
    sent = figures(
        rf"^counted after the rounds: {NUMBER} transactional sent, {NUMBER} committed copies, {NUMBER} half "
        rf"messages, {NUMBER} op records, 0 check-backs; {NUMBER} plain sent, {NUMBER} stored$",
        out,
    )
    # Per row 1 600 timed and 1 before the clock: two transactional rows; one plain row, and the two
    # sends in a row.
    assert sent == [3202.0] * 4 + [4803.0] * 2
    assert list(tmp_path.iterdir()) == []  # the server's directory is gone


def test_proxy_bench_prints_the_5x_client_through_the_proxy_beside_cometmq_direct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "rocketmq5"))
    from client5 import client5_missing

    missing = client5_missing()
    if missing is not None:
        pytest.skip(missing)
    out = run_bench("proxy.py", "--count", "100", "--rounds", "1")
    # msg/s, then the server's CPU µs per message, which a short run's clock ticks may round to 0 (the
    # ratio to it is then n/a)
    for row in ("5.x send", "CometMQ send", "5.x receive+ack", "CometMQ receive+ack", "CometMQ consume"):
        figures(rf"^{re.escape(row)} +{NUMBER} +[\d,.]+$", out)
    ratios = rf"msg/s {NUMBER}x, server CPU per message (?:[\d.]+x|n/a)$"
    figures(rf"^5\.x send / CometMQ send: {ratios}", out)
    figures(rf"^5\.x receive\+ack / CometMQ receive\+ack: {ratios}", out)
