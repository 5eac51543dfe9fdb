"""Busy polling, end to end: a broker (``--busy-poll-us``, ``busyPollMicros``) and clients
(``busy_poll_us``) poll by default for a window that adapts to their traffic, and stop when it stops;
pinned to a fixed window (``--busy-poll-fixed``, ``busyPollAdaptive=false``, ``busy_poll_adaptive=False``)
they keep their loops polling for it after every request, and only then; everything they serve or send
is answered as without. Seen in the calls their loop makes to its selector and in the kicks of their
pollers (tests/busy_polling.py); how much latency it saves is for ``cometmq bench latency`` and
bench/polling.py, not for tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _support import address, create_topic, running_broker, send

from busy_polling import RecordingSelector, record_pollers
from cometmq.cli._main import build_parser
from cometmq.cli._servers import _broker_config
from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, PushConsumer
from cometmq.errors import ConfigError
from cometmq.remoting import RemotingClient
from processes import StandaloneServer, cometmq
from waiting import wait_until


@pytest.mark.parametrize("window_us", [20_000, 0])
def test_a_broker_given_a_fixed_window_polls_after_each_request_and_only_then(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, window_us: int
) -> None:
    pollers = record_pollers(monkeypatch)
    selector = RecordingSelector()

    async def main() -> None:
        async with running_broker(tmp_path, busyPollMicros=window_us, busyPollAdaptive="false") as broker:
            client = RemotingClient()  # no window of its own: the polling seen is the broker's
            try:
                assert not any(p.spinning for p in pollers), "an idle broker keeps no window open"
                asked = time.perf_counter_ns()
                assert (await create_topic(client, address(broker), "BusyPollA", 1)).code == 0
                if not window_us:
                    await asyncio.sleep(0.01)
                    assert pollers == [] and selector.slept_since(asked)
                    return
                (poller,) = pollers
                assert poller.kicks[0] >= asked and poller.opened[0] == window_us * 1000, (
                    "the request opened one"
                )
                await wait_until(poller.spun_to_the_end, message="the end of the request's window")
                await wait_until(lambda: selector.slept_since(poller.last_window_end_ns), message="a sleep")
                kicks = len(poller.kicks)
                assert (await create_topic(client, address(broker), "BusyPollB", 1)).code == 0
                assert any(poller.opened[kicks:]), "the next request opened another"
                await wait_until(poller.spun_to_the_end, message="the end of the next request's window")
            finally:
                await client.close()

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())
    if window_us:
        (poller,) = pollers
        assert set(poller.windows) == {window_us * 1000}
        assert selector.sleeps_inside(poller) == [], "the loop slept inside a window"


def test_an_idle_broker_stops_polling_once_its_window_has_shrunk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pollers = record_pollers(monkeypatch)
    selector = RecordingSelector()

    async def main() -> None:
        async with running_broker(tmp_path) as broker:  # the default settings: adaptive, up to 1000 µs
            client = RemotingClient()  # no window of its own: the polling seen is the broker's
            try:
                (poller,) = pollers
                limit_ns = poller.window.limit_ns
                assert limit_ns == 1_000_000 and poller.window.window_ns == 0, "it starts closed"
                assert not poller.spinning, "an idle broker does not poll"
                # Requests one after the other, each well within the limit of the answer before (a
                # loaded machine may stall one past it: the next ones open the window again).
                sent = 0
                while not poller.window.window_ns and sent < 1000:
                    sent += 1
                    assert (await create_topic(client, address(broker), f"BusyPollBurst{sent}", 1)).code == 0
                assert poller.window.window_ns > 0, "requests coming one after the other opened it"
                await wait_until(lambda: not poller.spinning, message="the window's end")
                await wait_until(lambda: selector.slept_since(poller.last_window_end_ns), message="a sleep")
                quiet = 0
                while poller.window.window_ns:  # requests each longer than the limit after the last
                    quiet += 1
                    before = poller.window.window_ns
                    # A sleep longer than the limit after the last window closed.
                    closed = poller.kicks[-1] + before
                    await wait_until(
                        lambda at=closed: time.perf_counter_ns() > at + limit_ns, message="a gap"
                    )
                    assert (await create_topic(client, address(broker), f"BusyPollQuiet{quiet}", 1)).code == 0
                    assert poller.window.window_ns < before, "a gap longer than the limit shrank it"
                    await wait_until(lambda: not poller.spinning, message="the shrunk window's end")
                kicks = len(poller.kicks)
                await wait_until(
                    lambda: time.perf_counter_ns() > poller.kicks[-1] + 2 * limit_ns, message="a gap"
                )
                asked = time.perf_counter_ns()
                assert (await create_topic(client, address(broker), "BusyPollAfter", 1)).code == 0
                assert len(poller.kicks) > kicks, "the broker read and answered the request"
                assert poller.window.window_ns == 0 and not poller.spinning, "closed: no polling after it"
                await asyncio.sleep(0.01)
                assert selector.slept_since(asked)
                assert selector.sleeps_inside(poller) == [], "no sleep inside the windows it did open"
            finally:
                await client.close()

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())


def test_a_sync_flush_broker_stops_polling_while_its_flush_thread_works_for_a_send(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pollers = record_pollers(monkeypatch)

    async def main() -> None:
        async with running_broker(tmp_path, flushDiskType="SYNC_FLUSH") as broker:
            client = RemotingClient()
            try:
                (poller,) = pollers
                await create_topic(client, address(broker), "BusyPollFlush", 1)
                for i in range(10):
                    await send(client, address(broker), "BusyPollFlush", b"%d" % i)
                    assert not poller.holding, "answered: the flush is done, polling may go on"
                assert poller.holds, "a send waiting for its flush held the broker's polling"
            finally:
                await client.close()

    asyncio.run(main())


@pytest.mark.parametrize("how", ["flag", "broker.conf", "off"])
def test_a_broker_given_a_fixed_window_or_none_answers_as_with_the_adaptive_one(
    tmp_path: Path, how: str
) -> None:
    if how == "flag":
        server = StandaloneServer(tmp_path / "data", "--busy-poll-us", "1000", "--busy-poll-fixed")
    elif how == "broker.conf":
        conf = tmp_path / "broker.conf"
        conf.write_text("busyPollMicros=1000\nbusyPollAdaptive=false\n")
        server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    else:
        server = StandaloneServer(tmp_path / "data", "--busy-poll-us", "0")
    server.start()
    try:

        async def send_and_read() -> list[bytes]:
            async with AdminClient(server.namesrv) as admin:
                await admin.create_topic("BusyPollA", 1)
            async with Producer("PID_busy", server.namesrv) as producer:
                sent = [await producer.send(Message("BusyPollA", b"m%d" % i)) for i in range(20)]
            async with LitePullConsumer("GID_busy", server.namesrv) as consumer:
                queue = sent[0].queue
                return [m.body async for batch in consumer.read(queue, 0, 20) for m in batch]

        assert asyncio.run(send_and_read()) == [b"m%d" % i for i in range(20)]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("command", ["standalone", "broker"])
def test_the_flag_overrides_broker_conf_and_the_file_alone_applies(tmp_path: Path, command: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("busyPollMicros=300\n")
    base = [command, "--data-dir", str(tmp_path), "-c", str(conf)]
    from_file = _broker_config(build_parser().parse_args(base))
    assert (from_file.busy_poll_micros, from_file.busy_poll_adaptive) == (300, True)
    flagged = _broker_config(build_parser().parse_args([*base, "--busy-poll-us", "0"]))
    assert flagged.busy_poll_micros == 0
    fixed = _broker_config(build_parser().parse_args([*base, "--busy-poll-fixed"]))
    assert (fixed.busy_poll_micros, fixed.busy_poll_adaptive) == (300, False)
    conf.write_text("busyPollAdaptive=false\n")
    assert not _broker_config(build_parser().parse_args(base)).busy_poll_adaptive


def test_a_broker_without_settings_polls_adaptively_up_to_1000_us(tmp_path: Path) -> None:
    config = _broker_config(build_parser().parse_args(["standalone", "--data-dir", str(tmp_path)]))
    assert (config.busy_poll_micros, config.busy_poll_adaptive) == (1000, True)


def test_a_negative_window_is_refused_in_one_line(tmp_path: Path) -> None:
    result = cometmq("standalone", "--data-dir", str(tmp_path / "data"), "--busy-poll-us", "-5")
    assert result.returncode != 0
    assert "busyPollMicros -5 is negative" in result.stderr and "Traceback" not in result.stderr
    args = build_parser().parse_args(["broker", "--data-dir", str(tmp_path), "--busy-poll-us", "-1"])
    with pytest.raises(ConfigError, match="busyPollMicros -1 is negative"):
        _broker_config(args)


def test_a_window_over_the_cap_is_refused_in_one_line_naming_the_key_and_the_cap(tmp_path: Path) -> None:
    result = cometmq("standalone", "--data-dir", str(tmp_path / "data"), "--busy-poll-us", "100001")
    assert result.returncode != 0
    assert "busyPollMicros 100001 is over its cap of 100000 µs" in result.stderr
    assert "Traceback" not in result.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text("busyPollMicros=3600000000\n")
    args = build_parser().parse_args(["broker", "--data-dir", str(tmp_path), "-c", str(conf)])
    with pytest.raises(ConfigError, match="busyPollMicros 3600000000 is over its cap of 100000 µs"):
        _broker_config(args)
    conf.write_text("busyPollMicros=100000\n")
    assert _broker_config(build_parser().parse_args(["broker", "--data-dir", str(tmp_path), "-c", str(conf)]))


@pytest.mark.parametrize("window_us", [20_000, 0])
def test_clients_given_a_fixed_window_poll_after_their_requests(
    monkeypatch: pytest.MonkeyPatch, server: StandaloneServer, window_us: int
) -> None:
    pollers = record_pollers(monkeypatch)
    selector = RecordingSelector()

    async def window_after(request: str, asked: int) -> None:
        """The client's own poller (made last) was kicked by *request*, made at *asked*, and kept its
        loop polling."""
        if not window_us:
            assert pollers == [], f"{request}: no window, no poller"
            return
        poller = pollers[-1]
        kicks = zip(poller.kicks, poller.opened, strict=True)
        opened = [(kick, window) for kick, window in kicks if kick >= asked and window]
        assert opened and opened[0][1] == window_us * 1000, f"{request}: a window opened"
        # The end of the request's own window, not of the last one: a client goes on with I/O of its own
        # (heartbeats, the next pull), each kick opening a window after it.
        end = opened[0][0] + opened[0][1]
        await wait_until(lambda: poller.spins and poller.spins[-1] >= end, message=f"the end of {request}'s")
        assert selector.sleeps_inside(poller) == [], f"{request}: the loop slept inside the window"

    async def main() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("BusyPollC", 1)
        async with Producer(
            "PID_busy_c", server.namesrv, busy_poll_us=window_us, busy_poll_adaptive=False
        ) as producer:
            asked = time.perf_counter_ns()
            result = await producer.send(Message("BusyPollC", b"x"))
            await window_after("a send", asked)
        async with LitePullConsumer(
            "GID_busy_c", server.namesrv, busy_poll_us=window_us, busy_poll_adaptive=False
        ) as consumer:
            asked = time.perf_counter_ns()
            got = [
                m
                async for batch in consumer.read(result.queue, result.queue_offset, result.queue_offset + 1)
                for m in batch
            ]
            assert [m.body for m in got] == [b"x"]
            await window_after("a pull", asked)
        push = PushConsumer("GID_busy_push", server.namesrv, busy_poll_us=window_us, busy_poll_adaptive=False)
        push.subscribe("BusyPollC")
        asked = time.perf_counter_ns()
        async with push:  # started: heartbeats, the rebalance and its first pulls
            await window_after("a push consumer's start", asked)
        if not window_us:
            asked = time.perf_counter_ns()
            await asyncio.sleep(0.01)
            assert selector.slept_since(asked)

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())
    assert len(pollers) == (3 if window_us else 0)
    assert all(set(p.windows) == {window_us * 1000} for p in pollers)


@pytest.mark.parametrize("client", [Producer, PushConsumer, LitePullConsumer])
def test_a_client_refuses_a_negative_window_when_made(client: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match=r"busy_poll_us must be within 0\.\.100000, not -1"):
        client("GID_busy_bad", "127.0.0.1:9876", busy_poll_us=-1)


@pytest.mark.parametrize("client", [Producer, PushConsumer, LitePullConsumer])
def test_a_client_refuses_a_window_over_the_cap_when_made(client: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match=r"busy_poll_us must be within 0\.\.100000, not 100001"):
        client("GID_busy_bad", "127.0.0.1:9876", busy_poll_us=100_001)
    client("GID_busy_cap", "127.0.0.1:9876", busy_poll_us=100_000)


def test_clients_poll_adaptively_up_to_200_us_by_default_and_an_idle_one_stops(
    monkeypatch: pytest.MonkeyPatch, server: StandaloneServer
) -> None:
    pollers = record_pollers(monkeypatch)

    async def main() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("BusyPollD", 1)
        assert pollers == [], "an admin client does not poll"
        async with Producer("PID_busy_d", server.namesrv) as producer:
            (poller,) = pollers
            assert poller.window.limit_ns == 200_000 and poller.window.window_ns == 0
            poller.window.window_ns = poller.window.limit_ns  # as replies soon after the window open it
            for i in range(50):
                await producer.send(Message("BusyPollD", b"%d" % i))
            await wait_until(lambda: not poller.spinning, message="the window's end")
            last = poller.kicks.index(poller.reads[-1])
            assert poller.opened[last] == 0, "the last reply left nothing pending and opened no window"
            assert poller.polling_until[last] <= poller.polling_until[last - 1], "nor made one longer"

    asyncio.run(main())
