"""The HA handshake between stores: a slave cuts the tail a deposed master wrote and takes the new
master's epoch history; a slave longer than a master that is not newer stops; a master of another
epoch than the slave expects closes the link."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from _stores import put, replicating, replication_config, serving, stores, texts

from cometmq.protocol.ha import HelloAnswerDecoder, encode_hello, encode_report
from cometmq.store import EpochEntry
from waiting import wait_until


def test_a_slave_cuts_the_tail_its_deposed_master_wrote_and_follows_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> tuple[int, int]:
        with stores(tmp_path, "a", "b") as (a, b):
            a.begin_epoch(1)
            shared = put(a, *(f"shared {i}" for i in range(5)))
            async with replicating(a, 1, b, 2):
                await wait_until(lambda: b.replica_end() == shared, message="b to copy a")
                assert b.epochs() == a.epochs() == [EpochEntry(1, 0)]
            # Cut off from its group, a goes on storing; b is elected meanwhile and stores others.
            diverged = put(a, "lost 0" * 50, "lost 1" * 50)
            b.begin_epoch(2)
            put(b, "after 0", "after 1", "after 2")
            assert diverged != b.replica_end()
            async with replicating(b, 2, a, 1, expected_epoch=lambda: 2):
                await wait_until(lambda: texts(a) == texts(b), message="a to follow b")
                await wait_until(lambda: a.replica_end() == b.replica_end(), message="a's end")
            assert texts(a) == [*(f"shared {i}" for i in range(5)), "after 0", "after 1", "after 2"]
            assert a.epochs() == b.epochs() == [EpochEntry(1, 0), EpochEntry(2, shared)]

            return shared, diverged

    shared, diverged = asyncio.run(scenario())
    cut = [m for m in caplog.messages if m.startswith("cut this slave's commit log")]
    assert len(cut) == 1, caplog.messages
    assert f"from offset {diverged} back to {shared} ({diverged - shared} bytes)" in cut[0]
    assert "written in epoch 1, the master is at epoch 2" in cut[0]


def test_a_slave_longer_than_a_master_that_is_not_newer_stops_and_cuts_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        with stores(tmp_path, "a", "b") as (a, b):
            a.begin_epoch(1)
            shared = put(a, "shared")
            async with replicating(a, 1, b, 2):
                await wait_until(lambda: b.replica_end() == shared, message="b to copy a")
            b.begin_epoch(2)
            longer = put(b, "only on b")
            # a is started as a master again by mistake, with its older history.
            async with replicating(a, 1, b, 2) as (_, client):
                await wait_until(
                    lambda: any("longer than the master's" in m for m in caplog.messages),
                    message="the slave's error line",
                )
                assert client.runtime_info().ha_client_runtime_info.is_activated is False
            assert b.replica_end() == longer
            assert texts(b) == ["shared", "only on b"]
            assert b.epochs() == [EpochEntry(1, 0), EpochEntry(2, shared)]

    asyncio.run(scenario())
    assert not any(m.startswith("cut this slave's") for m in caplog.messages)
    errors = [r.levelno for r in caplog.records if "longer than the master's" in r.getMessage()]
    assert errors == [logging.ERROR]


def test_a_master_of_another_epoch_than_expected_closes_the_link(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        with stores(tmp_path, "a", "b") as (a, b):
            a.begin_epoch(1)
            put(a, "only on a")
            async with replicating(a, 1, b, 2, expected_epoch=lambda: 5):
                await wait_until(
                    lambda: any("before answering the hello" in m for m in caplog.messages),
                    message="the slave to see the link closed",
                )
            assert b.replica_end() == 0

    asyncio.run(scenario())
    assert any("expects master epoch 5, this master's is 1: closing its link" in m for m in caplog.messages)


def test_the_master_answers_a_hello_with_its_history_then_streams_from_the_report(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "a") as (a,):
            a.begin_epoch(3)
            end = put(a, "one", "two")
            async with serving(a, replication_config(1)) as server:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                try:
                    writer.write(encode_hello(7, 3))
                    decoder = HelloAnswerDecoder()
                    answer = None
                    while answer is None:
                        data = await asyncio.wait_for(reader.read(1 << 16), 30)
                        assert data, "the master closed the link"
                        answer = decoder.feed(data)
                    assert (answer.epoch, answer.end, answer.entries) == (3, end, ((3, 0),))
                    assert decoder.rest == b""  # no chunk before the slave's report
                    writer.write(encode_report(end))
                    await wait_until(lambda: server.runtime_info().ha_connection_info, message="the link")
                    await wait_until(
                        lambda: server.runtime_info().ha_connection_info[0].slave_ack_offset == end,
                        message="the report",
                    )
                    assert server.runtime_info().epoch == 3
                finally:
                    writer.close()

    asyncio.run(scenario())
