"""Helpers for the crash tests: a standalone server that can be killed with SIGKILL and started again
on the same data directory, self-checking messages, and reading queues back over the wire."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id, decode_records
from cometmq.remoting import RemotingClient
from processes import ServerProcess, broker_address, read_cpp_result, start_standalone

# The broker tests' raw protocol helpers are the one way the tests build sends and pulls.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import commit_request, create_topic, pull_request, query_offset_request, send_request

__all__ = [
    "CPP_SCENARIOS",
    "CrashableServer",
    "Sent",
    "broker_conf",
    "commit_offset",
    "create_topic",
    "expected_body",
    "make_message",
    "parse_body",
    "properties_of",
    "pull_request",
    "query_offset",
    "read_queue",
    "run_cpp",
    "send",
]

CPP_SCENARIOS = Path(__file__).resolve().parents[1] / "interop" / "_cpp_scenarios.py"
_READY = "CometMQ standalone ready:"
# Printable and NUL-free: the C++ client reads bodies as C strings.
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"


def broker_conf(path: Path, **settings: object) -> Path:
    """Write a broker.conf with the given RocketMQ keys; returns its path."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


class CrashableServer:
    """``cometmq standalone`` on a data directory that outlives the process: start, kill -9 or
    stop, start again. Every start uses fresh ports, like a restarted machine would."""

    def __init__(self, data_dir: Path, conf: Path) -> None:
        self.data_dir = data_dir
        self.conf = conf
        self.process: ServerProcess | None = None
        self.namesrv = ""
        self.broker = ""
        self._log_start = 0

    def start(self) -> None:
        log_path = self.data_dir.parent / f"{self.data_dir.name}-standalone.log"
        self._log_start = log_path.stat().st_size if log_path.exists() else 0
        self.process, self.namesrv = start_standalone(self.data_dir, self.conf)
        self.broker = broker_address(self.process)

    def kill9(self) -> None:
        """SIGKILL: no signal handler, no flush, no checkpoint, no offsets written."""
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait(30)
        assert self.process.terminate() == -signal.SIGKILL
        self.process = None

    def stop(self) -> int:
        """SIGTERM: the clean shutdown (flush, checkpoint, offsets, remove ``abort``). The exit
        status, 0 after a clean shutdown (and if not running)."""
        if self.process is None:
            return 0
        code = self.process.terminate()
        self.process = None
        return code

    def log(self) -> str:
        """stderr of the server since the last start."""
        log_path = self.data_dir.parent / f"{self.data_dir.name}-standalone.log"
        with log_path.open("rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")


# -- self-checking messages --------------------------------------------------------------------


def expected_body(producer: int, seq: int) -> bytes:
    """The body producer *producer* sends as its message *seq*: a head naming both and the CRC of
    a random payload of 16 B .. 4 KiB, so a body proves by itself that it is intact."""
    rng = random.Random(producer * 1_000_003 + seq)
    payload = "".join(rng.choices(_ALPHABET, k=rng.randrange(16, 4096))).encode()
    return f"P{producer:03d}S{seq:07d}C{zlib.crc32(payload):08x}|".encode() + payload


def parse_body(body: bytes) -> tuple[int, int]:
    """(producer, seq) of a body made by ``expected_body``; AssertionError if it is damaged."""
    head, sep, payload = body.partition(b"|")
    found = re.fullmatch(rb"P(\d{3})S(\d{7})C([0-9a-f]{8})", head)
    assert sep and found is not None, f"not one of our bodies: {body[:40]!r}"
    assert int(found.group(3), 16) == zlib.crc32(payload), f"damaged body {head!r}"
    return int(found.group(1)), int(found.group(2))


def make_message(producer: int, seq: int) -> tuple[bytes, dict[str, str]]:
    """Body and the properties the test sets (tags, keys and one user property)."""
    properties = {
        "TAGS": f"tag{seq % 3}",
        "KEYS": f"key-{producer}-{seq}",
        "origin": f"producer-{producer}",
    }
    return expected_body(producer, seq), properties


@dataclass(frozen=True, slots=True)
class Sent:
    """A send the broker answered with SUCCESS."""

    queue_id: int
    queue_offset: int
    msg_id: str
    commitlog_offset: int


async def send(
    client: RemotingClient, broker: str, topic: str, queue_id: int, body: bytes, properties: dict[str, str]
) -> tuple[RemotingCommand, Sent | None]:
    """One SEND_MESSAGE_V2; the answer, and what it acknowledged if it is SUCCESS."""
    response = await client.invoke(broker, send_request(topic, body, queue_id, properties), timeout=10)
    if response.code != ResponseCode.SUCCESS:
        return response, None
    fields = response.ext_fields
    msg_id = fields["msgId"]
    return response, Sent(
        int(fields["queueId"]), int(fields["queueOffset"]), msg_id, decode_offset_msg_id(msg_id)[2]
    )


async def read_queue(client: RemotingClient, broker: str, topic: str, queue_id: int) -> list[DecodedRecord]:
    """Every record of a queue, pulled from offset 0 to its max offset through a ``*``
    subscription. Each answer must account for every byte: every record CRC-checked, no filler."""
    records: list[DecodedRecord] = []
    offset = 0
    deadline = time.monotonic() + 30
    while True:
        response = await client.invoke(broker, pull_request(topic, queue_id, offset), timeout=10)
        fields = response.ext_fields
        if response.code != ResponseCode.SUCCESS:
            assert response.code == ResponseCode.PULL_NOT_FOUND, (response.code, response.remark)
            if int(fields["nextBeginOffset"]) == offset < int(fields["maxOffset"]):
                # A broker in failover mode serves records once its in-sync replicas acknowledged them
                # (its confirmed offset): the tail stored last comes a moment later.
                assert time.monotonic() < deadline, f"records past offset {offset} never served: {fields}"
                await asyncio.sleep(0.05)
                continue
            assert int(fields["nextBeginOffset"]) == offset == int(fields["maxOffset"]), fields
            return records
        body = response.body
        got = decode_records(body, check_crc=True)
        assert sum(r.total_size for r in got) == len(body), "the pull answer holds bytes that are no record"
        following = int(fields["nextBeginOffset"])
        assert len(got) == following - offset, (len(got), offset, following)
        records += got
        offset = following


def properties_of(record: DecodedRecord) -> dict[str, str]:
    return decode_properties(record.properties)


async def commit_offset(
    client: RemotingClient, broker: str, group: str, topic: str, queue_id: int, offset: int
) -> None:
    response = await client.invoke(broker, commit_request(group, topic, queue_id, offset), timeout=10)
    assert response.code == ResponseCode.SUCCESS, response.remark


async def query_offset(client: RemotingClient, broker: str, group: str, topic: str, queue_id: int) -> int:
    response = await client.invoke(broker, query_offset_request(group, topic, queue_id), timeout=10)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


def run_cpp(scenario: str, namesrv: str, topic: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    """One scenario of the official C++ client (tests/interop/_cpp_scenarios.py) in its own process."""
    proc = subprocess.run(
        [sys.executable, str(CPP_SCENARIOS), scenario, "--namesrv", namesrv, "--topic", topic, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    assert result["ok"], f"{scenario} failed: {result['errors']}\nstderr:\n{proc.stderr[-3000:]}"
    return result
