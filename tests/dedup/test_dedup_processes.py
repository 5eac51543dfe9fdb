"""Deduplication across what a broker process goes through: a kill -9 and a restart (the keys of the
window rebuilt from the log), and a pause long enough that the producer's answer is lost for real (the
producer's retry on the same queue is answered with the copy the broker stored)."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from pathlib import Path

import pytest

from cometmq.client import AdminClient, Message, Producer, SendStatus
from cometmq.namesrv import NameServer
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import RemotingClient
from processes import TEST_BROKER_CONF, ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import CrashableServer, broker_conf, read_queue, send

from waiting import wait_until


def _keys(records: list[DecodedRecord]) -> list[str]:
    return [decode_properties(record.properties)["UNIQ_KEY"] for record in records]


def test_a_send_repeated_after_a_kill_9_and_a_restart_is_stored_once(tmp_path: Path) -> None:
    server = CrashableServer(
        tmp_path / "data", broker_conf(tmp_path / "broker.conf", deduplicationEnable="true")
    )

    async def send_first() -> tuple[object, object]:
        client = RemotingClient()
        try:
            _, first = await send(client, server.broker, "AfterCrash", 0, b"one", {"UNIQ_KEY": "K1"})
            _, second = await send(client, server.broker, "AfterCrash", 1, b"two", {"UNIQ_KEY": "K2"})
            return first, second
        finally:
            await client.close()

    async def send_again() -> None:
        client = RemotingClient()
        try:
            # The repeats go to other queues, as a producer's retries may.
            _, first_again = await send(client, server.broker, "AfterCrash", 1, b"one", {"UNIQ_KEY": "K1"})
            _, second_again = await send(client, server.broker, "AfterCrash", 0, b"two", {"UNIQ_KEY": "K2"})
            assert (first_again, second_again) == (first, second)
            assert _keys(await read_queue(client, server.broker, "AfterCrash", 0)) == ["K1"]
            assert _keys(await read_queue(client, server.broker, "AfterCrash", 1)) == ["K2"]
        finally:
            await client.close()

    server.start()
    try:
        first, second = asyncio.run(send_first())
        server.kill9()
        server.start()
        assert "deduplication: 2 keys of the last 300 s rebuilt" in server.log()
        asyncio.run(send_again())
    finally:
        server.stop()


def test_a_send_whose_answer_was_lost_is_retried_on_the_same_queue_and_stored_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cometmq.client")
    (tmp_path / "broker.conf").write_text(TEST_BROKER_CONF)

    async def main() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        namesrv_addr = f"127.0.0.1:{namesrv.port}"
        broker = ServerProcess(
            [
                "broker",
                "-n",
                namesrv_addr,
                "-c",
                str(tmp_path / "broker.conf"),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            tmp_path / "broker.log",
        )
        try:
            await asyncio.get_running_loop().run_in_executor(None, broker.wait_ready, "CometMQ broker ready:")
            async with AdminClient(namesrv_addr) as admin:
                await admin.create_topic("LostAnswers", queues=4, attributes="+deduplication=true")
            async with Producer(
                "PID_lost_answers", namesrv_addr, send_timeout=8.0, retry_times=1
            ) as producer:
                await producer.send(Message("LostAnswers", b"route and connection"))
                broker.proc.send_signal(signal.SIGSTOP)
                try:
                    sending = asyncio.ensure_future(producer.send(Message("LostAnswers", b"once")))
                    await wait_until(
                        lambda: "sending to the same queue again" in caplog.text,
                        message="the first attempt to time out",
                    )
                finally:
                    broker.proc.send_signal(signal.SIGCONT)
                result = await sending
            assert result.status is SendStatus.SEND_OK
            client = RemotingClient()
            try:
                found = re.search(r" at (\S+) \(cluster", broker.ready_line)
                assert found is not None, broker.ready_line
                broker_addr = found.group(1)
                stored = {
                    queue_id: await read_queue(client, broker_addr, "LostAnswers", queue_id)
                    for queue_id in range(4)
                }
            finally:
                await client.close()
            copies = [
                (queue_id, record)
                for queue_id, records in stored.items()
                for record in records
                if decode_properties(record.properties)["UNIQ_KEY"] == result.msg_id
            ]
            assert len(copies) == 1
            queue_id, record = copies[0]
            assert (result.queue.queue_id, result.queue_offset) == (queue_id, record.queue_offset)
            assert result.offset_msg_id == record.offset_msg_id
        finally:
            broker.terminate()
            await namesrv.stop()

    asyncio.run(main())
