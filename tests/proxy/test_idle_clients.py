"""A client gone without NotifyClientTermination (killed) is forgotten once idle, heartbeats or not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from proxy_support import client_metadata, new_client_id, producer_settings

from cometmq.proxy import ProxyConfig, ProxyServer, service_pb2_grpc
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from processes import start_standalone
from waiting import wait_until


def test_client_whose_stream_closed_is_forgotten_without_any_heartbeat(tmp_path: Path) -> None:
    process, namesrv = start_standalone(tmp_path / "data")
    try:
        asyncio.run(_forgotten_while_nobody_calls(namesrv))
    finally:
        process.terminate()


async def _forgotten_while_nobody_calls(namesrv: str) -> None:
    server = ProxyServer(ProxyConfig(namesrv, port=0, client_idle_s=0.2))
    await server.start()
    try:
        client_id = new_client_id()
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
            stream = stub.Telemetry(
                iter([producer_settings("proxy-idle-topic")]), metadata=client_metadata(client_id)
            )
            assert [answer.status.code async for answer in stream] == [v2.OK]
            clients = server._context.clients  # nobody calls: no call may be what makes the proxy look
            await wait_until(lambda: clients.session(client_id) is None, message="the idle client forgotten")
            metadata = client_metadata(client_id)
            gone = await stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=metadata)
            assert gone.status.code == v2.UNRECOGNIZED_CLIENT_TYPE
    finally:
        await server.stop()
