"""SYNC_MASTER: every message the master acknowledged survives the loss of the master's machine. A
master, its slave and a name server run as separate processes; CometMQ's producer and the C++ client
send; the master is killed with SIGKILL and its data directory deleted; every acknowledged message is
then read from the slave, by address, intact and in per-queue order."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from _pair import (
    BrokerNode,
    create_topic_on_both,
    expected_body,
    parse_body,
    read_queue,
    replicated,
    run_cpp,
    start_namesrv,
)

from cometmq.client import Message, Producer, SendStatus
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import RemotingClient
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from _cpp_scenarios import make_body

TOPIC = "MasterLoss"
QUEUES = 4
PRODUCERS = 16
COMETMQ_MESSAGES = 18_000
CPP_MESSAGES = 2_000


@pytest.mark.interop
def test_every_acknowledged_message_survives_the_loss_of_the_master(tmp_path: Path) -> None:
    namesrv, namesrv_addr = start_namesrv(tmp_path)
    # A slave stalled by a loaded machine must not turn a send into FLUSH_SLAVE_TIMEOUT: what is checked
    # is that what was acknowledged survives, not how fast.
    master = BrokerNode(tmp_path, "master", namesrv_addr, brokerRole="SYNC_MASTER", slaveTimeout=20_000)
    slave = BrokerNode(tmp_path, "slave", namesrv_addr, brokerRole="SLAVE", brokerId=1)
    # (queue id, queue offset) → body of every CometMQ send answered SEND_OK
    acknowledged: dict[tuple[int, int], bytes] = {}

    async def produce(producer: Producer, number: int) -> None:
        for seq in range(number, COMETMQ_MESSAGES, PRODUCERS):
            result = await producer.send(Message(TOPIC, expected_body(number, seq)))
            assert result.status is SendStatus.SEND_OK, result
            acknowledged[(result.queue.queue_id, result.queue_offset)] = expected_body(number, seq)

    async def prepare() -> None:
        client = RemotingClient()
        try:
            await create_topic_on_both(client, master.addr, slave.addr, TOPIC, QUEUES)
            await wait_until(lambda: replicated(client, master), message="the slave to connect")
        finally:
            await client.close()

    async def send_all() -> None:
        # Bodies go as they are (no compression), so the slave's records can be compared with them.
        async with Producer(
            "MasterLossProducer", namesrv_addr, compress_over=1 << 20, send_timeout=30
        ) as producer:
            await asyncio.gather(*(produce(producer, number) for number in range(PRODUCERS)))

    async def read_slave() -> dict[int, list[DecodedRecord]]:
        client = RemotingClient()
        try:
            return {q: await read_queue(client, slave.addr, TOPIC, q) for q in range(QUEUES)}
        finally:
            await client.close()

    try:
        master.start()
        slave.settings["haMasterAddress"] = master.ha_addr
        slave.start()
        asyncio.run(prepare())
        cpp_sent = run_cpp(
            "produce", namesrv_addr, TOPIC, "--count", str(CPP_MESSAGES), "--body-prefix", "cpp-",
            "--send-timeout-ms", "30000",
        )  # fmt: skip
        asyncio.run(send_all())
        master.kill9()
        shutil.rmtree(master.data_dir)
        queues = asyncio.run(read_slave())
    finally:
        slave.stop()
        master.stop()
        namesrv.terminate()

    # CometMQ's sends: each at the queue offset its reply named, intact.
    assert len(acknowledged) == COMETMQ_MESSAGES
    for (queue_id, queue_offset), body in acknowledged.items():
        record = queues[queue_id][queue_offset]
        assert record.queue_offset == queue_offset
        assert record.body == body
        parse_body(record.body)
    # Per-queue order: each producer's messages in the order it sent them.
    last_seq: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    for queue_id, records in queues.items():
        assert [r.queue_offset for r in records] == list(range(len(records)))
        for record in records:
            if record.body.startswith(b"cpp-"):
                continue
            producer, seq = parse_body(record.body)
            assert seq > last_seq[(queue_id, producer)]
            last_seq[(queue_id, producer)] = seq
    # The C++ client's sends: each SEND_OK found at its queue offset, in the order it sent them.
    sent = cpp_sent["sent"]
    assert [s["status"] for s in sent] == ["OK"] * CPP_MESSAGES  # the C++ SEND_OK
    by_body = {r.body: (queue_id, r.queue_offset) for queue_id, records in queues.items() for r in records}
    positions = [by_body[make_body("cpp-", s["index"], None)] for s in sent]
    assert [offset for _, offset in positions] == [s["offset"] for s in sent]
    for queue_id in range(QUEUES):
        offsets = [offset for q, offset in positions if q == queue_id]
        assert offsets == sorted(offsets)
