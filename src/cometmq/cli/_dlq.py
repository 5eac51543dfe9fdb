"""``cometmq dlq list|resend``: see a consumer group's dead letters and send them back."""

from __future__ import annotations

import argparse
from typing import Any, Final

from cometmq.cli._admin import add_admin_command, print_json, whole_number
from cometmq.cli._message import format_time, message_json
from cometmq.client import AdminClient
from cometmq.client.message import SYSFLAG_COMPRESSED
from cometmq.console import counted, format_table
from cometmq.errors import CometMQError
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord

PREVIEW_CHARS: Final = 40

_RESEND_DESCRIPTION: Final = (
    "Send dead letters of GROUP back to their original topic (the RETRY_TOPIC property) as fresh "
    "messages: same body, flag, keys, tags and properties, without the retry bookkeeping, with "
    "reconsume times 0, so the group gets all its retries again. The dead letters stay in "
    "%DLQ%GROUP. Each copy carries the property RESENT_FROM_DLQ (the dead letter's offset message "
    "id); a dead letter already resent (a copy with that mark is found in its topic through the "
    "message index) is skipped and reported, so running the command twice does not deliver a message "
    "twice. --force resends those too, and consumers then receive the message once more. Exits with "
    "status 1 when an id is not found or a resend fails."
)


def add_dlq_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = commands.add_parser(
        "dlq",
        help="list a consumer group's dead letters and send them back",
        description=(
            "Dead letters: messages a consumer group failed more often than its retryMaxTimes (16 by "
            "default), kept in the topic %DLQ%GROUP on each broker."
        ),
    )
    dlq_commands = dlq.add_subparsers(dest="dlq_command", metavar="COMMAND", required=True)

    listing = add_admin_command(
        dlq_commands,
        "list",
        _list,
        help="show a group's dead letters",
        description=(
            "Show the dead letters of GROUP from every broker, oldest first: message id, original "
            "topic, failures (deliveries that failed, the reconsume times), store time and the start "
            "of the body. With --json: the whole messages, bodies in base64."
        ),
    )
    listing.add_argument("group", metavar="GROUP", help="the consumer group")
    listing.add_argument(
        "--max",
        type=whole_number(1),
        default=100,
        metavar="N",
        help="show at most N dead letters (default 100)",
    )

    resend = add_admin_command(
        dlq_commands,
        "resend",
        _resend,
        help="send dead letters back to their original topic",
        description=_RESEND_DESCRIPTION,
    )
    resend.add_argument("group", metavar="GROUP", help="the consumer group")
    which = resend.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--msg-id",
        metavar="ID",
        help="the dead letter(s) with this id: the message id clients show (UNIQ_KEY), the id of its "
        "first delivery (ORIGIN_MESSAGE_ID) or the dead letter's offset message id",
    )
    which.add_argument("--all", action="store_true", help="every dead letter of the group")
    resend.add_argument(
        "--force", action="store_true", help="resend dead letters that were already resent, too"
    )


def _msg_id(rec: DecodedRecord, props: dict[str, str]) -> str:
    return props.get("UNIQ_KEY") or props.get("ORIGIN_MESSAGE_ID") or rec.offset_msg_id


def _one_line_preview(body: bytes) -> str:
    text = body[: PREVIEW_CHARS * 4].decode("utf-8", "replace")
    text = "".join(ch if ch.isprintable() else "." for ch in text)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def dead_letter_json(rec: DecodedRecord) -> dict[str, Any]:
    props = decode_properties(rec.properties)
    return {
        **message_json(rec),
        "msgId": _msg_id(rec, props),
        "originalTopic": props.get("RETRY_TOPIC"),
        "failures": rec.reconsume_times,
    }


async def _list(admin: AdminClient, args: argparse.Namespace) -> None:
    records = await admin.dead_letters(args.group, max_num=args.max + 1)
    more = len(records) > args.max
    records = records[: args.max]
    if args.json:
        print_json([dead_letter_json(rec) for rec in records])
        return
    if not records:
        print(f"group {args.group} has no dead letters")
        return
    rows = []
    for rec in records:
        props = decode_properties(rec.properties)
        rows.append(
            [
                _msg_id(rec, props),
                props.get("RETRY_TOPIC", "-"),
                rec.reconsume_times,
                format_time(rec.store_timestamp),
                _one_line_preview(rec.body) if not rec.sys_flag & SYSFLAG_COMPRESSED else "(compressed)",
            ]
        )
    print(format_table(["MSG_ID", "ORIGINAL_TOPIC", "FAILURES", "STORE_TIME", "BODY"], rows))
    if more:
        print(f"(more than {args.max} dead letters; --max N shows more)")


def _matches(rec: DecodedRecord, msg_id: str) -> bool:
    props = decode_properties(rec.properties)
    return msg_id in (props.get("UNIQ_KEY"), props.get("ORIGIN_MESSAGE_ID"), rec.offset_msg_id)


async def _resend(admin: AdminClient, args: argparse.Namespace) -> None:
    records = await admin.dead_letters(args.group)
    if args.msg_id is not None:
        records = [rec for rec in records if _matches(rec, args.msg_id)]
        if not records:
            raise CometMQError(f"group {args.group} has no dead letter with the id {args.msg_id}")
    outcomes: list[dict[str, Any]] = []
    for rec in records:
        props = decode_properties(rec.properties)
        outcome: dict[str, Any] = {
            "msgId": _msg_id(rec, props),
            "deadLetterOffsetMsgId": rec.offset_msg_id,
            "originalTopic": props.get("RETRY_TOPIC"),
        }
        try:
            copies = [] if args.force else await admin.resent_copies(rec)
            if copies:
                outcome.update(status="skipped", resentAt=copies[0].store_timestamp)
            else:
                resent = await admin.resend_dead_letter(rec)
                outcome.update(status="resent", newOffsetMsgId=resent.msg_id)
        except CometMQError as exc:
            outcome.update(status="failed", reason=str(exc))
        outcomes.append(outcome)
    counts = {s: sum(o["status"] == s for o in outcomes) for s in ("resent", "skipped", "failed")}
    if args.json:
        print_json(outcomes)
    elif not records:
        print(f"group {args.group} has no dead letters")
    else:
        for o in outcomes:
            if o["status"] == "resent":
                new_id = o["newOffsetMsgId"]
                print(f"resent {o['msgId']} to {o['originalTopic']} (new offset msg id {new_id})")
            elif o["status"] == "skipped":
                print(
                    f"skipped {o['msgId']}: already resent to {o['originalTopic']} at "
                    f"{format_time(o['resentAt'])} (--force resends it again)"
                )
            else:
                print(f"failed {o['msgId']}: {o['reason']}")
        summary = (
            f"resent {counts['resent']} of {counted(len(outcomes), 'dead letter')} of group {args.group}"
        )
        if counts["skipped"]:
            summary += f", {counts['skipped']} skipped (already resent)"
        print(summary)
    if counts["failed"]:
        raise CometMQError(
            f"{counts['failed']} of {counted(len(outcomes), 'dead letter')} could not be resent"
        )
