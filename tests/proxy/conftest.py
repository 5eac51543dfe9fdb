"""A standalone server with its RocketMQ 5 proxy, and gRPC stubs to it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from cometmq.proxy import service_pb2_grpc
from processes import ServerProcess, proxy_address, proxy_args, start_standalone


@dataclass
class ProxiedStandalone:
    process: ServerProcess
    namesrv: str
    proxy: str


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedStandalone]:
    """One standalone serving its proxy for a whole module; every test uses its own topics and groups."""
    process, namesrv = start_standalone(tmp_path_factory.mktemp("proxied") / "data", None, *proxy_args())
    try:
        yield ProxiedStandalone(process, namesrv, proxy_address(process))
    finally:
        process.terminate()


@pytest.fixture
def stub(proxied: ProxiedStandalone) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    """A blocking MessagingService stub on a channel of its own to the module's proxy."""
    with grpc.insecure_channel(proxied.proxy) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)
