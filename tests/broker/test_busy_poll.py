"""Busy polling, end to end: a broker started with ``--busy-poll-us`` (or ``busyPollMicros`` in its
broker.conf) and clients made with ``busy_poll_us`` keep their loops polling after a request, and only
then; everything they serve or send is answered as without. How much latency it saves is for
``cometmq bench latency``, not for tests."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cometmq.cli._main import build_parser
from cometmq.cli._servers import _broker_config
from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, PushConsumer
from cometmq.errors import ConfigError
from processes import StandaloneServer, cometmq

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process *pid* so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _broker_cpu_after_a_request(server: StandaloneServer, topic: str) -> float:
    """CPU the server process spends in the 0.3 s after it answered one request."""
    assert server.process is not None
    pid = server.process.proc.pid

    async def request() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic(topic, 1)

    asyncio.run(request())
    before = _cpu_seconds(pid)
    time.sleep(0.3)
    return _cpu_seconds(pid) - before


@pytest.mark.parametrize("how", ["flag", "broker.conf"])
def test_a_broker_given_a_window_polls_after_each_request_and_only_then(tmp_path: Path, how: str) -> None:
    if how == "flag":
        server = StandaloneServer(tmp_path / "data", "--busy-poll-us", "200000")  # 200 ms
    else:
        conf = tmp_path / "broker.conf"
        conf.write_text("busyPollMicros=200000\n")
        server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    server.start()
    try:
        time.sleep(1.0)  # start-up's own requests (registration) are past
        assert _broker_cpu_after_a_request(server, "BusyPollA") >= 0.1
        time.sleep(0.5)
        # Idle again: the window of the last request has passed (a registration is every 30 s).
        assert server.process is not None
        before = _cpu_seconds(server.process.proc.pid)
        time.sleep(0.5)
        assert _cpu_seconds(server.process.proc.pid) - before < 0.1

        async def send_and_read() -> list[bytes]:
            async with Producer("PID_busy", server.namesrv) as producer:
                sent = [await producer.send(Message("BusyPollA", b"m%d" % i)) for i in range(20)]
            async with LitePullConsumer("GID_busy", server.namesrv) as consumer:
                queue = sent[0].queue
                return [m.body async for batch in consumer.read(queue, 0, 20) for m in batch]

        assert asyncio.run(send_and_read()) == [b"m%d" % i for i in range(20)]
    finally:
        assert server.stop() == 0


def test_a_broker_without_a_window_sleeps_after_a_request(tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "data")
    server.start()
    try:
        time.sleep(1.0)
        assert _broker_cpu_after_a_request(server, "BusyPollB") < 0.1
    finally:
        server.stop()


def test_a_negative_window_is_refused_in_one_line(tmp_path: Path) -> None:
    result = cometmq("standalone", "--data-dir", str(tmp_path / "data"), "--busy-poll-us", "-5")
    assert result.returncode != 0
    assert "busyPollMicros -5 is negative" in result.stderr and "Traceback" not in result.stderr
    args = build_parser().parse_args(["broker", "--data-dir", str(tmp_path), "--busy-poll-us", "-1"])
    with pytest.raises(ConfigError, match="busyPollMicros -1 is negative"):
        _broker_config(args)


async def _loop_cpu_while_waiting(seconds: float) -> float:
    started = time.thread_time()
    await asyncio.sleep(seconds)
    return time.thread_time() - started


@pytest.mark.parametrize("window_us", [100_000, 0])
def test_clients_given_a_window_poll_after_their_requests(server: StandaloneServer, window_us: int) -> None:
    async def main() -> tuple[float, float]:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("BusyPollC", 1)
        async with Producer("PID_busy_c", server.namesrv, busy_poll_us=window_us) as producer:
            result = await producer.send(Message("BusyPollC", b"x"))
            after_send = await _loop_cpu_while_waiting(0.15)
        async with LitePullConsumer("GID_busy_c", server.namesrv, busy_poll_us=window_us) as consumer:
            got = [
                m
                async for batch in consumer.read(result.queue, result.queue_offset, result.queue_offset + 1)
                for m in batch
            ]
            assert [m.body for m in got] == [b"x"]
            after_pull = await _loop_cpu_while_waiting(0.15)
        return after_send, after_pull

    after_send, after_pull = asyncio.run(main())
    if window_us:
        assert after_send > 0.04 and after_pull > 0.04, (after_send, after_pull)
    else:
        assert after_send < 0.02 and after_pull < 0.02, (after_send, after_pull)


@pytest.mark.parametrize("client", [Producer, PushConsumer, LitePullConsumer])
def test_a_client_refuses_a_negative_window_when_made(client: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match="busy-poll window must be 0 µs or more"):
        client("GID_busy_bad", "127.0.0.1:9876", busy_poll_us=-1)
