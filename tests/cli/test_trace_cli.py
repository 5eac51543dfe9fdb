"""``cometmq message trace`` against a real ``cometmq standalone`` process, with traced clients."""

from __future__ import annotations

import asyncio
import json

import pytest

from cometmq.client import AdminClient, Message, Producer
from processes import ServerProcess, broker_address, cometmq
from traced_messages import send_and_consume_traced
from waiting import wait_until

from .cli_support import assert_one_line_error


async def has_records(admin: AdminClient, msg_id: str, count: int) -> bool:
    return len(await admin.message_trace(msg_id)) >= count


@pytest.fixture(scope="module")
def traced(standalone: tuple[ServerProcess, str]) -> dict[str, str]:
    """A message sent and consumed with tracing on, once all its trace records are stored."""
    server, namesrv = standalone
    message = Message("CliTraced", b"hello", tags="greeting", keys="k-1")
    msg_id = asyncio.run(
        asyncio.wait_for(send_and_consume_traced(namesrv, message, "PID_cli_traced", "GID_cli_traced"), 60)
    )
    return {"msg_id": msg_id, "namesrv": namesrv, "broker": broker_address(server)}


def test_the_trace_is_a_timeline_of_the_send_and_the_consumption(traced: dict[str, str]) -> None:
    result = cometmq("message", "trace", traced["msg_id"], "-n", traced["namesrv"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Trace of message {traced['msg_id']} (3 records in RMQ_SYS_TRACE_TOPIC)"
    assert lines[1].split() == ["TIME", "EVENT", "GROUP", "CLIENT", "COST", "STATUS", "DETAILS"]
    sent, started, consumed = lines[2:]
    assert "sent" in sent and "PID_cli_traced" in sent and "success" in sent
    assert f"stored at {traced['broker']}" in sent and "tags greeting" in sent and "keys k-1" in sent
    assert "consume started" in started and "GID_cli_traced" in started and "first delivery" in started
    assert "consumed" in consumed and "GID_cli_traced" in consumed and "success" in consumed


def test_json_gives_each_record_with_rocketmq_field_names(traced: dict[str, str]) -> None:
    result = cometmq("message", "trace", traced["msg_id"], "-n", traced["namesrv"], "--json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["traceType"] for r in records] == ["Pub", "SubBefore", "SubAfter"]
    pub = records[0]
    assert (pub["groupName"], pub["topic"], pub["tags"], pub["keys"]) == (
        "PID_cli_traced", "CliTraced", "greeting", "k-1",
    )  # fmt: skip
    assert pub["msgId"] == traced["msg_id"] and pub["storeHost"] == traced["broker"]
    assert pub["msgType"] == "Normal_Msg" and pub["success"] is True and pub["bodyLength"] == 5
    assert records[1]["requestId"] == records[2]["requestId"]


def test_a_message_without_trace_records_is_an_error(traced: dict[str, str]) -> None:
    result = cometmq("message", "trace", "0123456789ABCDEF0123456789ABCDEF", "-n", traced["namesrv"])
    assert_one_line_error(result, "no trace record of message 0123456789ABCDEF0123456789ABCDEF")
    other_topic = cometmq(
        "message", "trace", traced["msg_id"], "-n", traced["namesrv"], "--trace-topic", "OtherTraces"
    )
    assert other_topic.returncode == 1 and "OtherTraces" in other_topic.stderr


def test_fields_clients_wrote_are_shown_escaped(standalone: tuple[ServerProcess, str]) -> None:
    _, namesrv = standalone

    async def go() -> str:
        async with Producer("PID_cli_escaped", namesrv, trace=True) as producer:
            sent = await producer.send(Message("CliEscaped", b"x", tags="red\x1b[31m", keys="bell\x07"))
        async with AdminClient(namesrv) as admin:
            await wait_until(lambda: has_records(admin, sent.msg_id, 1), message=f"the Pub of {sent.msg_id}")
        return sent.msg_id

    msg_id = asyncio.run(asyncio.wait_for(go(), 60))
    result = cometmq("message", "trace", msg_id, "-n", namesrv)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "tags red\\x1b[31m" in result.stdout and "keys bell\\x07" in result.stdout
