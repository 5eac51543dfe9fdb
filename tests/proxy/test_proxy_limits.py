"""What a client may not make the proxy do: inflate, convert or forward more than a broker would take."""

from __future__ import annotations

import zlib
from pathlib import Path

import grpc
import pytest
from proxy_support import ProxiedStandalone, Stub, client_metadata, message, new_client_id

from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb

MIB = 1024 * 1024


def send(stub: Stub, *messages: v2.Message) -> pb.SendMessageResponse:
    response: pb.SendMessageResponse = stub.SendMessage(
        pb.SendMessageRequest(messages=messages), metadata=client_metadata(new_client_id())
    )
    return response


def peak_memory(pid: int) -> int:
    """The most memory the process has held (its VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MIB)
    packed = b"".join(packer.compress(chunk) for _ in range(size // MIB))
    return packed + packer.flush()


def test_gzip_body_inflating_past_the_limit_is_refused_unpacked(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    bomb = gzip_of_zeros(512 * MIB)  # about half a megabyte
    before = peak_memory(proxied.process.proc.pid)
    response = send(stub, message(proxied.new_topic(), bomb, body_encoding=v2.GZIP))
    assert response.status.code == v2.MESSAGE_BODY_TOO_LARGE, response.status
    # What the proxy inflated stays near the 4 MiB limit, nowhere near the body's 512 MiB.
    assert peak_memory(proxied.process.proc.pid) - before < 64 * MIB


def test_send_of_more_messages_than_allowed_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    response = send(stub, *(message(topic, b"x") for _ in range(1025)))
    assert response.status.code == v2.BAD_REQUEST, response.status
    assert "1025 messages" in response.status.message


def test_send_whose_bodies_together_are_too_large_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    response = send(stub, message(topic, bytes(3 * MIB)), message(topic, bytes(3 * MIB)))
    assert response.status.code == v2.MESSAGE_BODY_TOO_LARGE, response.status


def test_send_whose_gzip_bodies_together_inflate_too_large_is_refused(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    topic = proxied.new_topic()
    packed = gzip_of_zeros(3 * MIB)
    response = send(stub, *(message(topic, packed, body_encoding=v2.GZIP) for _ in range(2)))
    assert response.status.code == v2.MESSAGE_BODY_TOO_LARGE, response.status


def test_request_far_over_the_body_limit_is_cut_off_by_grpc(proxied: ProxiedStandalone, stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        send(stub, message(proxied.new_topic(), bytes(16 * MIB)))
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
