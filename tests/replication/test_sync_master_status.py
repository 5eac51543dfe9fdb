"""A SYNC_MASTER answers SLAVE_NOT_AVAILABLE (11) with no slave and FLUSH_SLAVE_TIMEOUT (12) once
slaveTimeout has passed without its slave (SIGSTOPped) confirming; both replies carry the stored
message's msgId and queue offset, and the master holds both messages. (SUCCESS with a live slave is
what test_master_loss.py checks 20 000 times.)"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from _pair import (
    BrokerNode,
    create_topic,
    create_topic_on_both,
    make_message,
    read_queue,
    replicated,
    send,
    start_namesrv,
)

from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "SyncMasterStatus"


def assert_stored_reply(response: RemotingCommand, code: int, queue_offset: int) -> None:
    assert response.code == code, (response.code, response.remark)
    fields = response.ext_fields
    assert fields["queueId"] == "0"
    assert int(fields["queueOffset"]) == queue_offset
    decode_offset_msg_id(fields["msgId"])  # an offset message id, as for SUCCESS


def test_slave_not_available_then_flush_slave_timeout(tmp_path: Path) -> None:
    namesrv, namesrv_addr = start_namesrv(tmp_path)
    master = BrokerNode(tmp_path, "master", namesrv_addr, brokerRole="SYNC_MASTER", slaveTimeout=500)
    slave = BrokerNode(tmp_path, "slave", namesrv_addr, brokerRole="SLAVE", brokerId=1)

    async def scenario() -> None:
        client = RemotingClient()
        try:
            bodies = [make_message(1, seq) for seq in range(2)]
            assert (await create_topic(client, master.addr, TOPIC, 1)).code == ResponseCode.SUCCESS
            response, _ = await send(client, master.addr, TOPIC, 0, *bodies[0])
            assert_stored_reply(response, ResponseCode.SLAVE_NOT_AVAILABLE, 0)

            slave.settings["haMasterAddress"] = master.ha_addr
            await asyncio.to_thread(slave.start)
            await create_topic_on_both(client, master.addr, slave.addr, TOPIC, 1)
            await wait_until(lambda: replicated(client, master), message="the slave to catch up")
            slave.signal(signal.SIGSTOP)
            response, _ = await send(client, master.addr, TOPIC, 0, *bodies[1])
            assert_stored_reply(response, ResponseCode.FLUSH_SLAVE_TIMEOUT, 1)

            # Whatever the answer, the master holds both.
            records = await read_queue(client, master.addr, TOPIC, 0)
            assert [r.body for r in records] == [body for body, _ in bodies]
        finally:
            await client.close()

    try:
        master.start()
        asyncio.run(scenario())
    finally:
        slave.stop()
        master.stop()
        namesrv.terminate()
