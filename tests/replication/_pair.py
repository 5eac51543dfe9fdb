"""A name server, a master and its slave, each a ``cometmq`` process with its own data directory."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Any

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.remoting import RemotingClient
from processes import ServerProcess
from waiting import wait_until

# The crash tests' self-checking messages and wire helpers are the one way these tests send and read.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import (
    create_topic,
    expected_body,
    make_message,
    parse_body,
    pull_request,
    read_queue,
    run_cpp,
    send,
)

__all__ = [
    "BrokerNode",
    "create_topic",
    "create_topic_on_both",
    "expected_body",
    "ha_status",
    "make_message",
    "parse_body",
    "read_queue",
    "replicated",
    "run_cpp",
    "send",
    "start_namesrv",
]

SEGMENT_SIZE = 1 << 20  # small commit-log segments: a test crosses several


def start_namesrv(tmp_path: Path) -> tuple[ServerProcess, str]:
    server = ServerProcess(["namesrv", "--host", "127.0.0.1", "--port", "0"], tmp_path / "namesrv.log")
    try:
        line = server.wait_ready("CometMQ namesrv ready:")
    except BaseException:
        server.terminate()
        raise
    return server, line.rsplit(" ", 1)[1]


class BrokerNode:
    """One broker process of group broker-a, started (and started again) on its own data directory."""

    def __init__(self, tmp_path: Path, name: str, namesrv: str, **settings: Any) -> None:
        self.name = name
        self.namesrv = namesrv
        self.data_dir = tmp_path / name
        self.conf = tmp_path / f"{name}.conf"
        self.log_path = tmp_path / f"{name}.log"
        self.settings: dict[str, Any] = {
            "brokerName": "broker-a",
            "mappedFileSizeCommitLog": SEGMENT_SIZE,
            "mappedFileSizeConsumeQueue": 60_000,
            **settings,
        }
        self.process: ServerProcess | None = None
        self.addr = ""
        self.ha_addr = ""  # a master's HA address
        self._log_start = 0

    def start(self) -> BrokerNode:
        self.conf.write_text("".join(f"{key}={value}\n" for key, value in self.settings.items()))
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = ["broker", "-n", self.namesrv, "-c", str(self.conf), "--data-dir", str(self.data_dir)]
        self.process = ServerProcess([*args, "--host", "127.0.0.1", "--port", "0"], self.log_path)
        try:
            line = self.process.wait_ready("CometMQ broker ready:")
        except BaseException:
            self.process.terminate()
            raise
        found = re.search(r" at (\S+) ", line)
        assert found is not None, line
        self.addr = found.group(1)
        ha = re.search(r"HA server listening on \S+:(\d+)", self.log())
        self.ha_addr = f"127.0.0.1:{ha.group(1)}" if ha else ""
        return self

    def log(self) -> str:
        """The broker's log since its last start."""
        with self.log_path.open("rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait(30)
        self.process.terminate()
        self.process = None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signum)

    def stop(self) -> None:
        if self.process is not None:
            self.process.proc.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self.process.terminate()
            self.process = None


async def ha_status(client: RemotingClient, addr: str) -> HARuntimeInfo:
    response = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_HA_STATUS), timeout=10)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return HARuntimeInfo.decode(response.body)


async def create_topic_on_both(
    client: RemotingClient, master: str, slave: str, topic: str, queues: int
) -> None:
    """Create *topic* on the master, and make sure the slave knows it: created there too while a slave
    takes admin writes, else copied by the slave's metadata synchronisation."""
    response = await create_topic(client, master, topic, queues)
    assert response.code == ResponseCode.SUCCESS, response.remark
    if (await create_topic(client, slave, topic, queues)).code == ResponseCode.SUCCESS:
        return

    async def slave_knows_topic() -> bool:
        probe = await client.invoke(slave, pull_request(topic, 0, 0), timeout=10)
        return probe.code != ResponseCode.TOPIC_NOT_EXIST

    await wait_until(slave_knows_topic, message=f"the slave to know topic {topic}", timeout=60)


async def replicated(client: RemotingClient, master: BrokerNode) -> bool:
    """Whether a slave has acknowledged everything the master holds."""
    info = await ha_status(client, master.addr)
    return bool(info.ha_connection_info) and all(
        link.slave_ack_offset == info.master_commit_log_max_offset for link in info.ha_connection_info
    )
