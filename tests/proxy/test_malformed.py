"""Bytes that are not a valid request: INVALID_ARGUMENT naming the request type, and no traceback logged."""

from __future__ import annotations

import grpc
import pytest
from proxy_support import ProxiedStandalone, client_metadata, new_client_id

CORRUPT = b"\x0a\xff"  # field 1, length-delimited, and a length that never ends
BAD_UTF8 = b"\x0a\x03\x12\x01\xff"  # a resource whose name is not UTF-8

METHOD = "/apache.rocketmq.v2.MessagingService/"


@pytest.mark.parametrize("raw", [CORRUPT, BAD_UTF8], ids=["corrupt wire format", "bad UTF-8"])
def test_malformed_unary_request_is_invalid_argument(proxied: ProxiedStandalone, raw: bytes) -> None:
    with grpc.insecure_channel(proxied.proxy) as channel:
        call = channel.unary_unary(METHOD + "QueryRoute")
        with pytest.raises(grpc.RpcError) as raised:
            call(raw, metadata=client_metadata(new_client_id()))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "QueryRouteRequest" in raised.value.details()


def test_malformed_request_of_a_response_stream_is_invalid_argument(proxied: ProxiedStandalone) -> None:
    with grpc.insecure_channel(proxied.proxy) as channel:
        call = channel.unary_stream(METHOD + "ReceiveMessage")
        with pytest.raises(grpc.RpcError) as raised:
            list(call(CORRUPT, metadata=client_metadata(new_client_id())))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "ReceiveMessageRequest" in raised.value.details()


def test_malformed_command_on_a_telemetry_stream_is_invalid_argument(proxied: ProxiedStandalone) -> None:
    with grpc.insecure_channel(proxied.proxy) as channel:
        call = channel.stream_stream(METHOD + "Telemetry")
        with pytest.raises(grpc.RpcError) as raised:
            list(call(iter([CORRUPT]), metadata=client_metadata(new_client_id())))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "TelemetryCommand" in raised.value.details()


def test_malformed_requests_leave_no_traceback_in_the_log(proxied: ProxiedStandalone) -> None:
    with grpc.insecure_channel(proxied.proxy) as channel:
        call = channel.unary_unary(METHOD + "SendMessage")
        with pytest.raises(grpc.RpcError):
            call(CORRUPT, metadata=client_metadata(new_client_id()))
    assert "Traceback" not in proxied.process.log_path.read_text(errors="replace")
