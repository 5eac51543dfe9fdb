"""The blocking facade's own sockets (cometmq.client._direct) with credentials and TLS: each request
carries a signature the server can check, over TLS when an SSL context is given, and a TLS handshake
that fails says so. A small threaded server stands in for a broker: it answers each frame with a
response naming whether the signature matched."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trustme

from cometmq.auth import ACCESS_KEY, SIGNATURE, Credentials, signature_of
from cometmq.client._direct import DirectLane
from cometmq.errors import ConnectionClosedError, ProtocolError
from cometmq.protocol import FrameDecoder, RemotingCommand, ResponseCode, encode

SECRETS = {"alice": "alice-secret"}


class FrameServer:
    """Answers every request on its port: SUCCESS with remark "signed by <user>" when its signature
    matches that user's secret, NO_PERMISSION otherwise; over TLS when given a server context."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.context = context
        self.handshake_errors: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(raw,), daemon=True).start()

    def _answer(self, raw: socket.socket) -> None:
        sock = raw
        try:
            if self.context is not None:
                try:
                    sock = self.context.wrap_socket(raw, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    self.handshake_errors.append(str(exc))
                    return
            decoder = FrameDecoder()
            while True:
                n = sock.recv_into(decoder.get_buffer())
                if n == 0:
                    return
                for request in decoder.buffer_updated(n):
                    sock.sendall(b"".join(encode(self._response(request))))
        except (OSError, ProtocolError):  # a TLS client's hello read as a frame is no valid frame
            return
        finally:
            sock.close()

    @staticmethod
    def _response(request: RemotingCommand) -> RemotingCommand:
        user = request.ext_fields.get(ACCESS_KEY, "")
        secret = SECRETS.get(user)
        if secret is None or request.ext_fields.get(SIGNATURE) != signature_of(request, secret):
            return request.response(ResponseCode.NO_PERMISSION, f"not signed by a known user ({user!r})")
        return request.response(remark=f"signed by {user}")

    def close(self) -> None:
        self.listener.close()


@contextmanager
def frame_server(context: ssl.SSLContext | None = None) -> Iterator[FrameServer]:
    server = FrameServer(context)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def request_with_body(body: bytes) -> RemotingCommand:
    return RemotingCommand(code=10, ext_fields={"topic": "T", "queueId": "0"}, body=body)


def test_a_lane_with_credentials_signs_every_request() -> None:
    with frame_server() as server:
        lane = DirectLane(credentials=Credentials("alice", "alice-secret"))
        try:
            for body in (b"first", b"second"):
                response = lane.invoke(server.address, request_with_body(body), timeout=5)
                assert response is not None
                assert (response.code, response.remark) == (ResponseCode.SUCCESS, "signed by alice")
        finally:
            lane.close()


def test_a_lane_with_a_wrong_secret_is_refused() -> None:
    with frame_server() as server:
        lane = DirectLane(credentials=Credentials("alice", "not-her-secret"))
        try:
            response = lane.invoke(server.address, request_with_body(b"x"), timeout=5)
        finally:
            lane.close()
    assert response is not None and response.code == ResponseCode.NO_PERMISSION


def test_a_lane_signs_a_body_given_in_parts() -> None:
    with frame_server() as server:
        lane = DirectLane(credentials=Credentials("alice", "alice-secret"))
        request = RemotingCommand(code=320, ext_fields={"b": "T"}, body_parts=[b"one", b"two", b"three"])
        try:
            response = lane.invoke(server.address, request, timeout=5)
        finally:
            lane.close()
    assert response is not None and response.code == ResponseCode.SUCCESS


def test_a_lane_with_an_ssl_context_talks_tls(ca: trustme.CA) -> None:
    with frame_server(server_context(ca)) as server:
        lane = DirectLane(credentials=Credentials("alice", "alice-secret"), ssl_context=client_context(ca))
        try:
            # Several requests on the one connection, and a body too large for one TLS record.
            for body in (b"a", b"b" * 100_000, b"c"):
                response = lane.invoke(server.address, request_with_body(body), timeout=5)
                assert response is not None and response.code == ResponseCode.SUCCESS
        finally:
            lane.close()
    assert server.handshake_errors == []


def test_a_lane_busy_polling_over_tls_reads_its_responses(ca: trustme.CA) -> None:
    with frame_server(server_context(ca)) as server:
        lane = DirectLane(
            busy_poll_us=50, credentials=Credentials("alice", "alice-secret"), ssl_context=client_context(ca)
        )
        try:
            for _ in range(3):
                response = lane.invoke(server.address, request_with_body(b"polled"), timeout=5)
                assert response is not None and response.code == ResponseCode.SUCCESS
        finally:
            lane.close()


def test_a_tls_lane_to_a_server_without_tls_fails_clearly(ca: trustme.CA) -> None:
    with frame_server() as server:
        lane = DirectLane(ssl_context=client_context(ca), connect_timeout=2)
        try:
            with pytest.raises(
                ConnectionClosedError, match=r"TLS handshake with .* failed: .*is TLS on at the server"
            ):
                lane.invoke(server.address, request_with_body(b"x"), timeout=2)
        finally:
            lane.close()


def test_a_tls_lane_refuses_a_certificate_it_does_not_trust(ca: trustme.CA) -> None:
    with frame_server(server_context(trustme.CA())) as server:
        lane = DirectLane(ssl_context=client_context(ca))
        try:
            with pytest.raises(ConnectionClosedError, match="certificate verify failed"):
                lane.invoke(server.address, request_with_body(b"x"), timeout=5)
        finally:
            lane.close()
