"""A slave whose master just changed retries quickly, not after RocketMQ's reconnect interval: the new
master may not have begun its epoch yet (it closes the link on the hello) or bound its HA port."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from _stores import put, replication_config, stores

from cometmq.replication import HAClient, HAServer, _slave
from processes import free_port
from waiting import wait_until


def test_a_link_closed_for_another_epoch_is_tried_again_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_slave, "RECONNECT_INTERVAL_S", 3600.0)

    async def scenario() -> None:
        with stores(tmp_path, "m", "s") as (master, slave):
            master.begin_epoch(1)
            end = put(master, "epoch 1")
            server = HAServer(master, replication_config(1))
            await server.start("127.0.0.1", 0)
            client = HAClient(
                slave,
                replication_config(2),
                lambda: f"127.0.0.1:{server.port}",
                broker_id=2,
                expected_epoch=lambda: 2,
            )
            try:
                with caplog.at_level(logging.INFO, "cometmq.replication"):
                    client.start()
                    await wait_until(lambda: "expects master epoch 2" in caplog.text, message="the refusal")
                master.begin_epoch(2)  # the new master's epoch begins just after its followers said hello
                await wait_until(lambda: slave.replica_end() == end, message="the slave to copy")
            finally:
                await client.stop()
                await server.stop()

    asyncio.run(scenario())


def test_a_master_not_yet_listening_is_tried_again_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_slave, "RECONNECT_INTERVAL_S", 3600.0)

    async def scenario() -> None:
        with stores(tmp_path, "m", "s") as (master, slave):
            master.begin_epoch(1)
            end = put(master, "one")
            port = free_port()  # nobody listens on it, for the moment
            client = HAClient(slave, replication_config(2), lambda: f"127.0.0.1:{port}", broker_id=2)
            server = HAServer(master, replication_config(1))
            try:
                with caplog.at_level(logging.INFO, "cometmq.replication"):
                    client.start()
                    await wait_until(lambda: "connecting again" in caplog.text, message="a failed connect")
                await server.start("127.0.0.1", port)
                await wait_until(lambda: slave.replica_end() == end, message="the slave to copy")
            finally:
                await client.stop()
                await server.stop()

    asyncio.run(scenario())


def test_a_link_the_master_cuts_right_after_the_hello_is_tried_again_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A new master replaces its HA server as it takes over: a follower whose hello the old server had
    answered sees its link cut at once."""
    monkeypatch.setattr(_slave, "RECONNECT_INTERVAL_S", 3600.0)

    async def scenario() -> None:
        with stores(tmp_path, "m", "s") as (master, slave):
            master.begin_epoch(1)
            first = HAServer(master, replication_config(1))
            await first.start("127.0.0.1", 0)
            port = first.port
            client = HAClient(slave, replication_config(2), lambda: f"127.0.0.1:{port}", broker_id=2)
            second = HAServer(master, replication_config(1))
            try:
                with caplog.at_level(logging.INFO, "cometmq.replication"):
                    client.start()
                    await wait_until(lambda: "connected to the master" in caplog.text, message="the link")
                    await first.stop()
                    await second.start("127.0.0.1", port)
                end = put(master, "after the swap")
                await wait_until(lambda: slave.replica_end() == end, message="the slave to copy")
            finally:
                await client.stop()
                await second.stop()

    asyncio.run(scenario())
