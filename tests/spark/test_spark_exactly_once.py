"""Writing exactly once: a streaming query writing to a topic with deduplication on, its driver killed
(-9) while a micro-batch is half written and restarted from the checkpoint. A real driver process, a
real standalone server and a second broker of its cluster, so that a resent row would find another
broker if the sink did not send it to the same queue again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_support import batch_in_flight, consume_all, create_topic, send, spark_env

from cometmq.client import MessageQueue, blocking
from cometmq.spark import queue_of
from processes import TEST_BROKER_CONF, ServerProcess, StandaloneServer, cometmq, free_port, subprocess_env
from waiting import wait_until_blocking

HERE = Path(__file__).parent
ROWS = 6000  # over two queues of broker-a
PER_BATCH = 1500  # maxOffsetsPerTrigger: every micro-batch writes exactly this many rows


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[str]:
    """A standalone server (broker-a) and a second master, broker-b, registered with its name server."""
    server = StandaloneServer(tmp_path / "data")
    server.start()
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF)
    broker_b: ServerProcess | None = None
    try:
        broker_b = ServerProcess(
            ["broker", "--namesrv-addr", server.namesrv, "-c", str(conf), "--data-dir",
             str(tmp_path / "broker-b"), "--host", "127.0.0.1", "--port", str(free_port()),
             "--broker-name", "broker-b"],
            tmp_path / "broker-b.log",
        )  # fmt: skip
        broker_b.wait_ready("CometMQ broker ready:")
        yield server.namesrv
    finally:
        if broker_b is not None:
            broker_b.terminate()
        server.stop()


def start_driver(namesrv: str, checkpoint: Path, *extra: str) -> subprocess.Popen[bytes]:
    """The driver, its output (Spark's log) appended to driver.log beside the checkpoint."""
    with (checkpoint.parent / "driver.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "write_driver.py"), namesrv, "OnceIn", "OnceOut", str(checkpoint),
             str(PER_BATCH), *extra],
            env={**subprocess_env(), **spark_env()},
            cwd=HERE,
            start_new_session=True,  # its own process group: the JVM and Python workers die with it
            stdout=log,
            stderr=log,
        )  # fmt: skip


def test_driver_killed_mid_batch_then_restarted_writes_every_row_once(namesrv: str, tmp_path: Path) -> None:
    create_topic(namesrv, "OnceIn", 2)
    bodies = {q: [b"row-%d-%05d" % (q, i) for i in range(ROWS // 2)] for q in range(2)}
    send(namesrv, "OnceIn", bodies)
    created = cometmq(
        "topic", "create", "OnceOut", "--queues", "2", "--attributes", "+deduplication=true", "-n", namesrv
    )
    assert created.returncode == 0, created.stderr
    checkpoint = tmp_path / "checkpoint"

    with blocking.AdminClient(namesrv) as admin:
        out_queues = admin.readable_queues("OnceOut")
        assert {q.broker_name for q in out_queues} == {"broker-a", "broker-b"}

        def stored() -> int:
            return sum(admin.offset_bounds(queue)[1] for queue in out_queues)

        def half_written(batch: int) -> bool:
            """The topic holds some of ``batch``'s rows, at most half: with half of them still to
            write, the kill lands before the batch ends."""
            return 0 < stored() - batch * PER_BATCH <= PER_BATCH // 2

        def half_written_batch() -> int | None:
            """The micro-batch being written (after at least one committed), once it is half written."""
            assert driver.poll() is None, "the driver exited; see driver.log"
            batch = batch_in_flight(checkpoint)
            return batch if batch is not None and batch >= 1 and half_written(batch) else None

        driver = start_driver(namesrv, checkpoint)
        try:
            batch = wait_until_blocking(
                half_written_batch, message="a micro-batch half written", timeout=180, interval=0.005
            )
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        assert batch_in_flight(checkpoint) == batch  # the killed batch was logged, never committed
        assert 0 < stored() - batch * PER_BATCH < PER_BATCH

    restarted = start_driver(namesrv, checkpoint, "--available-now")
    try:
        assert restarted.wait(timeout=300) == 0
    finally:
        if restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGKILL)
            restarted.wait()
    assert batch_in_flight(checkpoint) is None

    received = consume_all(namesrv, "OnceOut")
    by_content = Counter(m.body for m in received)
    assert [body for body, n in by_content.items() if n > 1] == []
    assert set(by_content) == {body for rows in bodies.values() for body in rows}
    by_id = Counter(m.msg_id for m in received)
    assert [key for key, n in by_id.items() if n > 1] == []
    assert len(by_id) == ROWS
    # Each row sits in the queue its id picks, the one every attempt sent it to.
    routed = sorted(out_queues)  # route order: by broker name, then queue id
    misplaced = [
        m for m in received if queue_of(m.msg_id, routed) != MessageQueue(m.topic, m.broker_name, m.queue_id)
    ]
    assert misplaced == []
