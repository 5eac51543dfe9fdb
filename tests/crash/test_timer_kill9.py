"""kill -9 of a real broker process with timer messages parked: after a restart on the same data
directory each is delivered to its real queue once, not before its time, and one delivered before the
kill (its progress on disk) is not delivered again."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
from crash_support import CrashableServer, broker_conf, create_topic, read_queue, send

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from waiting import wait_until_blocking

pytestmark = pytest.mark.timeout(240)

TOPIC = "TimerCrash"
LATE = 5


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def settled_on_disk(data_dir: Path) -> bytes:
    """The settled bitmap timerProgress.json holds (b"" before the first write)."""
    path = data_dir / "config" / "timerProgress.json"
    if not path.exists():
        return b""
    return base64.b64decode(json.loads(path.read_text())["settled"])


def bodies(server: CrashableServer) -> list[bytes]:
    async def read() -> list[bytes]:
        client = RemotingClient()
        try:
            return [r.body for r in await read_queue(client, server.broker, TOPIC, 0)]
        finally:
            await client.close()

    return asyncio.run(read())


def test_parked_timer_messages_are_delivered_once_after_a_kill9(tmp_path: Path) -> None:
    server = CrashableServer(tmp_path / "data", broker_conf(tmp_path / "broker.conf"))
    server.start()
    try:

        async def send_all() -> int:
            client = RemotingClient()
            try:
                assert (await create_topic(client, server.broker, TOPIC, 1)).code == 0
                response, _ = await send(client, server.broker, TOPIC, 0, b"early", {"TIMER_DELAY_MS": "100"})
                assert response.code == ResponseCode.SUCCESS, response.remark
                await asyncio.to_thread(
                    wait_until_blocking,
                    lambda: settled_on_disk(server.data_dir)[:1] == b"\x01",
                    message="the early message's delivery written down",
                )
                due = now_ms() + 5000
                for i in range(LATE):
                    response, _ = await send(
                        client, server.broker, TOPIC, 0, b"late-%d" % i, {"TIMER_DELIVER_MS": str(due)}
                    )
                    assert response.code == ResponseCode.SUCCESS, response.remark
                return due
            finally:
                await client.close()

        due = asyncio.run(send_all())
        before_kill = bodies(server)
        server.kill9()
        if now_ms() >= due:  # a loaded machine took longer than the delay: nothing would be tested
            pytest.skip("the kill came after the delivery time")
        assert before_kill == [b"early"]
        server.start()
        delivered = wait_until_blocking(
            lambda: (found := bodies(server)) and len(found) >= 1 + LATE and found,
            message="the parked messages delivered after the restart",
        )
        assert sorted(delivered) == [b"early"] + [b"late-%d" % i for i in range(LATE)]
        # Once the progress settles every unit, nothing more can come.
        wait_until_blocking(
            lambda: settled_on_disk(server.data_dir)[:1] == b"\x3f", message="every unit settled on disk"
        )
        assert len(bodies(server)) == 1 + LATE

        async def store_times() -> list[int]:
            client = RemotingClient()
            try:
                return [r.store_timestamp for r in await read_queue(client, server.broker, TOPIC, 0)]
            finally:
                await client.close()

        assert all(stored >= due for stored in asyncio.run(store_times())[1:])
    finally:
        server.stop()
