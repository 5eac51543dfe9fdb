"""Running the real ``cometmq`` command in subprocesses, for the tests."""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMMAND = [sys.executable, "-m", "cometmq"]

# Small store files keep start-up fast; everything else is the broker's default.
TEST_BROKER_CONF = """\
# broker.conf for the CLI tests
mappedFileSizeCommitLog=4194304
mappedFileSizeConsumeQueue=60000
"""


_handed_out: set[int] = set()


def free_port() -> int:
    """A port for a server a test starts, free with the port after it (a broker's HA port is its
    client port + 1). It lies below the OS's ephemeral range, so no outgoing connection can take
    either port between this choice and the server's bind, and it is never handed out twice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(10000, low - 1)
        if {port - 1, port, port + 1} & _handed_out:
            continue
        try:
            with socket.socket() as sock, socket.socket() as next_sock:
                sock.bind(("127.0.0.1", port))
                next_sock.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        _handed_out.add(port)
        return port


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COMETMQ_NAMESRV", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cometmq(
    *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one ``cometmq`` command to completion (``env``: extra environment variables)."""
    return subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**subprocess_env(), **(env or {})},
        check=False,
    )


class ServerProcess:
    """A ``cometmq`` server command in the background; stdout is read for its ready line."""

    def __init__(
        self, args: list[str], log_path: Path, preexec_fn: Callable[[], object] | None = None
    ) -> None:
        """*preexec_fn* runs in the child before the server starts (a resource limit, say)."""
        self.args = args
        self.log_path = log_path
        self._log = log_path.open("ab")
        # stderr (the log) goes to a file, so a chatty server can never block on a full pipe.
        self.proc = subprocess.Popen(
            [*COMMAND, *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=subprocess_env(),
            text=False,
            preexec_fn=preexec_fn,
        )
        self.ready_line = ""

    def wait_ready(self, prefix: str, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        buffer = b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not select.select([self.proc.stdout], [], [], 0)[0]:
                raise AssertionError(f"{self.args} exited with {self.proc.returncode}:\n{self.log()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:  # end of output: the server has exited or is about to
                if self.proc.poll() is None:
                    self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                raise AssertionError(f"{self.args} exited with {self.proc.returncode}:\n{self.log()}")
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    self.ready_line = line
                    return line
        raise AssertionError(f"{self.args} not ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait; kill if it does not stop. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return self.proc.returncode


_READY = re.compile(r"namesrv (\S+), broker \S+ at (\S+),")
_PROXY_READY = re.compile(r"(?:, proxy|gRPC at) ([^\s,]+)")


def standalone_args(data_dir: Path, *extra: str) -> list[str]:
    """``cometmq standalone``'s arguments for a test: data in *data_dir*, on loopback, every port one the
    OS picks (so a server beside the tests, on the default ports, never collides) and no RocketMQ 5 proxy
    (its port 0; :func:`proxy_args` asks for one), then *extra* (a flag given again there wins: argparse
    keeps the last)."""
    ports = ("--namesrv-port", "--broker-port", "--metrics-port", "--dashboard-port", "--proxy-port")
    return [
        "standalone",
        "--data-dir",
        str(data_dir),
        "--host",
        "127.0.0.1",
        *(part for flag in ports for part in (flag, "0")),
        *extra,
    ]


def start_standalone(
    data_dir: Path,
    conf: Path | None = None,
    *extra: str,
    preexec_fn: Callable[[], object] | None = None,
) -> tuple[ServerProcess, str]:
    """A standalone server on ports the OS picks (port 0, so no other process can take them between
    choosing and binding); returns it and its NameServer address, both read from its ready line.
    *preexec_fn* as ``ServerProcess``'s."""
    args = standalone_args(data_dir, *extra)
    if conf is not None:
        args += ["-c", str(conf)]
    server = ServerProcess(args, data_dir.parent / f"{data_dir.name}-standalone.log", preexec_fn)
    try:
        server.wait_ready("CometMQ standalone ready:")
    except BaseException:
        server.terminate()
        raise
    return server, _ready_addresses(server)[0]


def proxy_args() -> list[str]:
    """The extra arguments of a standalone that serves its RocketMQ 5 proxy, on a free port (0 turns the
    proxy off, so the port is chosen here)."""
    return ["--proxy-port", str(free_port())]


def proxy_address(server: ServerProcess) -> str:
    """The gRPC address of the proxy a standalone server's (or ``cometmq proxy``'s) ready line names."""
    found = _PROXY_READY.search(server.ready_line)
    assert found is not None, server.ready_line
    return found.group(1)


def broker_address(server: ServerProcess) -> str:
    """The broker address a standalone server's ready line advertises."""
    return _ready_addresses(server)[1]


def _ready_addresses(server: ServerProcess) -> tuple[str, str]:
    found = _READY.search(server.ready_line)
    assert found is not None, server.ready_line
    return found.group(1), found.group(2)


class StandaloneServer:
    """A standalone server that can be stopped and started again on the same data directory."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.process: ServerProcess | None = None
        self.namesrv = ""

    def start(self) -> None:
        self.process, self.namesrv = start_standalone(self.data_dir, None, *self.extra)

    def stop(self) -> int:
        """SIGTERM and wait; the exit status (0 after a clean shutdown)."""
        if self.process is None:
            return 0
        code = self.process.terminate()
        self.process = None
        return code


# What librocketmq 2.x prints when a boost::thread_interrupted escapes one of its threads during the
# C++ client's shutdown(): std::terminate, then abort (SIGABRT). Seen once in this suite's runs.
LIBROCKETMQ_SHUTDOWN_ABORT = "boost::thread_interrupted"


def read_cpp_result(stdout: str, returncode: int, stderr: str) -> dict[str, Any]:
    """What a run of tests/interop/_cpp_scenarios.py reports: its last JSON line. A run that printed
    its line before the C++ client's ``shutdown()`` and then died with librocketmq's known abort keeps
    that line, its ``shutdown`` saying so; any other death there makes the result fail."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise AssertionError(f"the C++ scenario printed nothing; stderr:\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if result.get("shutdown") == "pending":
        died = f"died in shutdown() with exit status {returncode}"
        if returncode == -signal.SIGABRT and LIBROCKETMQ_SHUTDOWN_ABORT in stderr:
            result["shutdown"] = f"{died} (librocketmq's known abort: {LIBROCKETMQ_SHUTDOWN_ABORT})"
        else:
            result["ok"] = False
            result["errors"].append(f"{died}; stderr:\n{stderr[-3000:]}")
    return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process *pid* so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
