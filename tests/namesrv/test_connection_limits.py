"""`cometmq namesrv --channel-max-idle/--max-connections`: the name server's connection limits, in a
real process."""

from __future__ import annotations

import socket
from pathlib import Path

from processes import ServerProcess


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(10)
    return sock.recv(1) == b""


def test_the_namesrv_flags_close_idle_connections_and_those_past_the_maximum(tmp_path: Path) -> None:
    limits = ["--channel-max-idle", "1", "--max-connections", "1"]
    args = ["namesrv", "--host", "127.0.0.1", "--port", "0", *limits]
    server = ServerProcess(args, tmp_path / "namesrv.log")
    try:
        port = int(server.wait_ready("CometMQ namesrv ready").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as first:
            with socket.create_connection(("127.0.0.1", port)) as second:
                assert _closed_by_server(second)  # one past the maximum: closed at once
            assert _closed_by_server(first)  # silent for a second: closed as idle
        assert "the most allowed (serverMaxConnections)" in server.log()
        assert "idle for 1 s" in server.log()
    finally:
        assert server.terminate() == 0
