"""A proxy in the test's own event loop, in front of a standalone: what it does with connections and
clients whatever the clients do (or stop doing)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from proxy_support import client_metadata, consumer_settings, new_client_id, producer_settings

from cometmq.client import blocking
from cometmq.protocol import RequestCode
from cometmq.proxy import ProxyConfig, ProxyServer, _metadata, service_pb2_grpc
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from processes import start_standalone
from waiting import wait_until


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = tmp_path_factory.mktemp("connections")
    conf = directory / "broker.conf"
    conf.write_text("autoCreateSubscriptionGroup=false\n")  # a group is on a broker once created
    process, address = start_standalone(directory / "data", conf)
    try:
        yield address
    finally:
        process.terminate()


def test_client_whose_stream_closed_is_forgotten_without_any_heartbeat(namesrv: str) -> None:
    asyncio.run(_forgotten_while_nobody_calls(namesrv))


async def _forgotten_while_nobody_calls(namesrv: str) -> None:
    server = ProxyServer(ProxyConfig(namesrv, port=0, client_idle_s=0.2))
    await server.start()
    try:
        client_id = new_client_id()
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
            settings = iter([producer_settings("proxy-idle-topic")])
            stream = stub.Telemetry(settings, metadata=client_metadata(client_id))
            assert [answer.status.code async for answer in stream] == [v2.OK]
            clients = server._context.clients  # nobody calls: no call may be what makes the proxy look
            await wait_until(lambda: clients.known(client_id) is None, message="the idle client forgotten")
            metadata = client_metadata(client_id)
            gone = await stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=metadata)
            assert gone.status.code == v2.UNRECOGNIZED_CLIENT_TYPE
    finally:
        await server.stop()


def test_calls_of_one_connection_beyond_its_stream_limit_wait(namesrv: str) -> None:
    asyncio.run(_calls_wait_for_a_free_stream(namesrv))


async def _calls_wait_for_a_free_stream(namesrv: str) -> None:
    server = ProxyServer(ProxyConfig(namesrv, port=0, max_concurrent_streams=2))
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
            streams = [stub.Telemetry(metadata=client_metadata(new_client_id())) for _ in range(2)]
            for stream in streams:  # both streams open: settings sent and answered
                await stream.write(producer_settings("proxy-streams-topic"))
                assert (await stream.read()).status.code == v2.OK
            # A third call gets no stream until one of those ends: its deadline passes unanswered.
            metadata = client_metadata(new_client_id())
            with pytest.raises(grpc.aio.AioRpcError) as waited:
                await stub.Heartbeat(pb.HeartbeatRequest(), metadata=metadata, timeout=0.5)
            assert waited.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            await streams[0].done_writing()
            assert await streams[0].read() is grpc.aio.EOF
            answered = await stub.Heartbeat(pb.HeartbeatRequest(), metadata=metadata)
            assert answered.status.code == v2.UNRECOGNIZED_CLIENT_TYPE
    finally:
        await server.stop()


def test_group_on_no_broker_is_looked_for_once_per_expiry(
    namesrv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_metadata, "METADATA_TTL_S", 3600.0)  # one expiry for the whole test
    with blocking.AdminClient(namesrv) as admin:
        topic = f"proxy-metadata-topic-{new_client_id()}"
        admin.create_topic(topic, 1)
    asyncio.run(_group_tables_fetched(namesrv, topic))


async def _group_tables_fetched(namesrv: str, topic: str) -> None:
    server = ProxyServer(ProxyConfig(namesrv, port=0))
    fetches: list[str] = []
    invoke_ok = server._brokers.invoke_ok

    async def counting(addr: str, code: int, *args: Any, **kwargs: Any) -> Any:
        if code == RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
            fetches.append(addr)
        return await invoke_ok(addr, code, *args, **kwargs)

    server._brokers.invoke_ok = counting  # type: ignore[method-assign]
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
            for _ in range(4):  # a group no broker has
                settings = iter([consumer_settings("proxy-uncreated-group", topic)])
                stream = stub.Telemetry(settings, metadata=client_metadata(new_client_id()))
                assert [answer.status.code async for answer in stream] == [v2.OK]
        # The table as first read, and once more to see whether the group had been created since.
        assert len(fetches) == 2, fetches
    finally:
        await server.stop()
