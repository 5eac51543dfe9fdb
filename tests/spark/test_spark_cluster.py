"""The connector on a real Spark standalone cluster: a master and a worker started by the module's
fixture, drivers in their own processes, executors in the worker's JVMs and Python workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from spark_cluster import SparkCluster
from spark_support import batch_in_flight, create_topic, parquet_rows, send, spark_env

from processes import COMMAND, StandaloneServer, subprocess_env
from waiting import wait_until_blocking

HERE = Path(__file__).parent
# Each driver starts a JVM and gets an executor from the worker: slow on a loaded machine.
DRIVER_TIMEOUT_S = 600
pytestmark = pytest.mark.timeout(2 * DRIVER_TIMEOUT_S)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def start_driver(script: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A driver process (``script`` in this directory), its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(HERE / script), *args],
            env={**subprocess_env(), **spark_env()},
            cwd=HERE,
            start_new_session=True,  # its own process group: the JVM and Python workers die with it
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def finish(driver: subprocess.Popen[bytes], log: Path) -> str:
    """Wait for ``driver`` to exit; its output. A driver still running after the timeout is killed."""
    try:
        returncode = driver.wait(timeout=DRIVER_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    output = log.read_text(errors="replace")
    assert returncode == 0, output[-4000:]
    return output


def test_a_batch_read_runs_on_the_clusters_executors(
    spark_cluster: SparkCluster, server: StandaloneServer, tmp_path: Path
) -> None:
    create_topic(server.namesrv, "ClusterBatch", 3)
    bodies = {q: [b"c-%d-%04d" % (q, i) for i in range(1000)] for q in range(3)}
    send(server.namesrv, "ClusterBatch", bodies)
    log = tmp_path / "driver.log"
    driver = start_driver(
        "batch_driver.py", log, server.namesrv, "ClusterBatch", str(tmp_path / "out"), "--master",
        spark_cluster.master_url,
    )  # fmt: skip
    output = finish(driver, log)
    assert f"master {spark_cluster.master_url} application cometmq-tests" in output
    assert "cometmq-tests" in spark_cluster.application_names()
    table = pq.read_table(tmp_path / "out").to_pylist()
    got = {(row["queue_id"], row["queue_offset"]): row["body"] for row in table}
    assert len(table) == len(got) == 3000
    assert got == {(q, i): body for q, rows in bodies.items() for i, body in enumerate(rows)}


def test_a_stream_whose_driver_is_killed_mid_batch_writes_every_message_once_on_the_cluster(
    spark: Any, spark_cluster: SparkCluster, server: StandaloneServer, tmp_path: Path
) -> None:
    create_topic(server.namesrv, "ClusterKill", 4)
    bodies = {q: [b"k-%d-%04d" % (q, i) for i in range(1000)] for q in range(4)}
    send(server.namesrv, "ClusterKill", bodies)
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"
    arguments = [
        server.namesrv,
        "ClusterKill",
        str(out),
        str(checkpoint),
        "500",  # eight micro-batches
        "--master",
        spark_cluster.master_url,
    ]
    driver = start_driver("stream_driver.py", log, *arguments)
    try:
        batch = wait_until_blocking(
            lambda: (b := batch_in_flight(checkpoint)) is not None and b >= 2 and b,
            message="batch 2 in flight",
            timeout=DRIVER_TIMEOUT_S,
            interval=0.005,
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert batch_in_flight(checkpoint) == batch  # the killed batch was logged, never committed
    finish(start_driver("stream_driver.py", log, *arguments, "--available-now"), log)
    assert batch_in_flight(checkpoint) is None
    rows = parquet_rows(spark, out)  # the files _spark_metadata lists: not the killed batch's
    assert sorted(rows) == sorted(
        (q, i, body) for q, queued in bodies.items() for i, body in enumerate(queued)
    )


def test_the_pipeline_demo_runs_on_the_cluster_and_says_so(
    spark_cluster: SparkCluster, server: StandaloneServer, tmp_path: Path
) -> None:
    demo = subprocess.run(
        [*COMMAND, "pipeline", "demo", "-n", server.namesrv, "--master", spark_cluster.master_url,
         "--events", "400", "--rate", "0", "--workdir", str(tmp_path)],
        env={**subprocess_env(), **spark_env()},
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"Starting Spark ({spark_cluster.master_url})" in demo.stdout
    assert "OK: " in demo.stdout
