"""What the CLI tests share: raw requests to a broker, creating a topic, and checking a command's one-line
error."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import RemotingClient
from processes import cometmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import pull_request, send_request

__all__ = [
    "assert_one_line_error",
    "commit",
    "create_topic",
    "error_line",
    "invoke",
    "pull_request",
    "send",
]


def invoke(addr: str, request: RemotingCommand) -> RemotingCommand:
    """One request to the server at ``addr`` on a connection of its own."""

    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, request)
        finally:
            await client.close()

    return asyncio.run(go())


def send(addr: str, topic: str, body: bytes, queue_id: int = 0, **props: str) -> str:
    """Send one message with SEND_MESSAGE (code 10) as a producer would; its offset message id."""
    response = invoke(addr, send_request(topic, body, queue_id, props, v2=False))
    assert response.code == 0, response.remark
    return response.ext_fields["msgId"]


def commit(addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit ``offset`` for ``group`` on one queue with UPDATE_CONSUMER_OFFSET, as a consumer would."""
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    assert invoke(addr, RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=fields)).code == 0


def create_topic(namesrv: str, topic: str, queues: int = 1) -> None:
    created = cometmq("topic", "create", topic, "--queues", str(queues), "-n", namesrv)
    assert created.returncode == 0, created.stderr


def error_line(result: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The error a failed command printed, without its ``cometmq: error:`` prefix, after checking
    that the command exited with ``status`` and printed that one line, nothing on stdout and no
    traceback."""
    assert result.returncode == status, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cometmq: error: "), result.stderr
    return lines[0].removeprefix("cometmq: error: ")


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A one-line error (see ``error_line``) that contains each of ``fragments``."""
    line = error_line(result)
    for fragment in fragments:
        assert fragment in line, line
