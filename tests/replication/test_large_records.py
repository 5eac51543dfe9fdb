"""A master and its slave in one process over real sockets: records larger than a chunk cross several
chunks and reach the slave whole; a SYNC_MASTER with SYNC_FLUSH answers SUCCESS once both its disk and
its slave have a message; both sides report their link in GET_BROKER_HA_STATUS."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from _pair import ha_status

from cometmq.namesrv import NameServer
from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import address, create_topic, pull, running_broker, send_request

TOPIC = "LargeRecords"


def test_records_larger_than_a_chunk_reach_the_slave_whole(tmp_path: Path) -> None:
    bodies = [bytes([65 + i]) * size for i, size in enumerate((40_000, 100_000, 10, 70_000))]

    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        ns_addr = f"127.0.0.1:{namesrv.port}"
        async with running_broker(
            tmp_path / "master",
            namesrvAddr=ns_addr,
            brokerRole="SYNC_MASTER",
            flushDiskType="SYNC_FLUSH",
            slaveTimeout=10_000,
        ) as master:
            assert master.ha_server is not None
            ha_addr = f"127.0.0.1:{master.ha_server.port}"
            async with running_broker(
                tmp_path / "slave",
                slave_sync_period_s=0.1,
                namesrvAddr=ns_addr,
                brokerRole="SLAVE",
                brokerId=1,
                haMasterAddress=ha_addr,
            ) as slave:
                client = RemotingClient()
                try:
                    response = await create_topic(client, address(master), TOPIC, 1)
                    assert response.code == ResponseCode.SUCCESS
                    # A slave takes its topics from its master (SlaveSynchronize), never from a client.
                    await wait_until(
                        lambda: slave.topics.get(TOPIC) is not None, message="the topic on the slave"
                    )
                    await wait_until(
                        lambda: (
                            master.ha_server is not None
                            and master.ha_server.runtime_info().ha_connection_info
                        ),
                        message="the slave to connect",
                    )
                    for body in bodies:
                        response = await client.invoke(address(master), send_request(TOPIC, body), timeout=30)
                        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
                    end = master.store.replica_end()
                    assert slave.store.replica_end() == end  # SUCCESS means the slave has it

                    _, records = await pull(client, address(slave), TOPIC, 0, 0)
                    assert [r.body for r in records] == bodies

                    master_info = await ha_status(client, address(master))
                    assert master_info.master and master_info.master_commit_log_max_offset == end
                    (link,) = master_info.ha_connection_info
                    assert link.slave_ack_offset == end and link.in_sync and link.diff == 0
                    slave_info = await ha_status(client, address(slave))
                    assert not slave_info.master
                    assert slave_info.ha_client_runtime_info.master_addr == ha_addr
                    assert slave_info.ha_client_runtime_info.is_activated
                    assert slave_info.ha_client_runtime_info.max_offset == end
                finally:
                    await client.close()
        await namesrv.stop()

    asyncio.run(scenario())
