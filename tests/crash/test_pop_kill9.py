"""kill -9 of a broker with popped messages in flight, then a restart on the same data directory:
nothing popped but unacked is lost or stuck, nothing acked comes back, never-popped messages are
popped once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from crash_support import CrashableServer, broker_conf, create_topic, send

from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.record import DecodedRecord, decode_records
from cometmq.remoting import RemotingClient

from _pop_support import ack_request, change_request, pop_request  # isort: skip (tests/broker, on the path)

pytestmark = pytest.mark.timeout(240)

TOPIC = "PopCrash"


async def _pop(client: RemotingClient, broker: str, **kwargs: object) -> list[DecodedRecord]:
    response = await client.invoke(broker, pop_request(TOPIC, **kwargs), timeout=60)  # type: ignore[arg-type]
    assert response.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), response.remark
    return decode_records(response.body) if response.code == ResponseCode.SUCCESS else []


async def _ok(client: RemotingClient, broker: str, request: RemotingCommand) -> None:
    response = await client.invoke(broker, request, timeout=30)
    assert response.code == ResponseCode.SUCCESS, response.remark


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_messages_in_flight_survive_kill9(tmp_path: Path, flush: str) -> None:
    server = CrashableServer(tmp_path / "data", broker_conf(tmp_path / "broker.conf", flushDiskType=flush))
    server.start()
    try:
        in_flight: list[DecodedRecord] = []

        async def before() -> None:
            client = RemotingClient()
            try:
                assert (await create_topic(client, server.broker, TOPIC, 2)).code == 0
                for n in range(10):
                    sent, _ = await send(client, server.broker, TOPIC, n % 2, b"m%d" % n, {})
                    assert sent.code == ResponseCode.SUCCESS
                popped = await _pop(client, server.broker, max_nums=6, invisible_ms=600_000)
                assert len(popped) == 6
                for record in popped[::2]:
                    await _ok(client, server.broker, ack_request(record))
                in_flight.extend(popped[1::2])
            finally:
                await client.close()

        asyncio.run(before())
        server.kill9()
        server.start()

        async def after() -> None:
            client = RemotingClient()
            try:
                # The never-popped messages, once; the three in flight stay invisible.
                rest = await _pop(client, server.broker, invisible_ms=600_000)
                seen = {r.body for r in rest}
                assert seen.isdisjoint(r.body for r in in_flight)
                assert len(rest) == 4
                assert await _pop(client, server.broker) == []
                # The in-flight ones are still held under their handles: made visible, they come back.
                for record in in_flight:
                    await _ok(client, server.broker, change_request(record, 0))
                back: list[DecodedRecord] = []
                while len(back) < len(in_flight):
                    back += await _pop(client, server.broker, poll_ms=20_000)
                assert sorted(r.body for r in back) == sorted(r.body for r in in_flight)
                assert all(r.reconsume_times == 1 for r in back)
                for record in [*rest, *back]:
                    await _ok(client, server.broker, ack_request(record))
                # Everything settled: nothing comes back, acked or not.
                assert await _pop(client, server.broker) == []
            finally:
                await client.close()

        asyncio.run(after())
    finally:
        server.stop()


def test_an_order_pop_in_flight_survives_kill9_and_keeps_its_queue_in_order(tmp_path: Path) -> None:
    server = CrashableServer(tmp_path / "data", broker_conf(tmp_path / "broker.conf"))
    server.start()
    try:
        first: list[DecodedRecord] = []

        async def before() -> None:
            client = RemotingClient()
            try:
                assert (await create_topic(client, server.broker, TOPIC, 1)).code == 0
                for n in range(3):
                    sent, _ = await send(client, server.broker, TOPIC, 0, b"m%d" % n, {})
                    assert sent.code == ResponseCode.SUCCESS
                first.extend(await _pop(client, server.broker, max_nums=2, order=True, invisible_ms=600_000))
                assert [r.body for r in first] == [b"m0", b"m1"]
            finally:
                await client.close()

        asyncio.run(before())
        server.kill9()
        server.start()

        async def after() -> None:
            client = RemotingClient()
            try:
                assert await _pop(client, server.broker, order=True) == []  # still blocked
                for record in first:
                    await _ok(client, server.broker, change_request(record, 0))
                again: list[DecodedRecord] = []
                while not again:
                    again = await _pop(client, server.broker, order=True, poll_ms=20_000)
                assert [(r.body, r.reconsume_times) for r in again] == [(b"m0", 1), (b"m1", 1), (b"m2", 0)]
            finally:
                await client.close()

        asyncio.run(after())
    finally:
        server.stop()
