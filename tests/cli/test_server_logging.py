"""The servers' logging: a rotated log file, JSON lines, the start-up summary and the periodic load line,
checked on real server processes; the formatters and the size option on their own."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq import __version__
from cometmq.cli._logs import JsonLineFormatter, OneLineFormatter, byte_size, setup_logging
from processes import TEST_BROKER_CONF, ServerProcess, broker_address, cometmq, start_standalone
from waiting import wait_until_blocking

from .cli_support import assert_one_line_error, invoke, pull_request, send

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) +\S+: ")
LOAD_LINE = re.compile(
    r"^load \((\d+) s\): in ([\d.]+) msg/s \((.+?)/s\), out ([\d.]+) msg/s \((.+?)/s\), connections (\d+), "
    r"commit log (.+?), disk (\d+ %|unknown), flush behind (.+)$"
)


def log_record(message: str, exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord("cometmq.test", logging.WARNING, __file__, 1, message, None, exc_info)


@given(st.text())
def test_a_text_line_stays_one_line_whatever_the_message(message: str) -> None:
    line = OneLineFormatter("%(levelname)s %(name)s: %(message)s").format(log_record(message))
    assert len(line.splitlines()) <= 1 and line.startswith("WARNING cometmq.test: ")


@given(st.text())
def test_a_json_line_is_one_object_on_one_line_holding_the_message(message: str) -> None:
    line = JsonLineFormatter().format(log_record(message))
    assert len(line.splitlines()) == 1
    entry = json.loads(line)
    assert entry["message"] == message
    assert (entry["level"], entry["logger"]) == ("WARNING", "cometmq.test")
    assert datetime.fromisoformat(entry["time"]).tzinfo is not None


def test_a_json_line_carries_the_exception_with_its_traceback() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        line = JsonLineFormatter().format(log_record("it failed", sys.exc_info()))
    assert len(line.splitlines()) == 1
    entry = json.loads(line)
    assert entry["message"] == "it failed"
    assert entry["exception"].startswith("Traceback (most recent call last):\n")
    assert entry["exception"].endswith("ValueError: bad\nvalue")


def test_log_sizes_take_binary_units() -> None:
    assert [byte_size(text) for text in ("0", "300", "512K", "512kib", "100MiB", "1G", "2 GB")] == [
        0,
        300,
        512 * 1024,
        512 * 1024,
        100 * 1024 * 1024,
        1 << 30,
        2 << 30,
    ]
    for text in ("", "ten", "1T", "-5", "1.5M"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(text)


def test_a_log_file_is_rotated_past_its_size_keeping_the_backups_asked_for(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "namesrv.log"  # its directory is made
    server = ServerProcess(
        [
            "namesrv",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "namesrv"),
            "--log-file",
            str(log_file),
            "--log-max-size",
            "150",  # about a line: the five lines it logs fill more than three files
            "--log-backups",
            "2",
        ],
        tmp_path / "stderr.log",
    )
    try:
        server.wait_ready("CometMQ namesrv ready:")
    finally:
        assert server.terminate() == 0
    files = [log_file, log_file.with_name("namesrv.log.1"), log_file.with_name("namesrv.log.2")]
    assert sorted(p.name for p in log_file.parent.iterdir()) == [f.name for f in files]
    assert all(0 < f.stat().st_size <= 150 for f in files)
    lines = [line for f in files for line in f.read_text().splitlines()]
    assert all(TEXT_LINE.match(line) for line in lines), lines
    assert any(line.endswith(": name server stopped") for line in lines)  # the newest file kept
    assert " INFO " not in server.log()  # stderr gets only warnings and errors


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level restored after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    for handler in root.handlers[:]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("json_lines", [False, True])
def test_a_lone_surrogate_is_written_escaped_to_the_log_file(
    tmp_path: Path, root_logger: logging.Logger, json_lines: bool
) -> None:
    for handler in root_logger.handlers[:]:  # pytest's: setup_logging installs its own on a bare root
        root_logger.removeHandler(handler)
    log_file = tmp_path / "server.log"
    setup_logging("INFO", log_file=str(log_file), json_lines=json_lines)
    logging.getLogger("cometmq.test").info("client %s said hello", "bad\ud800id")
    logging.getLogger("cometmq.test").info("the next record")
    lines = log_file.read_text().splitlines()
    assert len(lines) == 2
    assert "bad\\ud800id" in lines[0]  # escaped, by the file (text) or by JSON
    assert "the next record" in lines[1]


def test_a_log_file_that_cannot_be_written_is_one_error_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cometmq("namesrv", "--port", "0", "--log-file", str(blocker / "namesrv.log"))
    assert_one_line_error(result, f"cannot write the log file {blocker / 'namesrv.log'}")


@pytest.fixture(scope="module")
def json_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """A standalone logging JSON lines to a file, with a load line every second; it, its log file and its
    data directory."""
    base = tmp_path_factory.mktemp("logging")
    conf = base / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "loadSummaryInterval=1\n")
    log_file = base / "standalone.log"
    server, _ = start_standalone(base / "data", conf, "--log-file", str(log_file), "--log-format", "json")
    yield server, log_file, base / "data"
    server.terminate()


def json_entries(log_file: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in log_file.read_text().splitlines()]


def test_a_json_log_holds_one_object_a_line_and_stderr_only_warnings(
    json_standalone: tuple[ServerProcess, Path, Path],
) -> None:
    server, log_file, _ = json_standalone
    entries = json_entries(log_file)
    assert entries and all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    assert {entry["logger"] for entry in entries} >= {"cometmq.cli", "cometmq.broker", "cometmq.namesrv"}
    for line in server.log().splitlines():
        assert json.loads(line)["level"] in ("WARNING", "ERROR", "CRITICAL")


def test_the_start_up_summary_names_the_version_ports_and_settings(
    json_standalone: tuple[ServerProcess, Path, Path],
) -> None:
    server, log_file, data = json_standalone
    ready = re.search(r"namesrv (\S+), broker \S+ at (\S+),", server.ready_line)
    assert ready is not None, server.ready_line
    namesrv, broker = ready.groups()
    summary = [e["message"] for e in json_entries(log_file) if e["logger"] == "cometmq.cli"]
    assert summary[0].startswith(f"CometMQ {__version__} on Python ")
    assert f"name server at {namesrv}, ACL off, TLS off" in summary
    (placement,) = [line for line in summary if line.startswith("broker broker-a of cluster")]
    found = re.fullmatch(
        rf"broker broker-a of cluster DefaultCluster: ASYNC_MASTER \(brokerId 0\) at {broker}, "
        rf"listening on {broker}, HA port (\d+), name servers {namesrv}",
        placement,
    )
    assert found is not None and int(found.group(1)) > 0, placement  # the port the OS picked
    assert (
        f"broker broker-a: data in {data}, ASYNC_FLUSH, busy polling up to 1000 µs, adaptive, ACL off, "
        "TLS off, load summary every 1 s"
    ) in summary
    metrics = re.search(r", metrics (\S+?)(,|$)", server.ready_line)
    assert metrics is not None and summary[-1].startswith(f"web: metrics {metrics.group(1)}")


def test_the_load_line_follows_the_traffic(json_standalone: tuple[ServerProcess, Path, Path]) -> None:
    server, log_file, _ = json_standalone
    broker = broker_address(server)

    def load_lines() -> list[re.Match[str]]:
        messages = (e["message"] for e in json_entries(log_file) if e["logger"] == "cometmq.broker")
        return [found for message in messages if (found := LOAD_LINE.match(message))]

    for _ in range(5):
        send(broker, "LoadLineTopic", b"x" * 100)
    stored = wait_until_blocking(
        lambda: [line for line in load_lines() if float(line.group(2)) > 0],
        message="a load line with messages coming in",
    )[0]
    assert int(stored.group(1)) >= 1 and stored.group(7) != "0 B"  # the commit log holds them
    assert invoke(broker, pull_request("LoadLineTopic", 0, 0, group="LoadLineGroup")).code == 0
    wait_until_blocking(
        lambda: [line for line in load_lines() if float(line.group(4)) > 0],
        message="a load line with messages going out",
    )
