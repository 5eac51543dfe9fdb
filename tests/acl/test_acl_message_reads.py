"""Reading messages past the table: requests that name a message by its commit-log offset
(CONSUMER_SEND_MSG_BACK, VIEW_MESSAGE_BY_ID) are held to the message's topic, a group's retry topic
is that group's whatever group the header names, a plain account's DENY holds for a query by key, and
a signed request cannot be sent again under another code."""

from __future__ import annotations

import asyncio
from pathlib import Path

from acl_support import acl_broker_and_client, assert_refused, create_user, entry, grant, invoke_as

from cometmq.auth import Credentials
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import (
    ConsumerSendMsgBackRequestHeader,
    QueryMessageRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from cometmq.remoting import RemotingClient
from header_requests import command, create_topic_request, pull_request, send_request
from secured_servers import ROOT

ALICE = Credentials("alice", "alice-secret-91")


def _send_back(offset: int, group: str, origin_topic: str | None) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(
        offset=offset, group=group, delay_level=1, origin_topic=origin_topic
    )
    return command(RequestCode.CONSUMER_SEND_MSG_BACK, header)


def _view(offset: int) -> RemotingCommand:
    return command(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=offset))


async def _stored_at(client: RemotingClient, address: str, topic: str, body: bytes) -> int:
    """The commit-log offset of a message *body* the super user stores in *topic* (made here)."""
    created = await invoke_as(client, address, create_topic_request(topic), ROOT)
    assert created.code == ResponseCode.SUCCESS, created.remark
    sent = await invoke_as(client, address, send_request(topic, "pg", body), ROOT)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return int(sent.ext_fields["msgId"][-16:], 16)


def test_a_send_back_copies_only_a_message_of_a_topic_the_consumer_may_read(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "b") as (_, address, client):
            await create_user(client, address, ALICE.access_key, ALICE.secret_key)
            await grant(client, address, "alice", [entry("Group:A", ["Sub"]), entry("Topic:mine", ["Sub"])])
            secret = await _stored_at(client, address, "secret", b"TOP-SECRET")
            mine = await _stored_at(client, address, "mine", b"mine")

            # Naming a topic she may not read, naming hers, naming none (the C++ client's form).
            assert_refused(
                await invoke_as(client, address, _send_back(secret, "A", "secret"), ALICE),
                "user alice may not Sub on Topic:secret",
            )
            assert_refused(
                await invoke_as(client, address, _send_back(secret, "A", "mine"), ALICE),
                "is of topic secret, not of the originTopic mine",
            )
            assert_refused(
                await invoke_as(client, address, _send_back(secret, "A", None), ALICE),
                "user alice may not Sub or Get on Topic:secret",
            )
            for origin in ("mine", None):
                answer = await invoke_as(client, address, _send_back(mine, "A", origin), ALICE)
                assert answer.code == ResponseCode.SUCCESS, answer.remark

            retried = await invoke_as(client, address, pull_request("%RETRY%A", "A"), ALICE)
            assert b"TOP-SECRET" not in retried.body

    asyncio.run(scenario())


def test_viewing_a_message_by_its_offset_needs_a_read_of_its_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "b") as (_, address, client):
            await create_user(client, address, ALICE.access_key, ALICE.secret_key)
            await grant(
                client,
                address,
                "alice",
                [entry("Cluster:DefaultCluster", ["Get"]), entry("Topic:mine", ["Get"])],
            )
            secret = await _stored_at(client, address, "secret", b"TOP-SECRET")
            mine = await _stored_at(client, address, "mine", b"mine")

            assert_refused(
                await invoke_as(client, address, _view(secret), ALICE),
                "user alice may not Sub or Get on Topic:secret (from 127.0.0.1)",
            )
            answer = await invoke_as(client, address, _view(mine), ALICE)
            assert answer.code == ResponseCode.SUCCESS and b"mine" in answer.body, answer.remark

    asyncio.run(scenario())


def test_another_groups_retry_topic_needs_that_group(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "b") as (_, address, client):
            await create_user(client, address, ALICE.access_key, ALICE.secret_key)
            await grant(client, address, "alice", [entry("Group:A", ["Sub"])])

            # Her own group named in the header does not make group B's retry topic hers.
            assert_refused(
                await invoke_as(client, address, send_request("%RETRY%B", "A", b"injected"), ALICE),
                "user alice may not Sub on Group:B",
            )
            assert_refused(
                await invoke_as(client, address, pull_request("%RETRY%B", "A"), ALICE),
                "user alice may not Sub on Group:B",
            )
            own = await invoke_as(client, address, pull_request("%RETRY%A", "A"), ALICE)
            assert own.code != ResponseCode.NO_PERMISSION, own.remark

    asyncio.run(scenario())


def test_a_plain_accounts_deny_holds_for_a_query_by_key(tmp_path: Path) -> None:
    plain = tmp_path / "plain_acl.yml"
    plain.write_text(
        "accounts:\n"
        "  - {accessKey: bob, secretKey: bob-secret, defaultTopicPerm: SUB, topicPerms: [secret=DENY]}\n",
        encoding="utf-8",
    )
    bob = Credentials("bob", "bob-secret")

    def query(topic: str) -> RemotingCommand:
        header = QueryMessageRequestHeader(
            topic=topic, key="k1", max_num=32, begin_timestamp=0, end_timestamp=2**62
        )
        return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=header.encode())

    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "b", plainAclFile=str(plain)) as (_, address, client):
            assert_refused(
                await invoke_as(client, address, query("secret"), bob),
                "user bob may not Sub or Get on Topic:secret (from 127.0.0.1): a policy denies it",
            )
            other = await invoke_as(client, address, query("other"), bob)
            assert other.code != ResponseCode.NO_PERMISSION, other.remark

    asyncio.run(scenario())


def test_a_signed_request_sent_again_under_another_code_isassert_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "b") as (broker, address, client):
            assert (await invoke_as(client, address, create_topic_request("orders"), ROOT)).code == 0
            stats = RemotingCommand(
                code=RequestCode.GET_TOPIC_STATS_INFO,
                ext_fields=TopicRequestHeader(topic="orders").encode(),
            )
            assert (await invoke_as(client, address, stats, ROOT)).code == ResponseCode.SUCCESS

            # The administrator's read, seen on the wire, sent again as a delete.
            replay = RemotingCommand(
                code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields=dict(stats.ext_fields)
            )
            assert_refused(
                await client.invoke(address, replay, timeout=10),
                "its signature was made for another request",
            )
            assert broker.topics.get("orders") is not None

    asyncio.run(scenario())
