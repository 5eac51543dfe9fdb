"""Fixtures shared by the suites that need a real server process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

READY = "CometMQ standalone ready"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneServer:
    """`cometmq standalone` in a child process on free ports and its own data directory."""

    def __init__(self, data_dir: Path, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.log_path, "a")  # noqa: SIM115 - the child writes to it until it stops
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cometmq",
                "standalone",
                "--data-dir",
                str(self.data_dir),
                "--namesrv-port",
                str(self.namesrv_port),
                "--broker-port",
                str(self.broker_port),
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if READY in line:
                # Keep draining stdout so a chatty server never blocks on a full pipe.
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"standalone server did not start; log:\n{self.log_path.read_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneServer]:
    server = StandaloneServer(tmp_path / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()
