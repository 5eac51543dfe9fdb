"""A RemotingClient with credentials signs every request it sends, however it sends it (``invoke``,
``start_invoke`` on its connection, ``invoke_oneway``), and none of its answers to the server's own
requests; one without credentials sends requests as they are."""

from __future__ import annotations

import asyncio

from cometmq.auth import ACCESS_KEY, SIGNATURE, Credentials, signature_of
from cometmq.protocol import RemotingCommand
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from waiting import wait_until

CREDENTIALS = Credentials("signer", "signer-secret")


def test_every_request_is_signed_and_no_response() -> None:
    async def scenario() -> None:
        received: list[RemotingCommand] = []
        server_side: list[Connection] = []

        def record(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            received.append(request)
            server_side.append(conn)
            return request.response()

        server = RemotingServer(record, "127.0.0.1", 0)
        await server.start()

        def answer_the_server(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            return request.response(remark="answered by the client")

        client = RemotingClient(answer_the_server, credentials=CREDENTIALS)
        plain = RemotingClient()
        address = f"127.0.0.1:{server.port}"
        try:
            await client.invoke(address, RemotingCommand(code=101, ext_fields={"a": "1"}, body=b"x"))
            conn = await client.connection(address)
            await conn.start_invoke(RemotingCommand(code=102, ext_fields={"b": "2"}), 5.0)
            await client.invoke_oneway(address, RemotingCommand(code=103, body=b"oneway"))
            await wait_until(lambda: len(received) == 3, message="the three requests")
            for request in received:
                assert request.ext_fields[ACCESS_KEY] == CREDENTIALS.access_key
                assert request.ext_fields[SIGNATURE] == signature_of(request, CREDENTIALS.secret_key)

            # The server asks the client something: the client's answer carries no signature.
            answer = await server_side[0].invoke(RemotingCommand(code=104), 5.0)
            assert answer.remark == "answered by the client"
            assert ACCESS_KEY not in answer.ext_fields and SIGNATURE not in answer.ext_fields

            await plain.invoke(address, RemotingCommand(code=105, ext_fields={"c": "3"}))
            assert received[-1].ext_fields == {"c": "3"}
        finally:
            await client.close()
            await plain.close()
            await server.stop()

    asyncio.run(scenario())
