"""A slave's answer to an HA challenge is no request Signature: a master (or someone in between) that
picks the nonce learns nothing it could sign a remoting request with."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import TopicRequestHeader
from cometmq.protocol.ha import (
    AUTH_MAGIC,
    HELLO_SIZE,
    Hello,
    HelloDecoder,
    encode_auth_challenge,
    encode_hello,
)
from cometmq.replication import HAClient
from header_requests import create_topic_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acl"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from _stores import replication_config, stores
from acl_support import acl_broker_and_client, invoke_as

from secured_servers import ROOT

VICTIM = "victimtopic1"
# The nonce a rogue master picks: the values of a DELETE_TOPIC_IN_BROKER's ext fields in signing order
# (AccessKey, then topic), so that an answer keyed with the secret itself would be that request's
# Signature, with the slave's hello as its body.
CHOSEN_NONCE = ROOT.access_key.encode() + VICTIM.encode()


async def answer_to_chosen_nonce(tmp_path: Path) -> tuple[Hello, bytes]:
    """A slave with ROOT's credentials connects to a rogue master that challenges its hello with
    CHOSEN_NONCE; the slave's hello and the last 20 bytes of its AUTH (the answer)."""
    got: asyncio.Future[tuple[Hello, bytes]] = asyncio.get_running_loop().create_future()

    async def rogue_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello_decoder = HelloDecoder()
        hello_decoder.feed(await reader.readexactly(HELLO_SIZE))
        assert hello_decoder.hello is not None
        writer.write(encode_auth_challenge(CHOSEN_NONCE))
        head = await reader.readexactly(len(AUTH_MAGIC) + 2)
        assert head.startswith(AUTH_MAGIC)
        key_size = int.from_bytes(head[-2:], "big")
        auth = await reader.readexactly(key_size + 20)
        writer.write_eof()  # the slave takes this as a refusal and closes: the AUTH is then whole
        auth += await reader.read()
        writer.close()
        if not got.done():
            got.set_result((hello_decoder.hello, auth[-20:]))

    server = await asyncio.start_server(rogue_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with stores(tmp_path, "slave") as (slave,):
        client = HAClient(
            slave, replication_config(1), lambda: f"127.0.0.1:{port}", broker_id=1, credentials=ROOT
        )
        client.start()
        try:
            return await asyncio.wait_for(got, 30)
        finally:
            await client.stop()
            server.close()
            await server.wait_closed()


def test_a_slaves_answer_to_a_chosen_nonce_does_not_sign_a_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        hello, answer = await answer_to_chosen_nonce(tmp_path / "slave")
        async with acl_broker_and_client(tmp_path / "broker") as (broker, address, client):
            create = create_topic_request(VICTIM)
            assert (await invoke_as(client, address, create, ROOT)).code == ResponseCode.SUCCESS
            forged = RemotingCommand(
                code=RequestCode.DELETE_TOPIC_IN_BROKER,
                ext_fields={
                    **TopicRequestHeader(topic=VICTIM).encode(),
                    "AccessKey": ROOT.access_key,
                    "Signature": base64.b64encode(answer).decode(),
                },
                body=encode_hello(hello.broker_id, hello.expected_epoch),
            )
            response = await client.invoke(address, forged, timeout=10)
            assert response.code == ResponseCode.NO_PERMISSION, (response.code, response.remark)
            assert "does not match" in (response.remark or "")
            assert broker.topics.get(VICTIM) is not None

    asyncio.run(scenario())
