"""Busy polling, end to end: a broker started with ``--busy-poll-us`` (or ``busyPollMicros`` in its
broker.conf) and clients made with ``busy_poll_us`` keep their loops polling after a request, and only
then; everything they serve or send is answered as without. Seen in CPU time, with wide margins; how
much latency it saves is for ``cometmq bench latency``, not for tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cometmq.cli._main import build_parser
from cometmq.cli._servers import _broker_config
from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, PushConsumer
from cometmq.errors import ConfigError
from processes import StandaloneServer, cometmq, cpu_seconds, loop_cpu_while_waiting


def _broker_cpu_after_a_request(server: StandaloneServer, topic: str) -> float:
    """CPU the server process spends in the 0.5 s after it answered one request."""
    assert server.process is not None
    pid = server.process.proc.pid

    async def request() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic(topic, 1)

    asyncio.run(request())
    before = cpu_seconds(pid)
    time.sleep(0.5)
    return cpu_seconds(pid) - before


@pytest.mark.parametrize("how", ["flag", "broker.conf"])
def test_a_broker_given_a_window_polls_after_each_request_and_only_then(tmp_path: Path, how: str) -> None:
    if how == "flag":
        server = StandaloneServer(tmp_path / "data", "--busy-poll-us", "1000000")  # 1 s
    else:
        conf = tmp_path / "broker.conf"
        conf.write_text("busyPollMicros=1000000\n")
        server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    server.start()
    try:
        time.sleep(1.5)  # start-up's own requests (registration) are past
        assert _broker_cpu_after_a_request(server, "BusyPollA") >= 0.15
        time.sleep(1.2)
        # Idle again: the window of the last request has passed (a registration is every 30 s).
        assert server.process is not None
        before = cpu_seconds(server.process.proc.pid)
        time.sleep(0.5)
        assert cpu_seconds(server.process.proc.pid) - before < 0.1

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
        time.sleep(1.5)
        assert _broker_cpu_after_a_request(server, "BusyPollB") < 0.1
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("command", ["standalone", "broker"])
def test_the_flag_overrides_broker_conf_and_the_file_alone_applies(tmp_path: Path, command: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("busyPollMicros=300\n")
    base = [command, "--data-dir", str(tmp_path), "-c", str(conf)]
    assert _broker_config(build_parser().parse_args(base)).busy_poll_micros == 300
    flagged = build_parser().parse_args([*base, "--busy-poll-us", "0"])
    assert _broker_config(flagged).busy_poll_micros == 0


def test_a_negative_window_is_refused_in_one_line(tmp_path: Path) -> None:
    result = cometmq("standalone", "--data-dir", str(tmp_path / "data"), "--busy-poll-us", "-5")
    assert result.returncode != 0
    assert "busyPollMicros -5 is negative" in result.stderr and "Traceback" not in result.stderr
    args = build_parser().parse_args(["broker", "--data-dir", str(tmp_path), "--busy-poll-us", "-1"])
    with pytest.raises(ConfigError, match="busyPollMicros -1 is negative"):
        _broker_config(args)


@pytest.mark.parametrize("window_us", [200_000, 0])
def test_clients_given_a_window_poll_after_their_requests(server: StandaloneServer, window_us: int) -> None:
    async def main() -> tuple[float, float, float]:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("BusyPollC", 1)
        async with Producer("PID_busy_c", server.namesrv, busy_poll_us=window_us) as producer:
            result = await producer.send(Message("BusyPollC", b"x"))
            after_send = await loop_cpu_while_waiting(0.25)
        async with LitePullConsumer("GID_busy_c", server.namesrv, busy_poll_us=window_us) as consumer:
            got = [
                m
                async for batch in consumer.read(result.queue, result.queue_offset, result.queue_offset + 1)
                for m in batch
            ]
            assert [m.body for m in got] == [b"x"]
            after_pull = await loop_cpu_while_waiting(0.25)
        push = PushConsumer("GID_busy_push", server.namesrv, busy_poll_us=window_us)
        push.subscribe("BusyPollC")
        async with push:  # started: heartbeats, the rebalance and its first pulls
            after_start = await loop_cpu_while_waiting(0.25)
        return after_send, after_pull, after_start

    figures = asyncio.run(main())
    if window_us:
        assert min(figures) > 0.06, figures
    else:
        assert max(figures) < 0.02, figures


@pytest.mark.parametrize("client", [Producer, PushConsumer, LitePullConsumer])
def test_a_client_refuses_a_negative_window_when_made(client: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match="busy_poll_us must be at least 0, not -1"):
        client("GID_busy_bad", "127.0.0.1:9876", busy_poll_us=-1)
