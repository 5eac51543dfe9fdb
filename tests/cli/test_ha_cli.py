"""``cometmq broker ha-status`` against scripted brokers (a master, a slave, one that does not know the
request), and ``cometmq cluster list``'s role and replication lag against a real master and slave."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.ha_status import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo
from cometmq.remoting import Connection, RemotingServer
from processes import cometmq

from .cli_support import error_line

# The runtime-info keys a slave's lag is computed from.
LAST_STORE_TIME = "lastMessageStoreTimestamp"

MASTER_STATUS = HARuntimeInfo(
    master=True,
    master_commit_log_max_offset=5000,
    in_sync_slave_nums=1,
    ha_connection_info=[
        HAConnectionRuntimeInfo("10.0.0.7:40122", 4800, 200, True, 1024, 4800),
        HAConnectionRuntimeInfo("10.0.0.8:40123", 1000, 4000, False, 0, 1000),
    ],
)
LAST_READ_MS = 1_700_000_000_000
SLAVE_STATUS = HARuntimeInfo(
    master=False,
    master_commit_log_max_offset=5000,
    ha_client_runtime_info=HAClientRuntimeInfo(
        master_addr="10.0.0.6:10912",
        transferred_byte_in_second=2048,
        max_offset=4900,
        last_read_timestamp=LAST_READ_MS,
        is_activated=True,
    ),
)


@asynccontextmanager
async def answering(status: HARuntimeInfo | None) -> AsyncIterator[str]:
    """A server answering GET_BROKER_HA_STATUS with ``status``, or, for None, as a RocketMQ 4.x broker
    does: REQUEST_CODE_NOT_SUPPORTED. Its address."""

    def handle(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if request.code != RequestCode.GET_BROKER_HA_STATUS or status is None:
            return request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
            )
        return request.response(body=status.encode())

    server = RemotingServer(handle, "127.0.0.1", 0)
    await server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop()


def ha_status(status: HARuntimeInfo | None, *options: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    async def go() -> tuple[str, subprocess.CompletedProcess[str]]:
        async with answering(status) as addr:
            return addr, await asyncio.to_thread(cometmq, "broker", "ha-status", addr, *options)

    return asyncio.run(go())


def test_ha_status_of_a_master_lists_its_slaves() -> None:
    addr, result = ha_status(MASTER_STATUS)
    assert result.returncode == 0, result.stderr
    summary, header, *rows = result.stdout.strip().splitlines()
    assert summary == f"{addr} is a master: commit log ends at 5000, 1 slave(s) in sync"
    assert header.split() == ["SLAVE", "ACKED_OFFSET", "BEHIND_BYTES", "IN_SYNC", "BYTES_PER_S"]
    assert [row.split() for row in rows] == [
        ["10.0.0.7:40122", "4800", "200", "yes", "1024"],
        ["10.0.0.8:40123", "1000", "4000", "no", "0"],
    ]


def test_ha_status_of_a_master_without_slaves_says_so() -> None:
    _, result = ha_status(HARuntimeInfo(master=True, master_commit_log_max_offset=0))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[1:] == ["no slave is connected"]


def test_ha_status_of_a_slave_shows_its_master_link() -> None:
    addr, result = ha_status(SLAVE_STATUS)
    assert result.returncode == 0, result.stderr
    title, header, row = result.stdout.strip().splitlines()
    assert title == f"{addr} is a slave"
    assert header.split() == ["MASTER", "CONNECTED", "OWN_END", "LAST_READ", "BYTES_PER_S"]
    last_read = datetime.fromtimestamp(LAST_READ_MS / 1000).isoformat(sep=" ", timespec="seconds")
    assert row.split() == ["10.0.0.6:10912", "yes", "4900", *last_read.split(), "2048"]


def test_ha_status_json_is_the_brokers_answer() -> None:
    _, result = ha_status(SLAVE_STATUS, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == SLAVE_STATUS.to_json()


def test_ha_status_of_a_broker_without_the_request_is_a_clear_error() -> None:
    addr, result = ha_status(None)
    line = error_line(result)
    assert addr in line and "GET_BROKER_HA_STATUS" in line
    assert "neither CometMQ nor RocketMQ 5.x" in line
    assert f"(response code {ResponseCode.REQUEST_CODE_NOT_SUPPORTED})" in line


def test_broker_help_names_ha_status() -> None:
    result = cometmq("broker", "--help")
    assert result.returncode == 0
    assert "ha-status" in result.stdout
    result = cometmq("broker", "ha-status", "--help")
    assert result.returncode == 0
    assert "acknowledged" in " ".join(result.stdout.split())
