"""Fixtures: real NameServers on free ports, and clients that speak to them like brokers do."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from cometmq.namesrv import NameServer
from cometmq.remoting import RemotingClient

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@pytest.fixture
def run(loop: asyncio.AbstractEventLoop) -> Run[Any]:
    def run(coro: Coroutine[Any, Any, T]) -> T:
        return loop.run_until_complete(asyncio.wait_for(coro, 20))

    return run


@pytest.fixture
def start_namesrv(run: Run[Any]) -> Iterator[Callable[..., NameServer]]:
    """Start NameServers on free ports (keyword arguments go to the constructor); all stop at teardown."""
    started: list[NameServer] = []

    def start(**kwargs: Any) -> NameServer:
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("port", 0)
        server = NameServer(**kwargs)
        run(server.start())
        started.append(server)
        return server

    yield start
    for server in started:
        run(server.stop())


@pytest.fixture
def namesrv(start_namesrv: Callable[..., NameServer]) -> NameServer:
    return start_namesrv()


@pytest.fixture
def make_client(run: Run[Any]) -> Iterator[Callable[[], RemotingClient]]:
    """RemotingClients (one per simulated broker, so each has its own connection), closed at teardown."""
    clients: list[RemotingClient] = []

    def make() -> RemotingClient:
        client = RemotingClient()
        clients.append(client)
        return client

    yield make
    for client in clients:
        run(client.close())


@pytest.fixture
def client(make_client: Callable[[], RemotingClient]) -> RemotingClient:
    return make_client()
