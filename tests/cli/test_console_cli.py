"""``cometmq message send|consume``, ``topic status`` and ``topic list --system`` against a real
``cometmq standalone`` process."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import re
import signal
import subprocess
import threading
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.cli._console import READER_GROUP, one_line
from cometmq.client import AdminClient
from cometmq.client.admin import ConsumeProgress
from processes import COMMAND, ServerProcess, broker_address, cometmq, subprocess_env
from waiting import next_millisecond, wait_until_blocking

from .cli_support import assert_one_line_error, create_topic, error_line, send

SENT = re.compile(r"sent (\S+) to (\S+)@broker-a:(\d+) offset (\d+)")


def run_with_input(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*COMMAND, *args], input=stdin, capture_output=True, timeout=60, env=subprocess_env(), check=False
    )


def consume(namesrv: str, topic: str, *options: str) -> list[str]:
    """The lines a consume without --follow printed; checks its summary on stderr."""
    result = cometmq("message", "consume", "-t", topic, "-n", namesrv, *options)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert result.stderr.splitlines()[-1] == f"printed {len(lines)} message{'' if len(lines) == 1 else 's'}"
    return lines


def running_consume(namesrv: str, topic: str, *options: str) -> subprocess.Popen[str]:
    """``cometmq message consume`` of ``topic`` started in the background, its output piped."""
    return subprocess.Popen(
        [*COMMAND, "message", "consume", "-t", topic, "-n", namesrv, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )


def progress(namesrv: str, group: str) -> ConsumeProgress:
    async def ask() -> ConsumeProgress:
        async with AdminClient(namesrv) as admin:
            return await admin.consume_progress(group)

    return asyncio.run(ask())


def committed(namesrv: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic``, by queue id."""
    return {q.queue_id: q.consumer_offset for q in progress(namesrv, group).queues if q.topic == topic}


def test_send_a_body_from_the_arguments(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleArgs")
    options = ["--tags", "greeting", "--keys", "k1 k2", "-p", "color=red", "-p", "size=L"]
    result = cometmq("message", "send", "-t", "ConsoleArgs", "hello world", *options, "-n", namesrv_addr)
    assert result.returncode == 0, result.stderr
    found = SENT.fullmatch(result.stdout.strip())
    assert found is not None, result.stdout
    assert found.group(2, 3, 4) == ("ConsoleArgs", "0", "0")

    [line] = consume(namesrv_addr, "ConsoleArgs", "--format", "json")
    message = json.loads(line)
    assert message["msgId"] == found.group(1)
    assert (message["body"], message["bodyEncoding"]) == ("hello world", "utf-8")
    assert message["tags"] == "greeting" and message["keys"] == ["k1", "k2"]
    assert message["properties"]["color"] == "red" and message["properties"]["size"] == "L"


def test_send_timer_messages_with_a_delay_or_a_delivery_time(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleTimer")
    before = int(datetime.datetime.now().timestamp() * 1000)
    delayed = cometmq("message", "send", "-t", "ConsoleTimer", "delayed", "--delay", "1s", "-n", namesrv_addr)
    assert delayed.returncode == 0, delayed.stderr
    at = datetime.datetime.fromtimestamp((before + 1500) / 1000).isoformat(timespec="milliseconds")
    timed = cometmq("message", "send", "-t", "ConsoleTimer", "timed", "--deliver-at", at, "-n", namesrv_addr)
    assert timed.returncode == 0, timed.stderr

    lines = wait_until_blocking(
        lambda: len(found := consume(namesrv_addr, "ConsoleTimer", "--format", "json")) == 2 and found,
        message="both timer messages delivered",
    )
    got = {m["body"]: m for m in map(json.loads, lines)}
    assert got["delayed"]["storeTimestamp"] >= before + 1000
    # --delay asks the broker's clock (TIMER_DELAY_MS), not the sender's, for a time.
    assert got["delayed"]["properties"]["TIMER_DELAY_MS"] == "1000"
    assert "TIMER_DELIVER_MS" not in got["delayed"]["properties"]
    assert got["timed"]["storeTimestamp"] >= before + 1500
    assert int(got["timed"]["properties"]["TIMER_DELIVER_MS"]) == before + 1500

    bad = cometmq("message", "send", "-t", "ConsoleTimer", "x", "--delay", "soon", "-n", namesrv_addr)
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[-1].endswith(
        "argument --delay: 'soon' is not a delay such as 1500ms, 30s, 5m, 2h or 1d"
    )


def test_send_a_file_as_one_message(namesrv_addr: str, tmp_path: Path) -> None:
    create_topic(namesrv_addr, "ConsoleFile")
    payload = b"line one\nline two\n\xff\x00 binary\\"
    (tmp_path / "payload.bin").write_bytes(payload)
    result = cometmq(
        "message", "send", "-t", "ConsoleFile", "--file", str(tmp_path / "payload.bin"), "-n", namesrv_addr
    )
    assert result.returncode == 0, result.stderr
    assert SENT.fullmatch(result.stdout.strip()), result.stdout

    [as_json] = consume(namesrv_addr, "ConsoleFile", "--format", "json")
    message = json.loads(as_json)
    assert message["bodyEncoding"] == "base64" and base64.b64decode(message["body"]) == payload
    # As text: one line, every byte that is not printable UTF-8 escaped, and the backslash too.
    assert consume(namesrv_addr, "ConsoleFile") == ["line one\\nline two\\n\\xff\\x00 binary\\\\"]


def test_send_one_message_per_line_of_stdin(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleLines")
    result = run_with_input(
        "message", "send", "-t", "ConsoleLines", "-n", namesrv_addr, stdin=b"first\nsecond\r\n\nthird"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert [SENT.fullmatch(line).group(4) for line in lines] == ["0", "1", "2"]  # type: ignore[union-attr]
    assert consume(namesrv_addr, "ConsoleLines") == ["first", "second", "third"]

    quiet = run_with_input("message", "send", "-t", "ConsoleLines", "-q", "-n", namesrv_addr, stdin=b"4\n5\n")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.decode() == "sent 2 messages\n"
    assert consume(namesrv_addr, "ConsoleLines")[-2:] == ["4", "5"]


def test_send_from_an_empty_stdin_says_nothing_was_sent(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleEmpty")
    result = run_with_input("message", "send", "-t", "ConsoleEmpty", "-n", namesrv_addr, stdin=b"")
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == (b"", b"sent 0 messages (stdin was empty)\n")


def test_a_failed_send_exits_non_zero(namesrv_addr: str) -> None:
    assert_one_line_error(
        cometmq("message", "send", "-t", "SCHEDULE_TOPIC_XXXX", "x", "-n", namesrv_addr),
        "system topic clients may not send to",
    )
    # KEYS is RocketMQ's: every line is refused, each is reported, and the command fails.
    result = run_with_input(
        "message", "send", "-t", "ConsoleLines", "-p", "KEYS=k", "-n", namesrv_addr, stdin=b"a\nb\n"
    )
    assert result.returncode == 1 and result.stdout == b""
    errors = result.stderr.decode().splitlines()
    assert errors[0].startswith("cometmq: line 1 was not sent: ") and "reserved" in errors[0]
    assert errors[1].startswith("cometmq: line 2 was not sent: ")
    assert errors[2] == "cometmq: error: 2 of 2 messages were not sent"


def test_consume_without_a_group_reads_from_a_start_point_and_commits_nothing(
    standalone: tuple[ServerProcess, str],
) -> None:
    server, namesrv = standalone
    create_topic(namesrv, "ConsoleRead", queues=2)
    addr = broker_address(server)
    for body, queue in ((b"a0", 0), (b"b0", 1), (b"a1", 0)):
        send(addr, "ConsoleRead", body, queue, TAGS="old")
    since = next_millisecond()
    send(addr, "ConsoleRead", b"b1", 1, TAGS="new")

    assert sorted(consume(namesrv, "ConsoleRead")) == ["a0", "a1", "b0", "b1"]  # earliest by default
    assert sorted(consume(namesrv, "ConsoleRead", "--from", "earliest")) == ["a0", "a1", "b0", "b1"]
    assert consume(namesrv, "ConsoleRead", "--from", "latest") == []
    assert consume(namesrv, "ConsoleRead", "--from", str(since)) == ["b1"]
    iso = datetime.datetime.fromtimestamp(since / 1000).isoformat(timespec="milliseconds")
    assert consume(namesrv, "ConsoleRead", "--from", iso) == ["b1"]
    assert sorted(consume(namesrv, "ConsoleRead", "--tags", "old")) == ["a0", "a1", "b0"]
    assert len(consume(namesrv, "ConsoleRead", "--max", "3")) == 3
    assert committed(namesrv, READER_GROUP, "ConsoleRead") == {}


def test_consume_with_a_group_commits_what_it_printed(standalone: tuple[ServerProcess, str]) -> None:
    server, namesrv = standalone
    create_topic(namesrv, "ConsoleGroup")
    addr = broker_address(server)
    for body in (b"m0", b"m1", b"m2"):
        send(addr, "ConsoleGroup", body)

    # A group new to the topic starts where --from says, even on a queue whose first message is at 0.
    assert consume(namesrv, "ConsoleGroup", "-g", "GID_console_late", "--from", "latest") == []
    assert committed(namesrv, "GID_console_late", "ConsoleGroup") == {0: 3}

    assert consume(namesrv, "ConsoleGroup", "-g", "GID_console", "--max", "2") == ["m0", "m1"]
    assert committed(namesrv, "GID_console", "ConsoleGroup") == {0: 2}
    # Its committed offsets win over --from, with a note saying so.
    again = cometmq(
        "message", "consume", "-t", "ConsoleGroup", "-g", "GID_console", "--from", "earliest", "-n", namesrv
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == "m2\n"
    assert "group GID_console continues from its committed offsets on ConsoleGroup" in again.stderr
    assert committed(namesrv, "GID_console", "ConsoleGroup") == {0: 3}

    since = next_millisecond()
    send(addr, "ConsoleGroup", b"m3")
    assert consume(namesrv, "ConsoleGroup", "-g", "GID_console_timed", "--from", str(since)) == ["m3"]
    assert committed(namesrv, "GID_console_timed", "ConsoleGroup") == {0: 4}


def test_follow_prints_a_message_sent_after_it_started(standalone: tuple[ServerProcess, str]) -> None:
    server, namesrv = standalone
    create_topic(namesrv, "ConsoleFollow")
    addr = broker_address(server)
    send(addr, "ConsoleFollow", b"before")
    proc = running_consume(namesrv, "ConsoleFollow", "-g", "GID_follow", "--follow")
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        # Once the member is online its start (the end of the queue, by default) is committed.
        wait_until_blocking(
            lambda: cometmq("group", "consumers", "GID_follow", "-n", namesrv).stdout.startswith("CLIENT_ID"),
            message="the console consumer online",
        )
        send(addr, "ConsoleFollow", b"after")
        wait_until_blocking(lambda: lines, message="the message sent after the start printed")
        assert lines == ["after\n"]
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the consumer commits and ends normally
        _, stderr = proc.communicate(timeout=60)
        reader.join(timeout=60)
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[-1] == "printed 1 message"
    assert committed(namesrv, "GID_follow", "ConsoleFollow") == {0: 2}


def test_a_reader_that_goes_away_ends_the_read(standalone: tuple[ServerProcess, str]) -> None:
    server, namesrv = standalone
    create_topic(namesrv, "ConsoleHead")
    addr = broker_address(server)
    send(addr, "ConsoleHead", b"first")
    proc = running_consume(namesrv, "ConsoleHead", "--follow", "--from", "earliest")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "first\n"
        proc.stdout.close()  # as `| head -1` does
        send(addr, "ConsoleHead", b"second")  # its line finds the pipe closed
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert stderr.splitlines() == ["printed 1 message"]


def test_consume_of_a_topic_that_does_not_exist(namesrv_addr: str) -> None:
    assert error_line(cometmq("message", "consume", "-t", "ConsoleNope", "-n", namesrv_addr)) == (
        "topic ConsoleNope has no readable queue (does it exist?)"
    )


def test_topic_status_shows_each_queue(standalone: tuple[ServerProcess, str]) -> None:
    server, namesrv = standalone
    create_topic(namesrv, "ConsoleStatus", queues=3)
    addr = broker_address(server)
    for queue in (0, 0, 1):
        send(addr, "ConsoleStatus", b"x", queue)
    result = cometmq("topic", "status", "ConsoleStatus", "-n", namesrv)
    assert result.returncode == 0, result.stderr
    header, *rows, total = result.stdout.strip().splitlines()
    assert header.split() == ["BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES", "LAST_STORE_TIME"]
    cells = [row.split() for row in rows]
    assert [c[:5] for c in cells] == [
        ["broker-a", "0", "0", "2", "2"],
        ["broker-a", "1", "0", "1", "1"],
        ["broker-a", "2", "0", "0", "0"],
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", " ".join(cells[0][5:]))
    assert cells[2][5:] == ["-"]
    assert total == "3 messages in 3 queues"

    as_json = json.loads(cometmq("topic", "status", "ConsoleStatus", "--json", "-n", namesrv).stdout)
    assert [(q["queueId"], q["minOffset"], q["maxOffset"], q["messages"]) for q in as_json] == [
        (0, 0, 2, 2),
        (1, 0, 1, 1),
        (2, 0, 0, 0),
    ]
    assert as_json[0]["lastStoreTimestamp"] > 0 and as_json[2]["lastStoreTimestamp"] == 0


def test_topic_list_hides_system_topics_unless_asked(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleListed")
    # A member of a group makes the group's retry topic.
    assert consume(namesrv_addr, "ConsoleListed", "-g", "GID_listed") == []

    plain = cometmq("topic", "list", "-n", namesrv_addr).stdout.split()
    assert "ConsoleListed" in plain
    for system in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "%RETRY%GID_listed"):
        assert system not in plain
    assert "DefaultCluster" not in plain and "broker-a" not in plain

    listed = cometmq("topic", "list", "--system", "-n", namesrv_addr)
    header, *rows = listed.stdout.strip().splitlines()
    assert header.split() == ["TOPIC", "KIND", "ATTRIBUTES"]
    kinds = dict(row.split()[:2] for row in rows)
    assert kinds["ConsoleListed"] == "user"
    assert kinds["TBW102"] == kinds["SCHEDULE_TOPIC_XXXX"] == kinds["RMQ_SYS_TRANS_HALF_TOPIC"] == "system"
    assert kinds["%RETRY%GID_listed"] == "retry"
    assert kinds["DefaultCluster"] == kinds["broker-a"] == "cluster"


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (b"plain text", "plain text"),
        ("grüße ✓".encode(), "grüße ✓"),
        (b"two\nlines\r\n\ttab", "two\\nlines\\r\\n\\ttab"),
        (b"back\\slash", "back\\\\slash"),
        (b"\x1b[31mred\x7f", "\\x1b[31mred\\x7f"),
        (b"not utf-8: \xff\xc3", "not utf-8: \\xff\\xc3"),
        ("one\u2028two".encode(), "one\\u2028two"),
    ],
)
def test_one_line_bodies(body: bytes, line: str) -> None:
    assert one_line(body) == line


@given(st.binary() | st.text().map(str.encode))
def test_any_body_prints_as_one_line_of_text(body: bytes) -> None:
    line = one_line(body)
    assert len(line.splitlines()) <= 1
    assert not [ch for ch in line if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")]
    line.encode("utf-8")


def test_a_file_larger_than_a_message_is_refused_without_sending(namesrv_addr: str, tmp_path: Path) -> None:
    create_topic(namesrv_addr, "ConsoleHuge")
    limit = 4 * 1024 * 1024  # the producer's max_message_size
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as file:
        file.truncate(limit + 1)
    for path in (str(huge), "/dev/zero"):  # a regular file by its size; a device by what it gives
        result = cometmq("message", "send", "-t", "ConsoleHuge", "--file", path, "-n", namesrv_addr)
        assert error_line(result) == f"{path} holds more than the {limit} bytes a message body may have"
    assert consume(namesrv_addr, "ConsoleHuge") == []


def test_send_with_its_reader_gone_still_sends_and_succeeds(namesrv_addr: str) -> None:
    create_topic(namesrv_addr, "ConsoleSendHead")
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` once it has its line, before anything is printed
    try:
        for args, stdin in ((["one"], b""), ([], b"two\nthree\n"), (["--quiet"], b"four\n")):
            result = subprocess.run(
                [*COMMAND, "message", "send", "-t", "ConsoleSendHead", "-n", namesrv_addr, *args],
                input=stdin,
                stdout=write_end,
                stderr=subprocess.PIPE,
                timeout=60,
                env=subprocess_env(),
                check=False,
            )
            assert (result.returncode, result.stderr) == (0, b""), result.stderr
    finally:
        os.close(write_end)
    assert sorted(consume(namesrv_addr, "ConsoleSendHead")) == ["four", "one", "three", "two"]
