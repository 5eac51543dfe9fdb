"""While aclEnable is off, the users and ACLs requests (3001-3010) are answered for clients on this
machine only: nobody else can plant a Super user before access control is turned on. With it on, a
server names its stored Super users when it starts."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from acl_support import acl_namesrv

from cometmq.auth.serving import ServerAccess
from cometmq.namesrv import NameServer
from cometmq.namesrv.config import NamesrvConfig
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.auth_headers import ListUsersRequestHeader, UserRequestHeader
from cometmq.remoting import RemotingClient
from secured_servers import INIT_USER, ROOT


def non_loopback_ip() -> str | None:
    """An IPv4 address of this machine that is not a loopback one (the source of a route out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        ip: str = probe.getsockname()[0]
    return None if ipaddress.ip_address(ip).is_loopback else ip


@contextlib.asynccontextmanager
async def open_namesrv(directory: Path) -> AsyncIterator[int]:
    """A name server in this process on every address, with aclEnable=false; its port."""
    config = NamesrvConfig()
    config.update({"authConfigPath": str(directory), "aclEnable": "false"})
    namesrv = NameServer("0.0.0.0", 0, access=ServerAccess(config.acl_settings(), None))
    await namesrv.start()
    try:
        yield namesrv.port
    finally:
        await namesrv.stop()


def create_super(name: str) -> RemotingCommand:
    body = {"username": name, "password": "pw", "userType": "Super", "userStatus": "enable"}
    return RemotingCommand(
        code=RequestCode.AUTH_CREATE_USER,
        ext_fields=UserRequestHeader(username=name).encode(),
        body=json.dumps(body).encode(),
    )


def test_users_and_acls_are_served_only_to_this_machine_while_acl_is_off(tmp_path: Path) -> None:
    outside = non_loopback_ip()
    if outside is None:
        pytest.skip("this machine has no address but loopback ones")

    async def scenario() -> None:
        client = RemotingClient()
        try:
            async with open_namesrv(tmp_path) as port:
                listing = RemotingCommand(
                    code=RequestCode.AUTH_LIST_USER, ext_fields=ListUsersRequestHeader(filter="").encode()
                )
                for request in (create_super("mallory"), listing):
                    refused = await client.invoke(f"{outside}:{port}", request, timeout=10)
                    assert refused.code == ResponseCode.NO_PERMISSION, (refused.code, refused.remark)
                    assert refused.remark == (
                        "user and ACL requests are accepted only from this machine while aclEnable=false"
                    )
                local = await client.invoke(f"127.0.0.1:{port}", create_super("admin"), timeout=10)
                assert local.code == ResponseCode.SUCCESS, local.remark
                local = await client.invoke(f"127.0.0.1:{port}", listing, timeout=10)
                assert [user["username"] for user in json.loads(local.body)] == ["admin"]
        finally:
            await client.close()

    asyncio.run(scenario())


def test_a_server_with_acl_on_names_its_stored_super_users_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        try:
            async with acl_namesrv(tmp_path, aclEnable="false") as (_, address):
                response = await client.invoke(address, create_super("operator"), timeout=10)
                assert response.code == ResponseCode.SUCCESS, response.remark
        finally:
            await client.close()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="cometmq.auth"):
            async with acl_namesrv(tmp_path, initAuthenticationUser=INIT_USER):
                pass

    asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "Super users stored" in r.getMessage()]
    assert lines == [f"aclEnable=true; the Super users stored in {tmp_path}: operator, {ROOT.access_key}"]
