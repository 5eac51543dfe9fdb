"""Real etcd processes for the tests: one member or a three-member cluster on free loopback ports.

Each member has its own data directory and log file under the directory given; members are stopped
(SIGTERM) or killed (SIGKILL) by their pid and started again on the same ports and data.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

from processes import free_port
from waiting import wait_until_blocking

__all__ = ["ETCD", "EtcdServer"]

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


class _Member:
    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.data_dir = directory / "data"
        self.log_path = directory / "etcd.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str, state: str) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        client_url = f"http://{self.endpoint}"
        args = [
            ETCD,
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster={initial_cluster}",
            f"--initial-cluster-state={state}",
            "--initial-cluster-token=cometmq-test",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"etcd {self.name} exited with {self.proc.returncode}:\n{self.log_path.read_text()[-4000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as answer:
                return bool(json.load(answer).get("health") == "true")
        except OSError:
            return False

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def wait(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class EtcdServer:
    """``members`` etcd processes forming one cluster under *directory*."""

    def __init__(self, directory: Path, members: int = 1) -> None:
        self._members = [_Member(f"m{i}", directory / f"m{i}") for i in range(members)]
        self._initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self._members)

    @property
    def endpoints(self) -> list[str]:
        """Every member's client address, ``host:port``."""
        return [m.endpoint for m in self._members]

    def pid(self, index: int = 0) -> int:
        proc = self._members[index].proc
        assert proc is not None
        return proc.pid

    def start(self, timeout: float = 60.0) -> None:
        """Starts every member and waits until each answers healthy (which needs the cluster's quorum)."""
        for member in self._members:
            member.start(self._initial_cluster, "new")
        self._wait_healthy(self._members, timeout)

    def start_member(self, index: int, timeout: float = 60.0) -> None:
        """Starts a stopped or killed member again, on its ports and data directory."""
        member = self._members[index]
        member.start(self._initial_cluster, "existing")
        self._wait_healthy([member], timeout)

    def stop_member(self, index: int) -> None:
        member = self._members[index]
        member.signal(signal.SIGTERM)
        member.wait()

    def kill_member(self, index: int) -> None:
        member = self._members[index]
        member.signal(signal.SIGKILL)
        member.wait()

    def stop(self) -> None:
        for member in self._members:
            member.signal(signal.SIGTERM)
        for member in self._members:
            member.wait()

    def log(self, index: int = 0) -> str:
        return self._members[index].log_path.read_text(errors="replace")

    @staticmethod
    def _wait_healthy(members: list[_Member], timeout: float) -> None:
        wait_until_blocking(
            lambda: all(m.healthy() for m in members),
            message=f"etcd {[m.name for m in members]} healthy",
            timeout=timeout,
        )
