"""A live name server, broker and dashboard on free ports, served from an event loop in a thread of
their own: the tests drive a browser and HTTP requests from the main thread."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from cometmq.client import AdminClient, Message, Producer, SendResult
from cometmq.dashboard import Dashboard, start_dashboard
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.remoting import RemotingClient
from traced_messages import send_and_consume_traced

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import name_server, running_broker

# Charts are sampled this often in the tests, so that one receives data soon.
SAMPLE_INTERVAL_S = 0.3

T = TypeVar("T")


class LiveCluster:
    """A name server, a broker and a dashboard running on a loop in another thread. ``run`` runs a
    coroutine there (an AdminClient's call, a producer's send) and returns its result."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),))
        self.namesrv = ""
        self.broker_addr = ""
        self.url = ""
        self.admin: AdminClient
        self.dashboard: Dashboard

    def start(self) -> None:
        self._thread.start()
        self._ready.result(timeout=60)

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)
        self._loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with (
                name_server() as (_, namesrv),
                running_broker(self._data_dir, namesrvAddr=namesrv, brokerName="broker-a") as broker,
            ):
                self.namesrv = namesrv
                self.broker_addr = f"127.0.0.1:{broker.port}"
                self.dashboard = await start_dashboard(
                    namesrv, "127.0.0.1", 0, sample_interval_s=SAMPLE_INTERVAL_S
                )
                self.url = self.dashboard.url
                self.admin = AdminClient(namesrv)
                await self.admin.start()
                self._ready.set_result(None)
                try:
                    await self._stop.wait()
                finally:
                    await self.admin.close()
                    await self.dashboard.stop()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise


async def send_to_dead_letters(cluster: LiveCluster, offset_msg_id: str, group: str) -> None:
    """What a consumer of ``group`` sends for a message it gives up on (delay level -1: straight to
    the group's dead letters)."""
    fields = {"offset": str(decode_offset_msg_id(offset_msg_id)[2]), "group": group, "delayLevel": "-1"}
    client = RemotingClient()
    try:
        request = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=fields)
        response = await client.invoke(cluster.broker_addr, request)
        assert response.code == ResponseCode.SUCCESS, response.remark
    finally:
        await client.close()


def send(cluster: LiveCluster, *messages: Message) -> list[SendResult]:
    """Send *messages* one after the other with a producer of the tests' own group."""

    async def go() -> list[SendResult]:
        async with Producer("PID_dashboard_test", cluster.namesrv) as producer:
            return [await producer.send(msg) for msg in messages]

    return cluster.run(go())


def send_traced(cluster: LiveCluster, message: Message, producer_group: str, consumer_group: str) -> str:
    """Send *message* with a traced producer of ``producer_group`` and consume it with a traced consumer
    of ``consumer_group``; returns its id once its three trace records (Pub, SubBefore, SubAfter) are
    stored."""

    async def go() -> str:
        await cluster.admin.create_topic(message.topic, 1)
        return await send_and_consume_traced(cluster.namesrv, message, producer_group, consumer_group)

    return cluster.run(go())
