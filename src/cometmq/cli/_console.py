"""``cometmq message send|consume``: a console producer and consumer, as Kafka's
kafka-console-producer and kafka-console-consumer are to Kafka."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from cometmq.cli._admin import add_namesrv_option, whole_number
from cometmq.cli._connect import add_connect_options, security
from cometmq.cli._loop import run_async
from cometmq.cli._message import parse_time
from cometmq.client import AdminClient, LitePullConsumer, Message, MessageQueue, Producer, SendStatus
from cometmq.client.message import ReceivedMessage, SendResult
from cometmq.console import counted
from cometmq.errors import CometMQError
from cometmq.protocol.naming import TOOLS_CONSUMER_GROUP
from cometmq.protocol.subscription import SUB_ALL, parse_tag_expression

DEFAULT_PRODUCER_GROUP: Final = "cometmq-console-producer"
# The group of a read without --group: the one RocketMQ's own tools pull with; nothing is committed for it.
READER_GROUP: Final = TOOLS_CONSUMER_GROUP
# Sends from stdin kept in flight at once: the results are printed in input order all the same.
SEND_WINDOW: Final = 32
# How often a consumer with --group commits what it printed while it runs (and once at the end).
COMMIT_INTERVAL_S: Final = 5.0
# How long one poll waits before the loop looks again at Ctrl-C and at the queues' ends.
POLL_S: Final = 0.5

# Characters a one-line body shows escaped: the backslash (so that escapes are unambiguous), C0 and
# C1 control characters and DEL, the Unicode line and paragraph separators, and the surrogates that
# stand for bytes that are not UTF-8.
_ESCAPES: Final = {
    0x5C: "\\\\",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    **{c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x0A, 0x0D, 0x09)},
    **{0xDC00 + b: f"\\x{b:02x}" for b in range(0x80, 0x100)},
}


def _connection_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_namesrv_option(common)
    add_connect_options(common)
    common.add_argument(
        "--timeout", type=float, default=5.0, metavar="SECONDS", help="per-request timeout (default: 5)"
    )
    return common


def _property(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


_DURATION_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str) -> int:
    """A delay on the command line: a whole number with a unit (1500ms, 30s, 5m, 2h, 1d) → ms."""
    value = text.strip().lower()
    for unit in sorted(_DURATION_UNITS, key=len, reverse=True):
        if value.endswith(unit) and value[: -len(unit)].isdigit():
            return int(value[: -len(unit)]) * _DURATION_UNITS[unit]
    raise argparse.ArgumentTypeError(f"{text!r} is not a delay such as 1500ms, 30s, 5m, 2h or 1d")


def _start_point(text: str) -> str | int:
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return value
    return parse_time(text)


def add_console_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    send = commands.add_parser(
        "send",
        parents=[_connection_options()],
        help="send messages: BODY, a file, or one per line of standard input",
        description=(
            "Send messages to TOPIC, as a producer of --group: BODY as one message, or the bytes of "
            "--file as one message, or else one message per line of standard input (empty lines are "
            "skipped: RocketMQ refuses an empty body). Prints each send's message id, queue and offset, "
            "or with --quiet only how many were sent. Exits with status 1 when a send failed."
        ),
    )
    send.set_defaults(func=_run_send)
    send.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="the topic to send to")
    send.add_argument("--tags", metavar="TAG", help="the message's tag (consumers filter on it)")
    send.add_argument(
        "--keys", "-k", metavar="KEYS", help="keys the broker indexes for 'message query', space-separated"
    )
    send.add_argument(
        "--property",
        "-p",
        dest="properties",
        type=_property,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a user property (repeat for more)",
    )
    send.add_argument(
        "--group",
        default=DEFAULT_PRODUCER_GROUP,
        metavar="PID",
        help=f"the producer group (default {DEFAULT_PRODUCER_GROUP})",
    )
    send.add_argument("--quiet", "-q", action="store_true", help="print only the number of messages sent")
    when = send.add_mutually_exclusive_group()
    when.add_argument(
        "--deliver-at",
        type=parse_time,
        metavar="TIME",
        help="a timer message: consumers get it at TIME (epoch ms or ISO-8601, local time unless it "
        "names a zone), at most the broker's timerMaxDelaySec ahead (3 days by default)",
    )
    when.add_argument(
        "--delay",
        type=_duration_ms,
        metavar="DURATION",
        help="a timer message: consumers get each message DURATION after the broker stores it (1500ms, "
        "30s, 5m, 2h)",
    )
    source = send.add_mutually_exclusive_group()
    source.add_argument("body", nargs="?", metavar="BODY", help="the body of one message (UTF-8)")
    source.add_argument(
        "--file", "-f", type=Path, metavar="FILE", help="send the bytes of FILE as one message"
    )

    consume = commands.add_parser(
        "consume",
        parents=[_connection_options()],
        help="print the messages of a topic",
        description=(
            "Print the messages of TOPIC, one per line. Without --group it only reads: nothing is "
            f"committed (the pulls name the group {READER_GROUP}, as RocketMQ's tools do). With "
            "--group it consumes as a member of GROUP, sharing the topic's queues with the group's "
            "other members, continues where the group's committed offsets are, and commits what it "
            "printed. Without --follow it stops at the end the queues had when it started; with "
            "--follow it waits for new messages until Ctrl-C. Prints how many messages it printed "
            "on standard error at the end."
        ),
    )
    consume.set_defaults(func=_run_consume)
    consume.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="the topic to read")
    consume.add_argument(
        "--group", "-g", metavar="GROUP", help="consume as this consumer group, and commit its offsets"
    )
    consume.add_argument(
        "--from",
        dest="start",
        type=_start_point,
        metavar="WHERE",
        help=(
            "where to start: earliest, latest, or a time (epoch ms or ISO-8601, local time unless it "
            "names a zone: the first message stored at or after it); default earliest, or latest with "
            "--follow. With --group it applies only when the group has committed no offset on the "
            "topic yet"
        ),
    )
    consume.add_argument("--follow", "-F", action="store_true", help="keep waiting for new messages")
    consume.add_argument("--max", type=whole_number(1), metavar="N", help="stop after N messages")
    consume.add_argument(
        "--tags",
        default=SUB_ALL,
        metavar="EXPR",
        help="only messages with one of these tags: TagA || TagB (default *, every message)",
    )
    consume.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help=(
            "text: each body on one line, UTF-8 with the backslash, control characters and bytes "
            "that are not UTF-8 escaped; json: one object per line with the message's ids, queue, "
            "offset, tags, keys, properties, times and body (text, or base64 when it is not UTF-8)"
        ),
    )


# sending -----------------------------------------------------------------------------------------


def _run_send(args: argparse.Namespace) -> int:
    return run_async(_send(args))


async def _send(args: argparse.Namespace) -> int:
    def message(body: bytes) -> Message:
        return Message(
            args.topic,
            body,
            tags=args.tags,
            keys=args.keys,
            properties=dict(args.properties),
            deliver_at_ms=args.deliver_at,
            delay_ms=args.delay,
        )

    async with Producer(
        args.group, args.namesrv, send_timeout=args.timeout, **security(args).client_options()
    ) as producer:
        if args.body is not None or args.file is not None:
            if args.body is not None:
                body = args.body.encode()
            else:
                body = _read_body(args.file, producer.max_message_size)
            result = await producer.send(message(body))
            _print_result(_sent_line(result) if not args.quiet else "sent 1 message")
            return 0
        sent = failed = 0
        window: deque[tuple[int, asyncio.Task[SendResult]]] = deque()

        async def settle() -> None:
            nonlocal sent, failed
            line, task = window.popleft()
            try:
                result = await task
            except CometMQError as exc:
                failed += 1
                print(f"cometmq: line {line} was not sent: {exc}", file=sys.stderr, flush=True)
                return
            sent += 1
            if not args.quiet:
                _print_result(_sent_line(result))

        if sys.stdin.isatty():
            print("type one message per line; Ctrl-D ends", file=sys.stderr)
        async for number, body in _stdin_lines():
            window.append((number, asyncio.ensure_future(producer.send(message(body)))))
            if len(window) >= SEND_WINDOW:
                await settle()
        while window:
            await settle()
    if args.quiet:
        _print_result(f"sent {counted(sent, 'message')}")
    elif not sent and not failed:
        print("sent 0 messages (stdin was empty)", file=sys.stderr)
    if failed:
        raise CometMQError(f"{failed} of {counted(sent + failed, 'message')} were not sent")
    return 0


def _read_body(path: Path, limit: int) -> bytes:
    """The bytes of *path*, refused when more than *limit*: a regular file by its size before reading,
    anything else (a pipe, a device) once *limit* + 1 bytes are read."""
    too_big = f"{path} holds more than the {limit} bytes a message body may have"
    with path.open("rb") as file:
        info = os.fstat(file.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise CometMQError(too_big)
        body = file.read(limit + 1)
    if len(body) > limit:
        raise CometMQError(too_big)
    return body


def _print_result(line: str) -> None:
    """Print *line*; a reader that went away (``| head``) ends the printing, not the sends."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        _discard_stdout()


def _discard_stdout() -> None:
    """Send later writes to standard output, the interpreter's last flush among them, nowhere: its
    reader went away."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


async def _stdin_lines() -> AsyncIterator[tuple[int, bytes]]:
    """(line number, line) for every non-empty line of standard input, without its line end. A
    daemon thread reads them (sends in flight get their answers while the input waits, and a read
    that never ends does not hold up the exit), at most SEND_WINDOW lines ahead."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()
    room = threading.Semaphore(SEND_WINDOW)

    def read() -> None:
        try:
            for line in sys.stdin.buffer:
                room.acquire()
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)
        except RuntimeError:  # the loop closed: the command ended without the rest of the input
            return

    threading.Thread(target=read, name="stdin", daemon=True).start()
    number = 0
    while (line := await lines.get()) is not None:
        room.release()
        number += 1
        body = line.rstrip(b"\n").rstrip(b"\r")
        if body:
            yield number, body


def _sent_line(result: SendResult) -> str:
    status = "" if result.status is SendStatus.SEND_OK else f" ({result.status.name})"
    return f"sent {result.msg_id} to {result.queue} offset {result.queue_offset}{status}"


# consuming ---------------------------------------------------------------------------------------


def _run_consume(args: argparse.Namespace) -> int:
    return run_async(_consume(args))


async def _consume(args: argparse.Namespace) -> int:
    start = args.start if args.start is not None else ("latest" if args.follow else "earliest")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)  # Ctrl-C ends a read as --max does
    try:
        async with AdminClient(
            args.namesrv, timeout=args.timeout, **security(args).client_options()
        ) as admin:
            queues = await admin.readable_queues(args.topic)
            if not queues:
                raise CometMQError(f"topic {args.topic} has no readable queue (does it exist?)")
            consumer = _consumer(args, args.group or READER_GROUP)
            # Both set up before the start: it joins the group, or pulls the queues from there.
            if args.group is not None:
                await _start_group(admin, args, queues, start)
                consumer.subscribe(args.topic, args.tags)
            else:
                offsets = {queue: await _start_offset(admin, queue, start) for queue in queues}
                consumer.assign(queues)
                for queue, offset in offsets.items():
                    consumer.seek(queue, offset)
            async with consumer:
                reader = _Reader(consumer, args, stopping)
                try:
                    await reader.run()
                finally:
                    if args.group is not None:
                        await reader.commit()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    print(f"printed {counted(reader.printed, 'message')}", file=sys.stderr)
    return 0


def _consumer(args: argparse.Namespace, group: str) -> LitePullConsumer:
    return LitePullConsumer(
        group,
        args.namesrv,
        auto_commit=False,
        request_timeout=args.timeout,
        **security(args).client_options(),
    )


async def _start_offset(admin: AdminClient, queue: MessageQueue, start: str | int) -> int:
    if isinstance(start, int):
        return await admin.first_offset_at(queue, start, group=READER_GROUP)
    first, end = await admin.offset_bounds(queue)
    return first if start == "earliest" else end


async def _start_group(
    admin: AdminClient, args: argparse.Namespace, queues: list[MessageQueue], start: str | int
) -> None:
    """Commit where a group new to the topic starts, as --from says; a group with committed offsets
    on the topic continues from them."""
    # Without a topic, GET_CONSUME_STATS lists the topics the group has offsets on.
    clusters = sorted({broker.cluster for broker in (await admin.topic_route(args.topic)).broker_datas})
    progress = [await admin.consume_progress(args.group, cluster=cluster) for cluster in clusters]
    if any(q.topic == args.topic for p in progress for q in p.queues):
        if args.start is not None:
            print(
                f"group {args.group} continues from its committed offsets on {args.topic} (--from "
                "applies to a group new to the topic; 'cometmq group reset' moves them)",
                file=sys.stderr,
            )
        return
    # Committed rather than left to the consumer's own start point, which (as RocketMQ's) reads a queue
    # whose first message is at offset 0 from there whatever was asked for. A consumer that has not
    # joined the group commits them, so that no member starts pulling before.
    offsets = {queue: await _start_offset(admin, queue, start) for queue in queues}
    async with _consumer(args, args.group) as committer:
        await committer.commit(offsets)


class _Reader:
    """The print loop: polls, prints, knows when to stop and what to commit."""

    def __init__(self, consumer: LitePullConsumer, args: argparse.Namespace, stopping: asyncio.Event) -> None:
        self._consumer = consumer
        self._commits = args.group is not None
        self._follow: bool = args.follow
        self._max: int | None = args.max
        self._json = args.format == "json"
        # Assigned queues are pulled unfiltered: the tags are checked here (None: every message).
        parsed = parse_tag_expression(args.tags)
        self._tags = parsed[0] if parsed is not None else None
        self._stopping = stopping
        self._ends: dict[MessageQueue, int] = {}  # without --follow: each queue's end when first seen
        # Where a queue's messages stopped being printed before the consumer's position (--max ended
        # the read in the middle of a batch): what is committed for it.
        self._stopped_at: dict[MessageQueue, int] = {}
        self.printed = 0

    async def run(self) -> None:
        last_commit = time.monotonic()
        while not self._stopping.is_set() and (self._max is None or self.printed < self._max):
            if not self._follow and await self._at_ends():
                break
            self._print(await self._consumer.poll(POLL_S))
            if self._commits and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                await self.commit()
                last_commit = time.monotonic()

    def _print(self, batch: list[ReceivedMessage]) -> None:
        for i, msg in enumerate(batch):
            if self._max is not None and self.printed >= self._max:
                self._stop_at(batch[i:])
                return
            if self._tags is not None and msg.tags not in self._tags:
                continue
            try:
                print(json.dumps(_consumed_json(msg)) if self._json else one_line(msg.body), flush=True)
            except BrokenPipeError:  # the reader went away (``| head``): the end of the read, not an error
                _discard_stdout()
                self._stopping.set()
                self._stop_at(batch[i:])
                return
            self.printed += 1

    def _stop_at(self, unprinted: list[ReceivedMessage]) -> None:
        for msg in unprinted:
            self._stopped_at.setdefault(msg.queue, msg.queue_offset)

    async def _at_ends(self) -> bool:
        """Whether every queue read has been printed up to the end it had when first seen (a member
        of a group that got no queue has nothing to read)."""
        consumer = self._consumer
        for queue in consumer.assignment():
            position = consumer.position(queue)
            if position is None:
                return False
            end = self._ends.get(queue)
            if end is None:
                end = self._ends[queue] = await consumer.end_offset(queue)
            if position < end:
                return False
        return True

    async def commit(self) -> None:
        """Commit, for the group, the offset after the last message printed of every queue read."""
        consumer = self._consumer
        offsets = {
            queue: self._stopped_at.get(queue, position)
            for queue in consumer.assignment()
            if (position := consumer.position(queue)) is not None
        }
        if offsets:
            await consumer.commit(offsets)


def one_line(body: bytes) -> str:
    """*body* as one line of text: UTF-8, with the backslash, control characters and every byte that
    is not UTF-8 written as escapes (``\\\\``, ``\\n``, ``\\x1b``, ``\\xff``)."""
    return body.decode("utf-8", "surrogateescape").translate(_ESCAPES)


def _consumed_json(msg: ReceivedMessage) -> dict[str, Any]:
    """A consumed message, for programs: the body as text, or in base64 when it is not UTF-8."""
    try:
        body, encoding = msg.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode("ascii"), "base64"
    return {
        "topic": msg.topic,
        "brokerName": msg.broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "properties": msg.properties,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "reconsumeTimes": msg.reconsume_times,
        "body": body,
        "bodyEncoding": encoding,
    }
