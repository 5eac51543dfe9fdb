"""A 4.x plain_acl.yml is re-read while the broker serves: a permission granted or revoked in the file
takes effect for the next requests, a file that does not parse keeps the accounts in force (and says
so once in the log), and the other clients see nothing of it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from acl_support import acl_broker, acl_broker_and_client, invoke_as

from cometmq.auth import Credentials
from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from header_requests import create_topic_request, send_request
from waiting import wait_until

PRODUCER = Credentials("producer", "producer-secret-5c")
STEADY = Credentials("steady", "steady-secret-9a")


def _plain_acl(reloaded_perm: str) -> str:
    return f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {PRODUCER.access_key}
    secretKey: {PRODUCER.secret_key}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - reloaded={reloaded_perm}
  - accessKey: {STEADY.access_key}
    secretKey: {STEADY.secret_key}
    admin: false
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
"""


def test_a_permission_changed_in_the_file_takes_effect_and_nothing_else_breaks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = tmp_path / "plain_acl.yml"
    plain.write_text(_plain_acl("PUB"), encoding="utf-8")

    async def scenario() -> None:
        async with acl_broker(tmp_path / "broker", plainAclFile=str(plain)) as (_, address):
            client = RemotingClient()
            steady_answers: list[int] = []
            stop = asyncio.Event()

            async def steady_sender() -> None:
                while not stop.is_set():
                    answer = await invoke_as(client, address, send_request("steady-topic"), STEADY)
                    steady_answers.append(answer.code)
                    await asyncio.sleep(0.01)

            async def producer_code() -> int:
                return (await invoke_as(client, address, send_request("reloaded"), PRODUCER)).code

            async def producer_answered(wanted: int) -> bool:
                return await producer_code() == wanted

            sender = asyncio.create_task(steady_sender())
            try:
                assert await producer_code() == ResponseCode.SUCCESS

                plain.write_text(_plain_acl("DENY"), encoding="utf-8")
                await wait_until(lambda: producer_answered(ResponseCode.NO_PERMISSION), message="PUB revoked")

                # A file that does not parse: the accounts read last stay in force.
                with caplog.at_level(logging.ERROR):
                    plain.write_text("accounts: [this is: not yaml", encoding="utf-8")
                    await wait_until(
                        lambda: any(str(plain) in r.getMessage() for r in caplog.records if r.levelno >= 40),
                        message="the error line naming the file",
                    )
                assert await producer_code() == ResponseCode.NO_PERMISSION
                errors = [
                    r for r in caplog.records if r.levelno >= logging.ERROR and str(plain) in r.getMessage()
                ]
                assert len(errors) == 1, [r.getMessage() for r in errors]

                plain.write_text(_plain_acl("PUB|SUB"), encoding="utf-8")
                await wait_until(lambda: producer_answered(ResponseCode.SUCCESS), message="PUB granted again")
            finally:
                stop.set()
                await sender
                await client.close()
            assert steady_answers
            assert set(steady_answers) == {ResponseCode.SUCCESS}

    asyncio.run(scenario())


def test_a_global_white_address_needs_no_signature_and_only_admins_administer(tmp_path: Path) -> None:
    plain = tmp_path / "plain_acl.yml"
    plain.write_text(
        f"""\
accounts:
  - accessKey: {STEADY.access_key}
    secretKey: {STEADY.secret_key}
    defaultTopicPerm: PUB|SUB
  - accessKey: admin
    secretKey: admin-secret-0
    admin: true
""",
        encoding="utf-8",
    )

    async def scenario() -> None:
        async with acl_broker_and_client(tmp_path / "broker", plainAclFile=str(plain)) as (
            _,
            address,
            client,
        ):
            # A plain account that is not an admin may publish, not create topics.
            assert (await invoke_as(client, address, send_request("t"), STEADY)).code == ResponseCode.SUCCESS
            refusal = await invoke_as(client, address, create_topic_request("administered"), STEADY)
            assert refusal.code == ResponseCode.NO_PERMISSION, refusal.remark
            admin = Credentials("admin", "admin-secret-0")
            assert (
                await invoke_as(client, address, create_topic_request("administered"), admin)
            ).code == ResponseCode.SUCCESS
            unsigned = await invoke_as(client, address, send_request("t"), None)
            assert unsigned.code == ResponseCode.NO_PERMISSION

            # This machine made a global white address: unsigned requests pass, admin ones too.
            plain.write_text(
                plain.read_text(encoding="utf-8") + "globalWhiteRemoteAddresses:\n  - 127.0.0.*\n",
                encoding="utf-8",
            )

            async def unsigned_passes() -> bool:
                return (
                    await invoke_as(client, address, send_request("t"), None)
                ).code == ResponseCode.SUCCESS

            await wait_until(unsigned_passes, message="the white address in force")
            answer = await invoke_as(client, address, create_topic_request("administered"), None)
            assert answer.code == ResponseCode.SUCCESS, answer.remark

    asyncio.run(scenario())
