"""Signed frames at the edges, sent as they are built (the client adds nothing): a request with no
AccessKey or no Signature, a body changed after signing, a signature replayed on another request, an
unknown or a disabled user, a wrong secret. Each is refused NO_PERMISSION with a remark saying which,
and never showing a secret."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from acl_support import (
    acl_broker,
    acl_broker_and_client,
    acl_namesrv,
    assert_refused,
    create_user,
    entry,
    grant,
    invoke_as,
)

from cometmq.auth import Credentials, sign
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.auth_headers import UserRequestHeader
from cometmq.protocol.broker_headers import QueueRequestHeader
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import RegisterBrokerBody
from cometmq.remoting import RemotingClient
from header_requests import create_topic_request
from secured_servers import ROOT
from waiting import wait_until


def _max_offset(topic: str) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.GET_MAX_OFFSET, ext_fields=QueueRequestHeader(topic=topic, queue_id=0).encode()
    )


def _no_secret_in(remark: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in remark


def test_edge_frames_are_refused_each_with_its_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "broker") as (_, address, client):
            reader = await create_user(client, address, "reader", "reader-secret-77")
            await grant(client, address, "reader", [entry("Topic:*", ["Get"])])

            # The right user and secret: let through.
            answer = await invoke_as(client, address, _max_offset("t1"), reader)
            assert answer.code != ResponseCode.NO_PERMISSION, answer.remark

            # No AccessKey at all.
            unsigned = await invoke_as(client, address, _max_offset("t1"), None)
            assert_refused(unsigned, f"request code {RequestCode.GET_MAX_OFFSET} is not signed", "aclEnable")

            # The C++ client's frame without credentials: an empty AccessKey, its channel, and a
            # Signature under the empty secret. Not signed by anyone.
            cpp = _max_offset("t1")
            cpp.ext_fields["OnsChannel"] = "ALIYUN"
            sign(cpp, Credentials("", ""))
            assert_refused(await invoke_as(client, address, cpp, None), "is not signed")

            # An AccessKey and no Signature.
            bare = _max_offset("t1")
            bare.ext_fields["AccessKey"] = "reader"
            assert_refused(await invoke_as(client, address, bare, None), "reader", "carries no Signature")

            # A body changed after signing.
            changed = _max_offset("t1")
            changed.body = b"signed"
            sign(changed, reader)
            changed.body = b"changed"
            remark = assert_refused(
                await invoke_as(client, address, changed, None), "signature of user reader"
            )
            _no_secret_in(remark, reader.secret_key)

            # A signature replayed on another request (another topic).
            original = _max_offset("t1")
            sign(original, reader)
            replay = _max_offset("t2")
            for field in ("AccessKey", "Signature"):
                replay.ext_fields[field] = original.ext_fields[field]
            assert_refused(await invoke_as(client, address, replay, None), "does not match")

            # A header field changed after signing.
            tampered = _max_offset("t1")
            sign(tampered, reader)
            tampered.ext_fields["queueId"] = "1"
            assert_refused(await invoke_as(client, address, tampered, None), "does not match")

            # A wrong secret: the remark shows neither it nor the right one.
            wrong = Credentials("reader", "not-the-secret")
            remark = assert_refused(
                await invoke_as(client, address, _max_offset("t1"), wrong), "does not match"
            )
            _no_secret_in(remark, "not-the-secret", reader.secret_key)

            # A user nobody created.
            stranger = Credentials("stranger", "whatever-secret")
            remark = assert_refused(
                await invoke_as(client, address, _max_offset("t1"), stranger),
                "user stranger is not known",
            )
            _no_secret_in(remark, "whatever-secret")

            # A disabled user, however right its signature.
            info = {"username": "reader", "password": reader.secret_key, "userStatus": "disable"}
            request = RemotingCommand(
                code=RequestCode.AUTH_UPDATE_USER,
                ext_fields=UserRequestHeader(username="reader").encode(),
                body=json.dumps(info).encode(),
            )
            assert (await invoke_as(client, address, request, ROOT)).code == ResponseCode.SUCCESS
            assert_refused(
                await invoke_as(client, address, _max_offset("t1"), reader), "user reader is disabled"
            )

    asyncio.run(scenario())


def test_a_code_the_server_does_not_serve_is_answered_not_supported_signed_or_not(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "broker") as (_, address, client):
            response = await invoke_as(client, address, RemotingCommand(code=99_999), None)
            assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    asyncio.run(scenario())


def _registration(broker_name: str) -> RemotingCommand:
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr="127.0.0.1:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="127.0.0.1:10912",
        broker_id=0,
    )
    return RemotingCommand(
        code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=RegisterBrokerBody().encode()
    )


def test_the_name_server_refuses_an_unsigned_registration(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_namesrv(tmp_path / "namesrv") as (namesrv, address):
            client = RemotingClient()
            try:
                refusal = await invoke_as(client, address, _registration("fake-broker"), None)
                assert_refused(refusal, "is not signed")
                assert "fake-broker" not in namesrv.routes.broker_addr_table
                # Signed by a user that may Update the cluster: registered.
                answer = await invoke_as(client, address, _registration("real-broker"), ROOT)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                assert "real-broker" in namesrv.routes.broker_addr_table
            finally:
                await client.close()

    asyncio.run(scenario())


def test_a_broker_registers_with_a_locked_name_server_under_its_own_credentials(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            acl_namesrv(tmp_path / "namesrv") as (namesrv, namesrv_addr),
            acl_broker(tmp_path / "broker", namesrvAddr=namesrv_addr, brokerName="signed-broker"),
        ):
            assert "signed-broker" in namesrv.routes.broker_addr_table

    asyncio.run(scenario())


def test_a_slave_copies_its_locked_masters_metadata_under_its_own_credentials(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            acl_namesrv(tmp_path / "namesrv") as (_, namesrv_addr),
            acl_broker(tmp_path / "master", namesrvAddr=namesrv_addr) as (_, master_addr),
            acl_broker(
                tmp_path / "slave",
                slave_sync_period_s=0.2,
                namesrvAddr=namesrv_addr,
                brokerRole="SLAVE",
                brokerId="1",
            ) as (slave, _),
        ):
            client = RemotingClient()
            try:
                request = create_topic_request("made-on-master", 2)
                answer = await invoke_as(client, master_addr, request, ROOT)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            finally:
                await client.close()
            await wait_until(
                lambda: slave.topics.get("made-on-master") is not None,
                message="the topic copied to the slave",
            )

    asyncio.run(scenario())
