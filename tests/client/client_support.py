"""Helpers shared by the tests of cometmq.client (no pytest-asyncio: coroutines run under asyncio.run).

Append-only: several test modules of tests/client use these.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from cometmq.client import LitePullConsumer
from cometmq.client.message import ReceivedMessage
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol import ResponseCode as Code
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from processes import StandaloneServer, broker_address
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import send_request

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """Run one test coroutine on a fresh event loop, failing (not hanging) after ``timeout`` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def send_to_queue(
    server: StandaloneServer, topic: str, queue_id: int, bodies: list[bytes], sys_flag: int = 0
) -> None:
    """Send ``bodies`` to one queue of the server's broker with raw SEND_MESSAGE requests (so a test
    depends on the consumer alone), one after the other: their queue offsets follow this order."""
    assert server.process is not None
    addr = broker_address(server.process)
    client = RemotingClient()
    try:
        for body in bodies:
            request = send_request(topic, body, queue_id, sysFlag=str(sys_flag))
            response = await client.invoke(addr, request, timeout=10)
            assert response.code == 0, response.remark
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------------
# a scripted stand-in broker: response codes a healthy broker does not give on demand


# A script entry that closes the connection instead of answering.
DROP = -1
# A script entry that leaves the send unanswered (the connection stays open).
SILENT = -2
# A script entry that answers SUCCESS with a queueOffset that is not a number.
MALFORMED = -3


class ScriptedBroker:
    """Answers each send with the next code of ``script`` (then SUCCESS), or closes the connection
    for DROP, or leaves it unanswered for SILENT, or answers a malformed header for MALFORMED, and
    registers ``topic``."""

    def __init__(self, name: str, script: list[int]) -> None:
        self.name = name
        self.script = list(script)
        self.sends: list[RemotingCommand] = []
        self.server = RemotingServer(self.handle, "127.0.0.1", 0)
        self.namesrv_client = RemotingClient()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if request.code not in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return request.response()
        self.sends.append(request)
        code = self.script.pop(0) if self.script else Code.SUCCESS
        if code == SILENT:
            return None
        if code == DROP:
            conn.close()
            return None
        fields = {"msgId": "7F0000010000000A0000000000000000", "queueId": request.ext_fields["e"]}
        fields["queueOffset"] = str(len(self.sends) - 1) if code != MALFORMED else "later"
        if code == MALFORMED:
            return request.response(Code.SUCCESS, None, fields)
        if code in (
            Code.SUCCESS,
            Code.FLUSH_DISK_TIMEOUT,
            Code.FLUSH_SLAVE_TIMEOUT,
            Code.SLAVE_NOT_AVAILABLE,
        ):
            return request.response(code, None, fields)
        return request.response(code, f"scripted failure {code}")

    async def start(self, namesrv: str, topic: str) -> None:
        await self.server.start()
        body = RegisterBrokerBody(
            DataVersion(timestamp=1, counter=1), {topic: TopicConfig(topic, 2, 2)}
        ).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=self.name,
            broker_addr=self.addr,
            cluster_name="DefaultCluster",
            ha_server_addr="127.0.0.1:1",
            broker_id=0,
        )
        # The name server forgets a broker whose registering connection closes: keep it open.
        response = await self.namesrv_client.invoke(
            namesrv, RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
        )
        assert response.code == Code.SUCCESS, response.remark

    async def stop(self) -> None:
        await self.namesrv_client.close()
        await self.server.stop()


B = TypeVar("B", bound=ScriptedBroker)


def scripted(script: list[int]) -> AbstractAsyncContextManager[tuple[str, ScriptedBroker]]:
    return serving(ScriptedBroker("broker-s", script))


@asynccontextmanager
async def serving(broker: B) -> AsyncIterator[tuple[str, B]]:
    """A name server, and *broker* (a :class:`ScriptedBroker`) serving topic "Scripted" through it."""
    namesrv = NameServer(host="127.0.0.1", port=0)
    await namesrv.start()
    try:
        await broker.start(f"127.0.0.1:{namesrv.port}", "Scripted")
        yield f"127.0.0.1:{namesrv.port}", broker
    finally:
        await broker.stop()
        await namesrv.stop()


def open_sockets() -> set[str]:
    """The sockets this process has open (``socket:[inode]``), from /proc."""
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            sockets.add(target)
    return sockets


async def poll_until(consumer: LitePullConsumer, count: int) -> list[ReceivedMessage]:
    """Poll until ``count`` messages arrived."""
    got: list[ReceivedMessage] = []

    async def polled() -> bool:
        got.extend(await consumer.poll(timeout=1.0))
        return len(got) >= count

    await wait_until(polled, message=f"{count} messages polled")
    return got


@contextmanager
def standalone_with_conf(tmp_path: Path, conf_text: str) -> Iterator[StandaloneServer]:
    """A standalone server in *tmp_path* whose broker.conf is *conf_text*, started, stopped after."""
    conf = tmp_path / "broker.conf"
    conf.write_text(conf_text)
    server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    server.start()
    try:
        yield server
    finally:
        server.stop()
