"""Users and ACLs made over the wire (AUTH_CREATE_USER … AUTH_LIST_ACL, 3001-3010) at a broker and at a
name server: answered as RocketMQ 5 answers them (but never with a password), in force at once, and
still there after a restart on the same directory."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from acl_support import (
    acl_broker,
    acl_broker_and_client,
    acl_namesrv,
    admin,
    create_user,
    entry,
    grant,
    invoke_as,
)

from cometmq.auth import Credentials
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.auth_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from cometmq.remoting import RemotingClient
from secured_servers import ROOT

ALICE = Credentials("alice", "alice-secret-31")


def _get_user(name: str) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.AUTH_GET_USER, ext_fields=UserRequestHeader(username=name).encode()
    )


def _cluster_info() -> RemotingCommand:
    # A request both servers serve that needs Get on the cluster.
    return _get_user(ROOT.access_key)


def _servers(tmp_path: Path) -> dict[str, Callable[[], AbstractAsyncContextManager[tuple[Any, str]]]]:
    return {
        "broker": lambda: acl_broker(tmp_path / "broker"),
        "namesrv": lambda: acl_namesrv(tmp_path / "namesrv"),
    }


@pytest.mark.parametrize("server", ["broker", "namesrv"])
def test_users_and_acls_made_over_the_wire_hold_across_a_restart(tmp_path: Path, server: str) -> None:
    start = _servers(tmp_path)[server]

    async def first_run() -> None:
        async with start() as (_, address):
            client = RemotingClient()
            try:
                await create_user(client, address, ALICE.access_key, "first-secret")
                # Its new secret replaces the first at once.
                info = {"username": "alice", "password": ALICE.secret_key, "userType": "Normal"}
                await admin(
                    client,
                    address,
                    RequestCode.AUTH_UPDATE_USER,
                    UserRequestHeader(username="alice").encode(),
                    info,
                )

                got = await admin(
                    client, address, RequestCode.AUTH_GET_USER, UserRequestHeader(username="alice").encode()
                )
                user = json.loads(got.body)
                assert user["username"] == "alice" and user["userType"] == "Normal"
                assert "password" not in user and ALICE.secret_key not in got.body.decode()

                listed = await admin(
                    client, address, RequestCode.AUTH_LIST_USER, ListUsersRequestHeader(filter="ali").encode()
                )
                assert [u["username"] for u in json.loads(listed.body)] == ["alice"]
                assert ALICE.secret_key not in listed.body.decode()

                # No ACL yet: refused.
                refusal = await invoke_as(client, address, _cluster_info(), ALICE)
                assert refusal.code == ResponseCode.NO_PERMISSION, refusal.remark
                await grant(
                    client, address, "alice", [entry("Cluster:*", ["Get"]), entry("Topic:gone", ["Pub"])]
                )
                assert (await invoke_as(client, address, _cluster_info(), ALICE)).code == ResponseCode.SUCCESS

                subject = AclRequestHeader(subject="User:alice").encode()
                acl = json.loads((await admin(client, address, RequestCode.AUTH_GET_ACL, subject)).body)
                assert acl["subject"] == "User:alice"
                resources = {e["resource"] for p in acl["policies"] for e in p["entries"]}
                assert resources == {"Cluster:*", "Topic:gone"}

                listed = await admin(
                    client,
                    address,
                    RequestCode.AUTH_LIST_ACL,
                    ListAclsRequestHeader(resource_filter="gone").encode(),
                )
                assert [a["subject"] for a in json.loads(listed.body)] == ["User:alice"]

                # One entry deleted by its resource; the other stays.
                delete = DeleteAclRequestHeader(subject="User:alice", resource="Topic:gone").encode()
                await admin(client, address, RequestCode.AUTH_DELETE_ACL, delete)
                acl = json.loads((await admin(client, address, RequestCode.AUTH_GET_ACL, subject)).body)
                assert {e["resource"] for p in acl["policies"] for e in p["entries"]} == {"Cluster:*"}

                await create_user(client, address, "temporary", "temporary-secret")
                await admin(
                    client,
                    address,
                    RequestCode.AUTH_DELETE_USER,
                    UserRequestHeader(username="temporary").encode(),
                )
            finally:
                await client.close()

    async def second_run() -> None:
        async with start() as (_, address):
            client = RemotingClient()
            try:
                got = await admin(
                    client, address, RequestCode.AUTH_GET_USER, UserRequestHeader(username="alice").encode()
                )
                assert json.loads(got.body)["username"] == "alice"
                assert (await invoke_as(client, address, _cluster_info(), ALICE)).code == ResponseCode.SUCCESS
                gone = await invoke_as(client, address, _get_user("temporary"), ROOT)
                assert gone.code != ResponseCode.SUCCESS or not gone.body
            finally:
                await client.close()

    asyncio.run(first_run())
    asyncio.run(second_run())


def test_a_normal_user_may_not_make_a_super_user_and_a_blank_name_is_invalid(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "broker") as (_, address, client):
            operator = await create_user(client, address, "operator", "operator-secret")
            await grant(client, address, "operator", [entry("Cluster:*", ["Update"])])
            info = {"username": "boss", "password": "boss-secret", "userType": "Super"}
            request = RemotingCommand(
                code=RequestCode.AUTH_CREATE_USER,
                ext_fields=UserRequestHeader(username="boss").encode(),
                body=json.dumps(info).encode(),
            )
            refusal = await invoke_as(client, address, request, operator)
            assert refusal.code != ResponseCode.SUCCESS
            assert "boss-secret" not in (refusal.remark or "")

            blank = RemotingCommand(
                code=RequestCode.AUTH_CREATE_USER,
                ext_fields=UserRequestHeader(username=" ").encode(),
                body=json.dumps({"username": " ", "password": "x"}).encode(),
            )
            answer = await invoke_as(client, address, blank, ROOT)
            assert answer.code == ResponseCode.INVALID_PARAMETER, (answer.code, answer.remark)

    asyncio.run(scenario())
