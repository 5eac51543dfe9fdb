"""Bodies and headers built to cost a NameServer memory or stack: refused, and the server serves on."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Callable
from typing import Any

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.remoting import RemotingClient

from .broker_sim import addr_of, register

Run = Callable[..., Any]


def _register_request(body: bytes, *, compressed: bool) -> RemotingCommand:
    header = RegisterBrokerRequestHeader(
        broker_name="broker-z",
        broker_addr="127.0.0.1:10921",
        cluster_name="DefaultCluster",
        ha_server_addr="127.0.0.1:10922",
        broker_id=0,
        compressed=compressed,
    )
    return RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)


def test_a_compressed_register_body_inflating_past_the_frame_limit_is_refused(
    run: Run, namesrv: NameServer, client: RemotingClient
) -> None:
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in 64 KiB

    async def scenario() -> None:
        reply = await client.invoke(addr_of(namesrv), _register_request(bomb, compressed=True), timeout=10)
        assert reply.code == ResponseCode.SYSTEM_ERROR
        assert "inflates to more than 16777216 bytes" in (reply.remark or "")
        assert (await register(client, addr_of(namesrv), compressed=True)).code == ResponseCode.SUCCESS

    run(scenario())


def test_a_register_body_nested_too_deeply_is_refused_with_a_remark(
    run: Run, namesrv: NameServer, client: RemotingClient
) -> None:
    nested = b'{"filterServerList":' + b"[" * 50_000 + b"]" * 50_000 + b"}"

    async def scenario() -> None:
        reply = await client.invoke(addr_of(namesrv), _register_request(nested, compressed=False))
        assert reply.code == ResponseCode.SYSTEM_ERROR
        assert "nested deeper than 64 levels" in (reply.remark or "")
        assert (await register(client, addr_of(namesrv))).code == ResponseCode.SUCCESS

    run(scenario())


def test_a_header_nested_too_deeply_closes_only_its_connection(
    run: Run, namesrv: NameServer, client: RemotingClient
) -> None:
    header = b'{"code":105,"opaque":1,"extFields":{"topic":' + b"[" * 900 + b"]" * 900 + b"}}"
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header

    async def scenario() -> None:
        assert (await register(client, addr_of(namesrv))).code == ResponseCode.SUCCESS
        reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
        writer.write(frame)
        assert await reader.read() == b""  # closed by the server, unanswered
        writer.close()
        ping = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
        assert (await client.invoke(addr_of(namesrv), ping)).code == ResponseCode.SUCCESS

    run(scenario())
