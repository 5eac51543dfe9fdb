"""One server process per data directory: a second ``cometmq standalone`` or ``cometmq broker`` on the
directory of a running one refuses to start, and a kill -9 leaves no lock behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from cometmq.protocol import ResponseCode
from cometmq.protocol.record import decode_records
from processes import broker_address, cometmq, start_standalone

from .cli_support import error_line, invoke, send

# The broker tests' raw protocol helpers, on the path cli_support put them on.
from _support import pull_request  # isort: skip

TOPIC = "LockTopic"


def pulled_bodies(broker: str) -> list[bytes]:
    response = invoke(broker, pull_request(TOPIC, 0, 0))
    assert response.code == ResponseCode.SUCCESS, response.remark
    return [record.body for record in decode_records(response.body, check_crc=True)]


def second_server_args(kind: str, data_dir: Path, namesrv: str, conf: Path) -> list[str]:
    ports = ["--namesrv-port", "0", "--broker-port", "0"] if kind == "standalone" else ["--port", "0"]
    at_namesrv = ["-n", namesrv] if kind == "broker" else []
    return [kind, *at_namesrv, "--data-dir", str(data_dir), "--host", "127.0.0.1", *ports, "-c", str(conf)]


@pytest.mark.parametrize("kind", ["standalone", "broker"])
def test_a_second_server_on_the_data_dir_refuses_and_the_first_keeps_serving(
    tmp_path: Path, broker_conf: Path, kind: str
) -> None:
    data_dir = tmp_path / "data"
    first, namesrv = start_standalone(data_dir, broker_conf)
    try:
        broker = broker_address(first)
        send(broker, TOPIC, b"before")
        # At WARNING the refusal is all the second server prints (no INFO line of its NameServer).
        args = second_server_args(kind, data_dir, namesrv, broker_conf)
        refused = cometmq(*args, "--log-level", "WARNING")
        line = error_line(refused)
        assert line.startswith(f"the data directory {data_dir} is in use by process {first.proc.pid}"), line
        assert first.proc.poll() is None
        send(broker, TOPIC, b"after")
        assert pulled_bodies(broker) == [b"before", b"after"]
    finally:
        assert first.terminate() == 0


def test_after_a_kill_9_a_new_server_starts_on_the_data_dir(tmp_path: Path, broker_conf: Path) -> None:
    data_dir = tmp_path / "data"
    first, _ = start_standalone(data_dir, broker_conf)
    try:
        send(broker_address(first), TOPIC, b"acknowledged")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    finally:
        first.terminate()
    assert (data_dir / "lock").read_text() == f"{first.proc.pid}\n"  # a stale pid, but no lock held
    second, _ = start_standalone(data_dir, broker_conf)
    try:
        assert (data_dir / "lock").read_text() == f"{second.proc.pid}\n"
        assert pulled_bodies(broker_address(second)) == [b"acknowledged"]
    finally:
        assert second.terminate() == 0
