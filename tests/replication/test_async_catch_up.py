"""ASYNC_MASTER: a slave killed mid-stream catches up after its restart, and its commit log is the
master's byte for byte over the slave's range (blank fillers at segment ends included)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _pair import (
    SEGMENT_SIZE,
    BrokerNode,
    create_topic,
    create_topic_on_both,
    ha_status,
    make_message,
    replicated,
    send,
    start_namesrv,
)

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "AsyncCatchUp"
QUEUES = 2


def assert_same_bytes(master_dir: Path, slave_dir: Path, end: int) -> int:
    """The slave's commit-log files equal the master's same-named ones below *end*; the slave's first
    offset."""
    slave_files = sorted((slave_dir / "commitlog").iterdir())
    assert slave_files
    for path in slave_files:
        start = int(path.name)
        length = min(SEGMENT_SIZE, end - start)
        if length <= 0:
            continue
        with path.open("rb") as mine, (master_dir / "commitlog" / path.name).open("rb") as theirs:
            assert mine.read(length) == theirs.read(length), f"segment {path.name} differs"
    return int(slave_files[0].name)


def test_a_killed_slave_catches_up_byte_for_byte(tmp_path: Path) -> None:
    namesrv, namesrv_addr = start_namesrv(tmp_path)
    master = BrokerNode(tmp_path, "master", namesrv_addr, brokerRole="ASYNC_MASTER")
    slave = BrokerNode(tmp_path, "slave", namesrv_addr, brokerRole="SLAVE", brokerId=1)
    seq = 0

    async def send_some(client: RemotingClient, count: int) -> None:
        nonlocal seq
        for _ in range(count):
            response, _ = await send(client, master.addr, TOPIC, seq % QUEUES, *make_message(3, seq))
            assert response.code == ResponseCode.SUCCESS, response.remark
            seq += 1

    async def slave_end(client: RemotingClient) -> int:
        return (await ha_status(client, slave.addr)).ha_client_runtime_info.max_offset

    async def scenario() -> None:
        client = RemotingClient()
        try:
            await asyncio.to_thread(master.start)
            assert (await create_topic(client, master.addr, TOPIC, QUEUES)).code == ResponseCode.SUCCESS
            await send_some(client, 1200)  # about 2.5 segments before the slave exists
            slave.settings["haMasterAddress"] = master.ha_addr
            await asyncio.to_thread(slave.start)
            await create_topic_on_both(client, master.addr, slave.addr, TOPIC, QUEUES)
            await wait_until(lambda: replicated(client, master), message="the slave to catch up")

            # Kill the slave while the master streams to it.
            before = await slave_end(client)
            sending = asyncio.ensure_future(send_some(client, 800))

            async def streaming() -> bool:
                return await slave_end(client) > before

            await wait_until(streaming, message="the slave to receive part of the stream")
            await asyncio.to_thread(slave.kill9)
            await sending
            await asyncio.to_thread(slave.start)
            await send_some(client, 200)
            await wait_until(lambda: replicated(client, master), message="the restarted slave to catch up")
            end = (await ha_status(client, master.addr)).master_commit_log_max_offset
            first = assert_same_bytes(master.data_dir, slave.data_dir, end)
            # An empty slave starts at the master's last segment, not at its first.
            assert first >= 2 * SEGMENT_SIZE
            assert "caught up" in master.log()
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        slave.stop()
        master.stop()
        namesrv.terminate()
