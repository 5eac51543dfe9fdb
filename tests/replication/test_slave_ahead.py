"""A slave whose commit log is longer than its master's stops replicating with one clear error; the
master keeps serving, and so does the slave (reads)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _pair import BrokerNode, create_topic, ha_status, make_message, read_queue, send, start_namesrv

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "SlaveAhead"


async def fill(client: RemotingClient, broker: BrokerNode, count: int) -> None:
    assert (await create_topic(client, broker.addr, TOPIC, 1)).code == ResponseCode.SUCCESS
    for seq in range(count):
        response, _ = await send(client, broker.addr, TOPIC, 0, *make_message(2, seq))
        assert response.code == ResponseCode.SUCCESS, response.remark


def test_a_slave_longer_than_its_master_stops_with_one_error(tmp_path: Path) -> None:
    namesrv, namesrv_addr = start_namesrv(tmp_path)
    # The slave's data directory first serves as a master of its own and takes 20 messages.
    longer = BrokerNode(tmp_path, "slave", namesrv_addr, brokerName="broker-b")
    master = BrokerNode(tmp_path, "master", namesrv_addr)

    async def scenario() -> None:
        client = RemotingClient()
        try:
            await asyncio.to_thread(longer.start)
            await fill(client, longer, 20)
            await asyncio.to_thread(longer.stop)
            await asyncio.to_thread(master.start)
            await fill(client, master, 5)

            slave = longer
            slave.settings.update(
                brokerName="broker-a", brokerRole="SLAVE", brokerId=1, haMasterAddress=master.ha_addr
            )
            await asyncio.to_thread(slave.start)

            async def stopped() -> bool:
                info = await ha_status(client, slave.addr)
                return "replication stops" in slave.log() and not info.ha_client_runtime_info.is_activated

            await wait_until(stopped, message="the slave to stop replicating")
            errors = [line for line in slave.log().splitlines() if "ERROR" in line]
            assert len(errors) == 1, errors
            master_end = (await ha_status(client, master.addr)).master_commit_log_max_offset
            slave_end = (await ha_status(client, slave.addr)).ha_client_runtime_info.max_offset
            assert slave_end > master_end
            assert f"ends at offset {slave_end}" in errors[0]
            assert f"end at {master_end}" in errors[0]

            # Both keep serving: the master takes sends, the slave answers reads of its own log.
            response, _ = await send(client, master.addr, TOPIC, 0, *make_message(2, 99))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert len(await read_queue(client, slave.addr, TOPIC, 0)) == 20
            assert master.process is not None and master.process.proc.poll() is None
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        longer.stop()
        master.stop()
        namesrv.terminate()
