"""What a client may not make the proxy do: inflate, convert or forward more than a broker would take."""

from __future__ import annotations

import zlib
from pathlib import Path

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
