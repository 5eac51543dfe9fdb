"""``cometmq message query|get``: find stored messages by key or by id, through the brokers' index
(``message send|consume`` are in :mod:`cometmq.cli._console`)."""

from __future__ import annotations

import argparse
import base64
import codecs
import datetime
import sys
from typing import Any, Final

from cometmq.cli._admin import add_admin_command, print_json, whole_number
from cometmq.client import AdminClient
from cometmq.client.admin import offset_msg_id_address
from cometmq.client.message import SYSFLAG_COMPRESSED
from cometmq.console import format_table
from cometmq.errors import CometMQError, RecordError
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, host_text, inflate_body

PREVIEW_BYTES: Final = 256
_TIME_HELP: Final = "epoch ms or ISO-8601 such as 2024-05-01T12:00:00 (local time unless it names a zone)"


def add_message_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    message = commands.add_parser(
        "message",
        help="send and consume messages, find stored messages by key or message id",
        description=(
            "Send messages and print a topic's messages from the command line (send, consume), find "
            "stored messages through the brokers' message index (query) or by id (get)."
        ),
    )
    message_commands = message.add_subparsers(dest="message_command", metavar="COMMAND", required=True)
    from cometmq.cli._console import add_console_commands  # it builds on this module's helpers

    add_console_commands(message_commands)

    query = add_admin_command(
        message_commands,
        "query",
        _query,
        help="list the messages of a topic that carry a key",
        description=(
            "List the messages of TOPIC whose KEYS include KEY (with --unique: whose unique key, "
            "the message id clients show, is KEY), newest first, from every master broker of the "
            "topic. Exits with status 1 when there is none."
        ),
    )
    query.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="the topic to search")
    query.add_argument("--key", "-k", required=True, metavar="KEY", help="a key the producer set")
    query.add_argument(
        "--unique", action="store_true", help="KEY is a unique key (UNIQ_KEY) rather than one of the KEYS"
    )
    query.add_argument(
        "--begin", type=parse_time, default=0, metavar="TIME", help=f"stored at or after TIME: {_TIME_HELP}"
    )
    query.add_argument(
        "--end",
        type=parse_time,
        default=None,
        metavar="TIME",
        help="stored at or before TIME (default: no limit)",
    )
    query.add_argument(
        "--max",
        type=whole_number(1),
        default=32,
        metavar="N",
        help="at most N messages (default 32; 64 per broker at most)",
    )

    get = add_admin_command(
        message_commands,
        "get",
        _get,
        help="show a message: where it is stored, its properties and a body preview",
        description=(
            "Show the message with id MSG_ID: topic, ids, queue and offsets, tags, keys, hosts and "
            "times, every property, and the first 256 bytes of the body. MSG_ID is an offset message "
            "id (what the broker answers a send with), asked of the broker it names when that is a "
            "broker of the cluster, or a unique key "
            "(UNIQ_KEY, what clients show as the message id), looked up in --topic, or without "
            "--topic in every topic of the cluster. With --json: a list of messages (a unique key "
            "sent twice finds both), bodies in base64. Exits with status 1 when there is none."
        ),
    )
    get.add_argument("msg_id", metavar="MSG_ID", help="an offset message id or a unique key (UNIQ_KEY)")
    get.add_argument(
        "--topic", "-t", metavar="TOPIC", help="the message's topic (default: search every topic)"
    )
    from cometmq.cli._trace import add_trace_command  # here: it uses this module's formatting

    add_trace_command(message_commands)


def parse_time(text: str) -> int:
    """A time given on the command line, in ms since the epoch: epoch ms, or ISO-8601."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time"
        ) from None
    return int(moment.timestamp() * 1000)  # a naive time counts as local time


async def _query(admin: AdminClient, args: argparse.Namespace) -> None:
    records = await admin.query_message(
        args.topic, args.key, max_num=args.max, begin_ms=args.begin, end_ms=args.end, unique=args.unique
    )
    if not records:
        what = "unique key" if args.unique else "key"
        raise CometMQError(
            f"no message of topic {args.topic} has the {what} {args.key!r} (in the time range)"
        )
    if args.json:
        print_json([message_json(rec) for rec in records])
        return
    rows = [
        [
            _msg_id(rec, props := decode_properties(rec.properties)),
            rec.queue_id,
            rec.queue_offset,
            format_time(rec.store_timestamp),
            props.get("KEYS", "-") or "-",
            props.get("TAGS", "-") or "-",
            len(rec.body),
        ]
        for rec in records
    ]
    print(format_table(["MSG_ID", "QUEUE", "QUEUE_OFFSET", "STORE_TIME", "KEYS", "TAGS", "BODY_SIZE"], rows))


async def _get(admin: AdminClient, args: argparse.Namespace) -> None:
    named = offset_msg_id_address(args.msg_id)
    if named is not None and named not in await admin.broker_addresses():
        # A unique key made by a client (the C++ client's, say) decodes as an address too.
        print(
            f"{args.msg_id} is not an offset message id of this cluster ({named} is none of its brokers):"
            " looking it up as a unique key",
            file=sys.stderr,
        )
    records = await admin.view_message(args.msg_id, args.topic)
    if not records:
        where = f"topic {args.topic}" if args.topic else "any topic"
        raise CometMQError(f"no message with the id {args.msg_id} in {where}")
    if args.json:
        print_json([message_json(rec) for rec in records])
        return
    if len(records) > 1:
        print(f"{len(records)} messages have the id {args.msg_id} (newest first)\n")
    print("\n\n".join(describe(rec) for rec in records))


def _msg_id(rec: DecodedRecord, props: dict[str, str]) -> str:
    """The id clients show: UNIQ_KEY, else the offset message id."""
    return props.get("UNIQ_KEY") or rec.offset_msg_id


def format_time(ms: int) -> str:
    """Local time with milliseconds, ``2024-05-01 12:00:00.123``."""
    try:
        moment = datetime.datetime.fromtimestamp(ms // 1000)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}"


def _text_or_none(data: bytes, complete: bool) -> str | None:
    """*data* as text if it is UTF-8 without control characters (a cut multi-byte character at the
    end of an incomplete preview is fine)."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)
    except UnicodeDecodeError:
        return None
    if all(ch.isprintable() or ch in "\n\r\t" for ch in text):
        return text
    return None


def _escaped(data: bytes) -> str:
    """Printable ASCII as it is, every other byte (and the backslash) as ``\\xNN``."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in data)


def body_preview(body: bytes) -> tuple[str, str]:
    """(title line, preview) of a body: its first PREVIEW_BYTES bytes as text or hex escapes."""
    head = body[:PREVIEW_BYTES]
    truncated = len(body) > PREVIEW_BYTES
    text = _text_or_none(head, not truncated)
    kind = "text" if text is not None else "binary, as hex escapes"
    shown = f"first {PREVIEW_BYTES} of {len(body)} bytes" if truncated else f"{len(body)} bytes"
    return f"{shown}, {kind}", text if text is not None else _escaped(head)


def describe(rec: DecodedRecord) -> str:
    """Everything about one message, for people."""
    props = decode_properties(rec.properties)
    fields: list[tuple[str, object]] = [
        ("Topic", rec.topic),
        ("Msg ID", props.get("UNIQ_KEY", "-")),
        ("Offset Msg ID", rec.offset_msg_id),
        ("Queue ID", rec.queue_id),
        ("Queue Offset", rec.queue_offset),
        ("Commit-log Offset", rec.commitlog_offset),
        ("Tags", props.get("TAGS", "-")),
        ("Keys", props.get("KEYS", "-")),
        ("Born Host", host_text(rec.born_host)),
        ("Born Time", format_time(rec.born_timestamp)),
        ("Store Host", host_text(rec.store_host)),
        ("Store Time", format_time(rec.store_timestamp)),
        ("Reconsume Times", rec.reconsume_times),
        ("Flag / Sys Flag", f"{rec.flag} / {rec.sys_flag:#x}"),
    ]
    width = max(len(name) for name, _ in fields) + 2
    lines = [f"{name + ':':<{width}}{value}" for name, value in fields]
    lines.append(f"Properties ({len(props)}):")
    lines += [f"  {name}={printable(value)}" for name, value in sorted(props.items())]
    body = rec.body
    note = ""
    if rec.sys_flag & SYSFLAG_COMPRESSED:
        try:
            body = inflate_body(rec.body)
            note = f"zlib-compressed, {len(rec.body)} bytes stored; "
        except RecordError:  # not zlib, or inflating past the bound
            note = "marked compressed but does not inflate, shown as stored; "
    title, preview = body_preview(body)
    lines.append(f"Body ({note}{title}):")
    lines.append(preview)
    return "\n".join(lines)


def printable(value: str) -> str:
    """*value* as it is when every character is printable, else with Python's string escapes (text a
    client wrote must not reach a terminal's control sequences)."""
    return value if value.isprintable() else value.encode("unicode_escape").decode("ascii")


def message_json(rec: DecodedRecord) -> dict[str, Any]:
    """Everything about one message, for programs (the body in full, base64)."""
    props = decode_properties(rec.properties)
    return {
        "topic": rec.topic,
        "msgId": props.get("UNIQ_KEY") or None,
        "offsetMsgId": rec.offset_msg_id,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "commitLogOffset": rec.commitlog_offset,
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "bornHost": host_text(rec.born_host),
        "bornTimestamp": rec.born_timestamp,
        "storeHost": host_text(rec.store_host),
        "storeTimestamp": rec.store_timestamp,
        "reconsumeTimes": rec.reconsume_times,
        "flag": rec.flag,
        "sysFlag": rec.sys_flag,
        "properties": props,
        "bodySize": len(rec.body),
        "body": base64.b64encode(rec.body).decode("ascii"),
    }
