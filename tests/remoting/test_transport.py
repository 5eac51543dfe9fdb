"""The asyncio shell around the codec: a real RemotingServer and RemotingClient on loopback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from remoting_support import with_server

from cometmq.errors import ConnectionClosedError, ProtocolError, RemotingTimeoutError, RequestRefused
from cometmq.protocol import MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, ResponseCode, encode_bytes
from cometmq.protocol.codes import ONEWAY_FLAG
from cometmq.remoting import (
    RESULT_ONEWAY,
    RESULT_SUCCESS,
    RESULT_WRITE_CHANNEL_FAILED,
    Connection,
    RemotingClient,
    RemotingServer,
    transport,
)
from cometmq.remoting.transport import HandlerResult
from waiting import wait_until


def test_a_request_without_a_response_times_out() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return None  # no response at all

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        with pytest.raises(RemotingTimeoutError, match=r"no response to request code 7 from .* in 0\.1 s"):
            await client.invoke(addr, RemotingCommand(code=7), timeout=0.1)
        # The connection stays usable, and the expired request left nothing pending behind.
        conn = await client.connection(addr)
        assert conn.is_open and conn._pending == {}

    with_server(handler, scenario)


def test_start_invoke_writes_at_once_and_settles_like_invoke() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return None if request.code == 7 else request.response(remark=f"answer to {request.code}")

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert client.open_connection(addr) is None  # nothing connected yet
        conn = await client.connection(addr)
        assert client.open_connection(addr) is conn
        written: list[int] = []
        send = conn.send
        conn.send = lambda cmd: (written.append(cmd.code), send(cmd))[1]  # type: ignore[method-assign]
        answered = conn.start_invoke(RemotingCommand(code=8), timeout=5)
        unanswered = conn.start_invoke(RemotingCommand(code=7), timeout=0.1)
        assert written == [8, 7]  # on the socket when start_invoke returned
        assert (await answered).remark == "answer to 8"
        with pytest.raises(RemotingTimeoutError, match=r"no response to request code 7 from .* in 0\.1 s"):
            await unanswered
        assert conn._pending == {}
        # A request that cannot be written fails its future, and leaves nothing pending or timed.
        too_big = conn.start_invoke(RemotingCommand(code=8, body=bytes(MAX_FRAME_SIZE)), timeout=5)
        with pytest.raises(ProtocolError, match="frame"):
            await too_big
        assert conn._pending == {} and conn.is_open
        lost = conn.start_invoke(RemotingCommand(code=7), timeout=5)
        client.close_connection(addr)
        with pytest.raises(ConnectionClosedError):
            await lost
        assert client.open_connection(addr) is None
        with pytest.raises(ConnectionClosedError):
            conn.start_invoke(RemotingCommand(code=8), timeout=5)

    with_server(handler, scenario)


def test_a_refused_request_is_answered_with_its_code_and_remark() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, "no such topic")

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reply = await client.invoke(addr, RemotingCommand(code=105))
        assert (reply.code, reply.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such topic")

    with_server(handler, scenario)


def test_any_other_failure_is_a_system_error_that_hides_the_exception_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise KeyError("secret-detail")

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reply = await client.invoke(addr, RemotingCommand(code=105))
        assert reply.code == ResponseCode.SYSTEM_ERROR
        assert reply.remark == "internal error handling request code 105 (see the server log)"

    with caplog.at_level(logging.ERROR, logger="cometmq.remoting"):
        with_server(handler, scenario)
    [logged] = [record for record in caplog.records if record.exc_info]
    assert "secret-detail" in str(logged.exc_info[1]) and "request code 105" in logged.getMessage()


def test_a_response_over_the_frame_limit_becomes_a_system_error() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body_parts=[memoryview(bytes(MAX_FRAME_SIZE))])

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reply = await client.invoke(addr, RemotingCommand(code=11))
        assert reply.code == ResponseCode.SYSTEM_ERROR
        assert (reply.remark or "").startswith("the response cannot be sent: frame of")
        assert reply.body == b""

    with_server(handler, scenario)


def test_a_oneway_request_is_not_answered() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response()

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        oneway = RemotingCommand(code=1, opaque=1, flag=ONEWAY_FLAG)
        writer.write(encode_bytes(oneway) + encode_bytes(RemotingCommand(code=2, opaque=2)))
        decoder = FrameDecoder()
        replies: list[RemotingCommand] = []
        while not replies:
            replies += decoder.feed(await reader.read(4096))
        writer.close()
        # The first (and only) answer is the one to the second request.
        assert [reply.opaque for reply in replies] == [2]

    with_server(handler, scenario)


def test_closing_a_connection_fails_its_pending_requests_and_tells_the_server() -> None:
    closed: list[Connection] = []
    never: asyncio.Future[RemotingCommand] | None = None

    async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        nonlocal never
        never = asyncio.get_running_loop().create_future()
        return await never

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        server.add_close_listener(closed.append)
        pending = asyncio.ensure_future(client.invoke(addr, RemotingCommand(code=11), timeout=5))
        await wait_until(lambda: never is not None, message="the request in its handler")
        [server_side] = server.connections
        client.close_connection(addr)
        with pytest.raises(ConnectionClosedError):
            await pending
        await asyncio.wait_for(asyncio.shield(server_side.closed), 30)
        assert closed == [server_side]
        assert server.connections == set()
        assert never.cancelled()  # the handler's task ends with its connection

    with_server(handler, scenario)


def test_a_caller_cancelled_while_connecting_leaves_the_connection_to_the_others() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return request.response()

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        first = asyncio.ensure_future(client.connection(addr))
        second = asyncio.ensure_future(client.connection(addr))
        await asyncio.sleep(0)  # both are waiting for the one connecting
        first.cancel()
        conn = await second
        assert conn.is_open and first.cancelled()
        assert (await client.invoke(addr, RemotingCommand(code=8), timeout=5)).code == ResponseCode.SUCCESS

    with_server(handler, scenario)


def test_closing_the_client_while_connecting_fails_the_waiters_with_a_connection_error() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return request.response()

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        waiting = asyncio.ensure_future(client.connection(addr))
        await asyncio.sleep(0)  # the connecting has started
        client.abort()
        with pytest.raises(ConnectionClosedError, match="the client closed"):
            await waiting

    with_server(handler, scenario)


def test_the_observer_hears_of_every_answered_request_once_when_its_answer_is_written() -> None:
    observed: list[tuple[int, int, float, bool, str]] = []
    held: list[tuple[Connection, RemotingCommand]] = []

    async def later(request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)
        return request.response(ResponseCode.SYSTEM_BUSY)

    def handler(conn: Connection, request: RemotingCommand) -> HandlerResult:
        if request.code == 1:
            return request.response()  # at once
        if request.code == 2:
            return later(request)  # from a task
        if request.code == 5:
            return request.response()  # to a oneway request: not written, observed as "oneway"
        if request.code == 4:
            conn.answer_later(request, long_polling=True)  # a held pull, answered by whoever holds it
        held.append((conn, request))  # code 3: never answered, and not observed
        return None

    def observer(
        request_code: int, response_code: int, seconds: float, long_polling: bool, result: str
    ) -> None:
        observed.append((request_code, response_code, seconds, long_polling, result))

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert (await client.invoke(addr, RemotingCommand(code=1))).code == ResponseCode.SUCCESS
        assert (await client.invoke(addr, RemotingCommand(code=2))).code == ResponseCode.SYSTEM_BUSY
        conn = await client.connection(addr)
        conn.invoke_oneway(RemotingCommand(code=3))
        conn.invoke_oneway(RemotingCommand(code=5))
        answer = asyncio.ensure_future(client.invoke(addr, RemotingCommand(code=4)))
        await wait_until(lambda: len(held) == 2, message="both unanswered requests held")
        server_conn, request = held[1]
        assert len(server_conn._arrived) == 1  # the held one only: the unanswered oneway is forgotten
        server_conn.reply(request, request.response(ResponseCode.PULL_NOT_FOUND))
        assert (await answer).code == ResponseCode.PULL_NOT_FOUND
        assert [(code, response, polling, result) for code, response, _, polling, result in observed] == [
            (1, ResponseCode.SUCCESS, False, RESULT_SUCCESS),
            (2, ResponseCode.SYSTEM_BUSY, False, RESULT_SUCCESS),
            (5, ResponseCode.SUCCESS, False, RESULT_ONEWAY),
            (4, ResponseCode.PULL_NOT_FOUND, True, RESULT_SUCCESS),
        ]
        assert all(seconds >= 0 for _, _, seconds, _, _ in observed)
        assert server_conn._arrived == {} and server_conn._answered_later == {}

    with_server(handler, scenario, observer=observer)


def test_an_answer_to_a_closed_connection_is_observed_as_a_failed_write() -> None:
    observed: list[str] = []
    held: list[tuple[Connection, RemotingCommand]] = []

    def handler(conn: Connection, request: RemotingCommand) -> HandlerResult:
        conn.answer_later(request)
        held.append((conn, request))
        return None

    def observer(
        request_code: int, response_code: int, seconds: float, long_polling: bool, result: str
    ) -> None:
        observed.append(result)

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        conn = await client.connection(addr)
        asyncio.ensure_future(client.invoke(addr, RemotingCommand(code=1))).add_done_callback(
            lambda future: future.exception()
        )
        await wait_until(lambda: held, message="the request held")
        server_conn, request = held[0]
        server_conn.close()
        await conn.closed
        server_conn.reply(request, request.response())
        assert observed == [RESULT_WRITE_CHANNEL_FAILED]

    with_server(handler, scenario, observer=observer)


def test_requests_never_answered_do_not_stop_the_timing_of_later_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "MAX_PENDING_REQUESTS_PER_CONNECTION", 4)
    observed: list[int] = []
    server_conns: list[Connection] = []

    def handler(conn: Connection, request: RemotingCommand) -> HandlerResult:
        server_conns.append(conn)
        if request.code == 9:
            conn.answer_later(request)  # and never answered
            return None
        return request.response()

    def observer(
        request_code: int, response_code: int, seconds: float, long_polling: bool, result: str
    ) -> None:
        observed.append(request_code)

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        conn = await client.connection(addr)
        for _ in range(10):
            conn.invoke_oneway(RemotingCommand(code=9))
        await wait_until(lambda: len(server_conns) == 10, message="all held")
        assert len(server_conns[0]._arrived) <= 4  # bounded
        assert (await client.invoke(addr, RemotingCommand(code=1))).code == ResponseCode.SUCCESS
        assert observed == [1]
        assert len(server_conns[0]._arrived) <= 4

    with_server(handler, scenario, observer=observer)


def test_a_connect_that_finishes_as_the_client_closes_keeps_no_connection() -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return request.response()

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        loop = asyncio.get_running_loop()
        create_connection = loop.create_connection

        async def connect_then_abort(*args: Any, **kwargs: Any) -> Any:
            connected = await create_connection(*args, **kwargs)
            client.abort()  # in the step the connect finishes in
            return connected

        loop.create_connection = connect_then_abort  # type: ignore[method-assign]
        try:
            with pytest.raises(ConnectionClosedError, match="the client closed"):
                await client.connection(addr)
        finally:
            del loop.create_connection
        assert client.open_connection(addr) is None
        await wait_until(lambda: not server.connections, message="the server sees the connection closed")

    with_server(handler, scenario)
