"""The connector on a real Spark standalone cluster: a master and a worker started by the module's
fixture, drivers in their own processes, executors in the worker's JVMs and Python workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
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
# A driver starts a JVM and gets an executor from the worker: slow on a loaded machine, but a driver
# that crashes or an application that gets no executor fails its test at once (watch()).
DRIVER_TIMEOUT_S = 180
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``command`` (a driver) in its own process group, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            env={**subprocess_env(), **spark_env()},
            cwd=HERE,
            start_new_session=True,  # its own process group: the JVM and Python workers die with it
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_driver(script: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A driver process (``script`` in this directory), its output appended to ``log``."""
    return start([sys.executable, str(HERE / script), *args], log)


def watch(driver: subprocess.Popen[bytes], log: Path, cluster: SparkCluster) -> None:
    """AssertionError with the driver's output if it exited, or if an application of the cluster has
    been waiting for an executor for long (the worker cannot give one: its log says why)."""
    if driver.poll() is not None:
        raise AssertionError(f"the driver exited ({driver.returncode}):\n{output_of(log)}")
    cluster.check_executors_given()


def finish(driver: subprocess.Popen[bytes], log: Path, cluster: SparkCluster) -> str:
    """Wait for ``driver`` to exit; its output. A driver still running after the timeout is killed."""

    def exited() -> bool:
        cluster.check_executors_given()
        return driver.poll() is not None

    try:
        wait_until_blocking(
            exited,
            message="the driver to finish",
            timeout=DRIVER_TIMEOUT_S,
            interval=0.2,
        )
    finally:
        kill(driver)
    assert driver.returncode == 0, output_of(log)
    return log.read_text(errors="replace")


def kill(driver: subprocess.Popen[bytes]) -> None:
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()


def output_of(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def unlisted_files(out: Path) -> set[str]:
    """The Parquet files in ``out`` that no committed micro-batch lists in the sink's
    ``_spark_metadata`` log: those of a batch being written, or of one killed."""
    listed = set()
    for entry in (out / "_spark_metadata").glob("[0-9]*"):  # N and N.compact, not the temporary ones
        for line in entry.read_text().splitlines()[1:]:  # after the version line, a file per line
            listed.add(Path(urllib.parse.urlparse(json.loads(line)["path"]).path).name)
    return {path.name for path in out.glob("part-*") if path.name not in listed}


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
    output = finish(driver, log, spark_cluster)
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

    def half_written_batch() -> int | None:
        """The micro-batch being written (after at least one committed), once some of its Parquet
        files are in the output directory: a kill then leaves files _spark_metadata does not list."""
        watch(driver, log, spark_cluster)
        batch = batch_in_flight(checkpoint)
        return batch if batch is not None and batch >= 1 and unlisted_files(out) else None

    try:
        batch = wait_until_blocking(
            half_written_batch, message="a micro-batch half written", timeout=DRIVER_TIMEOUT_S, interval=0.005
        )
    finally:
        kill(driver)
    assert batch_in_flight(checkpoint) == batch  # the killed batch was logged, never committed
    killed_files = unlisted_files(out)
    assert killed_files
    finish(start_driver("stream_driver.py", log, *arguments, "--available-now"), log, spark_cluster)
    assert batch_in_flight(checkpoint) is None
    # The killed batch's files that stay in the directory stay unlisted: another tool reading every file
    # there would see their rows twice; Spark reads only what _spark_metadata lists. (On a cluster the
    # worker may abort the orphaned executor's task, which deletes the file it was writing.)
    remaining = {name for name in killed_files if (out / name).exists()}
    assert remaining <= unlisted_files(out)
    rows = parquet_rows(spark, out)  # the files _spark_metadata lists: not the killed batch's
    assert sorted(rows) == sorted(
        (q, i, body) for q, queued in bodies.items() for i, body in enumerate(queued)
    )


def test_the_pipeline_demo_runs_on_the_cluster_and_says_so(
    spark_cluster: SparkCluster, server: StandaloneServer, tmp_path: Path
) -> None:
    log = tmp_path / "demo.log"
    demo = start(
        [*COMMAND, "pipeline", "demo", "-n", server.namesrv, "--master", spark_cluster.master_url,
         "--events", "400", "--rate", "0", "--workdir", str(tmp_path)],
        log,
    )  # fmt: skip
    output = finish(demo, log, spark_cluster)
    assert f"Using Spark ({spark_cluster.master_url})" in output
    assert "OK: " in output
