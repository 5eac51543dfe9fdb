"""Transactions survive kill -9 of the broker process: a half message sent before the kill can be
ended after the restart, one left open is checked again, and under a stream of commits, rollbacks and
check-back answers with the broker killed at random moments every committed message ends up in its
queue exactly once and no rolled-back one does."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path

from _tx_support import (
    COMMIT,
    ROLLBACK,
    UNKNOWN,
    Check,
    Half,
    RawProducer,
    end_request,
    half_request,
    send_half,
)

from cometmq.errors import CometMQError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.naming import TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import decode_offset_msg_id, decode_record_at
from cometmq.protocol.transaction import TRANSACTION_CHECK_GROUP
from cometmq.remoting import RemotingClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crash"))
from crash_support import CrashableServer, broker_conf, create_topic, read_queue

TOPIC = "TxCrash"
# No check-back unless a test asks for it.
NO_CHECKS = {"transactionTimeOut": "600000", "flushIntervalCommitLog": "50"}
FAST_CHECKS = {
    "transactionTimeOut": "200",
    "transactionCheckInterval": "100",
    "transactionCheckMax": "10000",
    "flushIntervalCommitLog": "50",
}


def decision(seq: int) -> int:
    """What the producer decides for its message *seq*: commit, roll back, or answer only a check."""
    return (COMMIT, ROLLBACK, UNKNOWN)[seq % 3]


def seq_of(body: bytes) -> int:
    return int(body.decode().removeprefix("seq-"))


def answer_checks_by_decision(producer: RawProducer) -> asyncio.Task[None]:
    """Answer every check as the decision for its message says (commit for an UNKNOWN one), oneway
    over the connection the check came on, as Java's client does."""

    async def answer() -> None:
        while True:
            check: Check = await producer.checks.get()
            shown = decode_record_at(memoryview(check.body), 0, len(check.body))
            kind = decision(seq_of(shown.body))
            header = check.header
            request = RemotingCommand(
                code=RequestCode.END_TRANSACTION,
                ext_fields={
                    "producerGroup": producer.group,
                    "tranStateTableOffset": str(header.tran_state_table_offset),
                    "commitLogOffset": str(header.commit_log_offset),
                    "commitOrRollback": str(int(COMMIT if kind == UNKNOWN else kind)),
                    "fromTransactionCheck": "true",
                    "msgId": header.msg_id or "",
                },
            )
            check.conn.invoke_oneway(request)

    return asyncio.ensure_future(answer())


async def progress_is(client: RemotingClient, broker: str, first_unsettled: int) -> bool:
    """Whether the broker committed H (its first half offset not known settled) as *first_unsettled*."""
    request = RemotingCommand(
        code=RequestCode.QUERY_CONSUMER_OFFSET,
        ext_fields={"consumerGroup": TRANSACTION_CHECK_GROUP, "topic": TRANS_HALF_TOPIC, "queueId": "0"},
    )
    response = await client.invoke(broker, request, timeout=10)
    return response.code == ResponseCode.SUCCESS and int(response.ext_fields["offset"]) == first_unsettled


async def wait_for_progress(client: RemotingClient, broker: str, first_unsettled: int) -> None:
    """Wait until the broker committed H as *first_unsettled*: every half message below it settled."""
    deadline = time.monotonic() + 120
    while not await progress_is(client, broker, first_unsettled):
        assert time.monotonic() < deadline, f"half messages below {first_unsettled} never all settled"
        await asyncio.sleep(0.05)


def test_a_half_message_outlives_kill_9_and_is_ended_or_checked_after_the_restart(tmp_path: Path) -> None:
    conf = broker_conf(tmp_path / "broker.conf", **NO_CHECKS)
    server = CrashableServer(tmp_path / "data", conf)

    async def before() -> list[Half]:
        client = RemotingClient()
        try:
            assert (await create_topic(client, server.broker, TOPIC, 1)).code == ResponseCode.SUCCESS
            return [await send_half(client, server.broker, TOPIC, f"seq-{i}".encode()) for i in range(2)]
        finally:
            await client.close()

    async def ended_after_the_restart(half: Half) -> None:
        client = RemotingClient()
        try:
            response = await client.invoke(server.broker, end_request(half, COMMIT), timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert [r.body for r in await read_queue(client, server.broker, TOPIC, 0)] == [b"seq-0"]
        finally:
            await client.close()

    async def checked_after_the_restart(half: Half) -> None:
        client = RemotingClient()
        producer = RawProducer()
        try:
            await producer.join(server.broker)
            check = await producer.next_check()
            assert check.header.tran_state_table_offset == half.queue_offset
            answered = await check.conn.invoke(end_request(half, ROLLBACK, from_check=True), 10)
            assert answered.code == ResponseCode.SUCCESS
            await wait_for_progress(client, server.broker, 2)
            assert [r.body for r in await read_queue(client, server.broker, TOPIC, 0)] == [b"seq-0"]
        finally:
            await producer.close()
            await client.close()

    server.start()
    try:
        halves = asyncio.run(before())
        server.kill9()
        server.start()
        asyncio.run(ended_after_the_restart(halves[0]))
        server.kill9()
        broker_conf(conf, **FAST_CHECKS)
        server.start()
        asyncio.run(checked_after_the_restart(halves[1]))
    finally:
        server.stop()


async def _stream(server: CrashableServer, count: int, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = RawProducer()
    answers = answer_checks_by_decision(producer)
    restarted = asyncio.Event()
    restarted.set()
    loop = asyncio.get_running_loop()

    async def killer() -> None:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.05, 0.5))
            restarted.clear()
            await loop.run_in_executor(None, server.kill9)
            await loop.run_in_executor(None, server.start)
            restarted.set()

    async def send_one(client: RemotingClient, seq: int) -> None:
        await restarted.wait()
        broker = server.broker
        try:
            await producer.join(broker)
            response = await client.invoke(broker, half_request(TOPIC, f"seq-{seq}".encode()), timeout=5)
            if response.code != ResponseCode.SUCCESS:
                return
            fields = response.ext_fields
            kind = decision(seq)
            if kind == UNKNOWN:
                return
            end = RemotingCommand(
                code=RequestCode.END_TRANSACTION,
                ext_fields={
                    "producerGroup": producer.group,
                    "tranStateTableOffset": fields["queueOffset"],
                    "commitLogOffset": str(decode_offset_msg_id(fields["msgId"])[2]),
                    "commitOrRollback": str(int(kind)),
                    "fromTransactionCheck": "false",
                    "msgId": fields["msgId"],
                    "topic": TOPIC,
                },
            )
            await client.invoke(broker, end, timeout=5)
        except (CometMQError, OSError, TimeoutError):
            pass  # killed meanwhile: the check-back settles what was stored

    client = RemotingClient()
    kill_task = asyncio.ensure_future(killer())
    try:
        for seq in range(count):
            await send_one(client, seq)
        await kill_task
        await producer.join(server.broker)
        halves = await read_queue(client, server.broker, TRANS_HALF_TOPIC, 0)
        stored = [seq_of(h.body) for h in halves]
        assert len(stored) == len(set(stored))
        await wait_for_progress(client, server.broker, len(halves))
        delivered = [seq_of(r.body) for r in await read_queue(client, server.broker, TOPIC, 0)]
        assert len(delivered) == len(set(delivered)), "a committed message delivered twice"
        assert set(delivered) == {seq for seq in stored if decision(seq) in (COMMIT, UNKNOWN)}
        for record in await read_queue(client, server.broker, TOPIC, 0):
            assert "TRAN_MSG" not in decode_properties(record.properties)
    finally:
        kill_task.cancel()
        answers.cancel()
        await producer.close()
        await client.close()


def run_stream(data_dir: Path, conf: Path, count: int, kills: int, seed: int) -> None:
    """A stream of *count* transactions while the broker is killed *kills* times (bench/ runs it long)."""
    server = CrashableServer(data_dir, broker_conf(conf, **FAST_CHECKS))
    server.start()
    try:

        async def setup() -> None:
            client = RemotingClient()
            try:
                assert (await create_topic(client, server.broker, TOPIC, 1)).code == ResponseCode.SUCCESS
            finally:
                await client.close()

        asyncio.run(setup())
        asyncio.run(_stream(server, count, kills, seed))
    finally:
        server.stop()


def test_commits_rollbacks_and_check_backs_under_random_kill_9_settle_each_message_once(
    tmp_path: Path,
) -> None:
    run_stream(tmp_path / "data", tmp_path / "broker.conf", count=60, kills=3, seed=37)
