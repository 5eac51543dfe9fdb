"""Helpers for the access-control tests: servers with aclEnable, signed requests, users and ACLs made
over the wire."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cometmq.auth import Credentials, sign
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.auth_headers import AclRequestHeader, UserRequestHeader
from cometmq.remoting import RemotingClient
from secured_servers import INIT_USER, INNER, ROOT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import address as address_of
from _support import running_broker

if TYPE_CHECKING:
    from cometmq.broker import Broker
    from cometmq.namesrv import NameServer

# Actions a grant may list, but for All (which is every one of them).
GRANTABLE = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List")


async def invoke_as(
    client: RemotingClient,
    address: str,
    request: RemotingCommand,
    credentials: Credentials | None,
    timeout: float = 10.0,
) -> RemotingCommand:
    """*request* signed with *credentials* (None: not signed), and its answer."""
    if credentials is not None:
        sign(request, credentials)
    return await client.invoke(address, request, timeout=timeout)


def assert_refused(response: RemotingCommand, *words: str) -> str:
    """Asserts *response* is a NO_PERMISSION whose remark holds every one of *words*; the remark."""
    assert response.code == ResponseCode.NO_PERMISSION, (response.code, response.remark)
    remark = response.remark or ""
    for word in words:
        assert word in remark, remark
    return remark


async def admin(
    client: RemotingClient, address: str, code: RequestCode, fields: dict[str, str], body: object = None
) -> RemotingCommand:
    """An AUTH_* request signed by the super user; asserts it succeeded."""
    request = RemotingCommand(
        code=code, ext_fields=fields, body=json.dumps(body).encode() if body is not None else b""
    )
    response = await invoke_as(client, address, request, ROOT)
    assert response.code == ResponseCode.SUCCESS, (code, response.code, response.remark)
    return response


async def create_user(
    client: RemotingClient, address: str, name: str, secret: str, user_type: str = "Normal"
) -> Credentials:
    info = {"username": name, "password": secret, "userType": user_type, "userStatus": "enable"}
    await admin(
        client, address, RequestCode.AUTH_CREATE_USER, UserRequestHeader(username=name).encode(), info
    )
    return Credentials(name, secret)


def entry(resource: str, actions: Iterable[str], decision: str = "Allow") -> dict[str, object]:
    return {"resource": resource, "actions": list(actions), "sourceIps": [], "decision": decision}


async def grant(
    client: RemotingClient, address: str, name: str, entries: Sequence[dict[str, object]]
) -> None:
    """Give user *name* an ACL of these Custom *entries*."""
    subject = f"User:{name}"
    acl = {"subject": subject, "policies": [{"policyType": "Custom", "entries": list(entries)}]}
    await admin(client, address, RequestCode.AUTH_CREATE_ACL, AclRequestHeader(subject=subject).encode(), acl)


def served_codes(directory: Path, role: str = "ASYNC_MASTER") -> tuple[set[int], set[int]]:
    """The request codes a broker in *role* and a name server (with access control) serve."""
    from cometmq.auth.serving import AclSettings, ServerAccess
    from cometmq.broker import Broker, BrokerConfig
    from cometmq.namesrv import NameServer

    config = BrokerConfig()
    config.update(
        {
            "storePathRootDir": str(directory / "broker"),
            "brokerRole": role,
            "brokerId": 1 if role == "SLAVE" else 0,
        }
    )
    broker = Broker(config)
    access = ServerAccess(AclSettings(auth_config_path=directory / "namesrv"), None)
    namesrv = NameServer("127.0.0.1", 0, access=access)
    return set(broker._processor_table()), set(namesrv.dispatcher.codes)


@contextlib.asynccontextmanager
async def acl_broker(
    directory: Path, *, slave_sync_period_s: float = 10.0, **keys: str
) -> AsyncIterator[tuple[Broker, str]]:
    """A broker in this process with aclEnable, the super user ROOT and *keys* (broker.conf keys); its
    address. As a slave it copies its master's metadata every *slave_sync_period_s*."""
    async with running_broker(
        directory,
        slave_sync_period_s=slave_sync_period_s,
        aclEnable="true",
        initAuthenticationUser=INIT_USER,
        innerClientAuthenticationCredentials=INNER,
        **keys,
    ) as broker:
        yield broker, address_of(broker)


@contextlib.asynccontextmanager
async def acl_broker_and_client(
    directory: Path, **keys: str
) -> AsyncIterator[tuple[Broker, str, RemotingClient]]:
    """``acl_broker`` with a client (closed after) that signs nothing of itself."""
    async with acl_broker(directory, **keys) as (broker, address):
        client = RemotingClient()
        try:
            yield broker, address, client
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def acl_namesrv(directory: Path, **keys: str) -> AsyncIterator[tuple[NameServer, str]]:
    """A name server in this process with access control (aclEnable unless *keys* say otherwise) and
    the super user ROOT; its address."""
    from cometmq.auth.serving import ServerAccess
    from cometmq.namesrv import NameServer
    from cometmq.namesrv.config import NamesrvConfig

    config = NamesrvConfig()
    config.update(
        {"authConfigPath": str(directory), "aclEnable": "true", "initAuthenticationUser": INIT_USER, **keys}
    )
    namesrv = NameServer("127.0.0.1", 0, access=ServerAccess(config.acl_settings(), None))
    await namesrv.start()
    try:
        yield namesrv, f"127.0.0.1:{namesrv.port}"
    finally:
        await namesrv.stop()
