"""``cometmq broker ha-status`` against scripted brokers (a master, a slave, one that does not know the
request), and ``cometmq cluster list``'s role and replication lag from scripted brokers' runtime info."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.ha_status import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody, kv_table_body
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from processes import ServerProcess, cometmq

from .cli_support import error_line

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


def test_ha_status_says_the_epoch_and_in_failover_mode_the_in_sync_set() -> None:
    static = HARuntimeInfo(master=True, master_commit_log_max_offset=0, epoch=2)
    addr, result = ha_status(static)
    assert result.stdout.splitlines()[0] == (
        f"{addr} is a master: commit log ends at 0, 0 slave(s) in sync; epoch 2"
    )
    elected = HARuntimeInfo(False, 5000, epoch=7, in_sync_replicas=[1, 2, 3], failover=True)
    addr, result = ha_status(elected)
    assert result.stdout.splitlines()[0] == (
        f"{addr} is a slave; epoch 7; failover through etcd, in-sync broker ids: 1,2,3"
    )


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


def test_ha_status_of_a_name_server_says_it_is_one(standalone: tuple[ServerProcess, str]) -> None:
    namesrv = standalone[1]
    line = error_line(cometmq("broker", "ha-status", namesrv))
    assert line == (
        f"{namesrv} is a name server, not a broker: give a broker's client port, as "
        f"'cometmq cluster list -n {namesrv}' shows it"
    )


def test_ha_status_of_a_masters_ha_port_says_to_give_the_client_port(
    standalone: tuple[ServerProcess, str],
) -> None:
    found = re.search(r"HA server listening on (\S+)", standalone[0].log())
    assert found is not None
    ha_addr = found.group(1)
    result = cometmq("broker", "ha-status", ha_addr)
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"cometmq: error: {ha_addr} closed the connection without answering: it is not a broker's client "
        "port. A master's HA port (haListenPort, by default its client port + 1) does that; give the "
        "client port, as 'cometmq cluster list' shows it"
    )


def test_broker_help_names_ha_status() -> None:
    result = cometmq("broker", "--help")
    assert result.returncode == 0
    assert "ha-status" in result.stdout
    result = cometmq("broker", "ha-status", "--help")
    assert result.returncode == 0
    assert "acknowledged" in " ".join(result.stdout.split())
    assert "--namesrv" not in result.stdout  # it asks the broker at ADDR alone


def test_cluster_help_names_up() -> None:
    top, cluster = cometmq("--help"), cometmq("cluster", "--help")
    assert top.returncode == cluster.returncode == 0
    assert "or run one on this machine" in " ".join(top.stdout.split())
    assert "or run a replicated one here (up)" in " ".join(cluster.stdout.split())


class RuntimeInfoBroker:
    """A scripted broker of group "broker-ha" registered under ``broker_id``, answering
    GET_BROKER_RUNTIME_INFO with ``runtime``, or, for None, with an error; GET_BROKER_HA_STATUS with
    ``ha``, or, for None, with an error (as a RocketMQ 4.x broker)."""

    def __init__(
        self, broker_id: int, runtime: dict[str, str] | None, ha: HARuntimeInfo | None = None
    ) -> None:
        self.broker_id = broker_id
        self.runtime = runtime
        self.ha = ha
        self.server = RemotingServer(self.handle, "127.0.0.1", 0)

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.GET_BROKER_RUNTIME_INFO and self.runtime is not None:
            return request.response(body=kv_table_body(self.runtime))
        if request.code == RequestCode.GET_BROKER_HA_STATUS and self.ha is not None:
            return request.response(body=self.ha.encode())
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "scripted")

    async def register(self, client: RemotingClient, namesrv: str) -> None:
        await self.server.start()
        header = RegisterBrokerRequestHeader(
            broker_name="broker-ha",
            broker_addr=f"127.0.0.1:{self.server.port}",
            cluster_name="DefaultCluster",
            ha_server_addr="127.0.0.1:1",
            broker_id=self.broker_id,
        )
        body = RegisterBrokerBody(DataVersion(timestamp=1, counter=1), {}).encode()
        request = RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
        response = await client.invoke(namesrv, request)
        assert response.code == ResponseCode.SUCCESS, response.remark


def cluster_list(*brokers: RuntimeInfoBroker) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """``cluster list`` (JSON, and the table's rows split into cells) over a name server where
    ``brokers`` registered (the connection that registered them stays open meanwhile)."""

    async def go() -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        namesrv = NameServer(host="127.0.0.1", port=0)
        await namesrv.start()
        client = RemotingClient()
        ns = f"127.0.0.1:{namesrv.port}"
        try:
            for broker in brokers:
                await broker.register(client, ns)
            listing = await asyncio.to_thread(cometmq, "cluster", "list", "-n", ns, "--json")
            table = await asyncio.to_thread(cometmq, "cluster", "list", "-n", ns)
            return listing, table
        finally:
            await client.close()
            for broker in brokers:
                await broker.server.stop()
            await namesrv.stop()

    listing, table = asyncio.run(go())
    assert listing.returncode == 0 and table.returncode == 0, listing.stderr + table.stderr
    header, *rows = table.stdout.strip().splitlines()
    assert header.split()[:9] == [
        "CLUSTER", "BROKER", "ID", "ADDRESS", "ROLE", "EPOCH", "IN_SYNC", "LAG_BYTES", "LAG_S"
    ]  # fmt: skip
    return json.loads(listing.stdout), [row.split() for row in rows]


def runtime(role: str, max_offset: int, last_store_ms: int) -> dict[str, str]:
    return {
        "brokerRole": role,
        "commitLogMaxOffset": str(max_offset),
        "lastMessageStoreTimestamp": str(last_store_ms),
    }


def test_cluster_list_shows_each_brokers_role_and_a_slaves_lag() -> None:
    master = RuntimeInfoBroker(0, runtime("SYNC_MASTER", 10_000, 1_700_000_004_500))
    slave = RuntimeInfoBroker(1, runtime("SLAVE", 6_000, 1_700_000_002_000))
    entries, rows = cluster_list(master, slave)
    assert [(e["brokerId"], e["role"], e.get("lagBytes"), e.get("lagSeconds")) for e in entries] == [
        (0, "SYNC_MASTER", None, None),
        (1, "SLAVE", 4000, 2.5),
    ]
    assert [[*row[2:3], row[4], *row[7:9]] for row in rows] == [
        ["0", "SYNC_MASTER", "-", "-"],
        ["1", "SLAVE", "4000", "2.5"],
    ]


def test_cluster_list_shows_each_brokers_epoch_and_the_in_sync_set_in_failover_mode() -> None:
    in_sync = [1, 3]
    master = RuntimeInfoBroker(
        0,
        runtime("SYNC_MASTER", 10_000, 1_700_000_004_500),
        HARuntimeInfo(True, 10_000, epoch=4, in_sync_replicas=in_sync, failover=True),
    )
    slave = RuntimeInfoBroker(
        3,
        runtime("SLAVE", 10_000, 1_700_000_004_500),
        HARuntimeInfo(False, 10_000, epoch=4, in_sync_replicas=in_sync, failover=True),
    )
    java = RuntimeInfoBroker(2, runtime("SLAVE", 10_000, 1_700_000_004_500))  # no HA status to give
    entries, rows = cluster_list(master, java, slave)
    assert [row[2:3] + row[5:7] for row in rows] == [["0", "4", "1,3"], ["2", "-", "-"], ["3", "4", "1,3"]]
    assert [(e.get("epoch"), e.get("inSyncReplicas"), e.get("failover")) for e in entries] == [
        (4, in_sync, True),
        (None, None, None),
        (4, in_sync, True),
    ]


def test_a_slave_that_stored_nothing_has_a_lag_in_bytes_only() -> None:
    master = RuntimeInfoBroker(0, runtime("ASYNC_MASTER", 10_000, 1_700_000_004_500))
    slave = RuntimeInfoBroker(1, runtime("SLAVE", 0, 0))
    entries, rows = cluster_list(master, slave)
    assert (entries[1]["lagBytes"], "lagSeconds" in entries[1]) == (10_000, False)
    assert [rows[1][4], *rows[1][7:9]] == ["SLAVE", "10000", "-"]


def test_a_slave_without_its_master_has_no_lag_and_a_silent_broker_gets_its_role_from_its_id() -> None:
    slave = RuntimeInfoBroker(1, runtime("SLAVE", 6_000, 1_700_000_002_000))
    silent = RuntimeInfoBroker(2, None)
    entries, rows = cluster_list(slave, silent)
    assert [(e["role"], "lagBytes" in e) for e in entries] == [("SLAVE", False), ("SLAVE", False)]
    assert [row[4:9] for row in rows] == [["SLAVE", "-", "-", "-", "-"]] * 2


def test_commands_on_every_master_name_a_group_whose_master_is_away(
    standalone: tuple[ServerProcess, str],
) -> None:
    namesrv = standalone[1]
    every_master = cometmq("topic", "create", "AwayMaster", "-n", namesrv)
    assert every_master.returncode == 0 and every_master.stderr == ""
    away = RuntimeInfoBroker(1, None)  # broker-ha's slave, registered without its master

    async def go() -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        client = RemotingClient()
        try:
            await away.register(client, namesrv)
            created = await asyncio.to_thread(cometmq, "topic", "create", "AwayMaster", "-n", namesrv)
            progress = await asyncio.to_thread(cometmq, "group", "progress", "GID_away", "-n", namesrv)
            return created, progress
        finally:
            await client.close()
            await away.server.stop()

    created, progress = asyncio.run(go())
    slave = f"127.0.0.1:{away.server.port}"
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("created topic AwayMaster on broker-a (")
    assert created.stderr == (
        f"cometmq: warning: broker-ha has no master registered, only slaves ({slave}): topic AwayMaster "
        "was not created there (a slave takes no changes); run the command again once its master is back\n"
    )
    assert progress.returncode == 0, progress.stderr
    assert progress.stderr == (
        f"cometmq: warning: broker-ha has no master registered, only slaves ({slave}): its queues are "
        "left out (a group's progress is asked of the masters)\n"
    )
