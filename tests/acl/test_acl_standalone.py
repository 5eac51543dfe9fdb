"""``cometmq standalone`` with aclEnable: its name server and broker share one set of users and ACLs,
and its broker registers under its own credentials."""

from __future__ import annotations

import asyncio
from pathlib import Path

from acl_support import create_user, entry, grant, invoke_as

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting import RemotingClient
from processes import broker_address, start_standalone
from secured_servers import INIT_USER, INNER, write_conf


def _cluster_info() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)


def test_a_user_made_at_the_broker_is_known_to_the_name_server(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path / "broker.conf",
        mappedFileSizeCommitLog="4194304",
        mappedFileSizeConsumeQueue="60000",
        aclEnable="true",
        initAuthenticationUser=INIT_USER,
        innerClientAuthenticationCredentials=INNER,
    )
    server, namesrv = start_standalone(tmp_path / "data", conf)
    broker = broker_address(server)

    async def scenario() -> None:
        client = RemotingClient()
        try:
            shared = await create_user(client, broker, "shared", "shared-secret")
            await grant(client, broker, "shared", [entry("Cluster:DefaultCluster", ["Get"])])
            answer = await invoke_as(client, namesrv, _cluster_info(), shared)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert broker in answer.body.decode()  # registered, signed
            unsigned = await invoke_as(
                client, namesrv, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), None
            )
            assert unsigned.code == ResponseCode.NO_PERMISSION
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        assert server.terminate() == 0
