"""A Broker holds its data directory from a successful start to its stop, and no longer."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from _support import broker_and_client, pull, run, running_broker, send

from cometmq.errors import StoreInUseError


def test_a_second_broker_on_the_data_dir_of_a_running_one_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await send(client, addr, "LockTopic", b"kept")
            with pytest.raises(StoreInUseError):
                async with running_broker(tmp_path):
                    pass
            _, records = await pull(client, addr, "LockTopic", 0, 0)
            assert [record.body for record in records] == [b"kept"]

    run(scenario())


def test_a_broker_that_cannot_listen_gives_its_data_dir_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(OSError):
                async with running_broker(tmp_path, listenPort=taken.getsockname()[1]):
                    pass
        async with broker_and_client(tmp_path) as (_, addr, client):
            await send(client, addr, "LockTopic", b"stored")

    run(scenario())
