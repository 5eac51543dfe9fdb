"""``cometmq message trace``: a message's life as the trace records of tracing clients tell it."""

from __future__ import annotations

import argparse
from typing import Any

from cometmq.cli._admin import add_admin_command, print_json
from cometmq.cli._message import format_time, printable
from cometmq.client import AdminClient
from cometmq.console import counted, format_table
from cometmq.errors import CometMQError
from cometmq.protocol.naming import TRACE_TOPIC
from cometmq.protocol.trace import TraceContext, TraceEvent, trace_event


def add_trace_command(message_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trace = add_admin_command(
        message_commands,
        "trace",
        _trace,
        help="show a message's trace: who sent it, where it is stored, who consumed it and how long it took",
        description=(
            "Show the trace records of the message with id MSG_ID (its unique key, the id clients "
            "show), oldest first, as clients with message trace on wrote them: the send (producer "
            "group, client host, time, how long it took, where it was stored), a transaction's end, "
            "and each consumption (consumer group, client host, retries, how long the listener took, "
            "whether it succeeded). Exits with status 1 when no record names the message."
        ),
    )
    trace.add_argument("msg_id", metavar="MSG_ID", help="the message's unique key (UNIQ_KEY)")
    trace.add_argument(
        "--trace-topic",
        default=TRACE_TOPIC,
        metavar="TOPIC",
        help=f"the topic the clients write their trace records to (default {TRACE_TOPIC})",
    )


async def _trace(admin: AdminClient, args: argparse.Namespace) -> None:
    contexts = await admin.message_trace(args.msg_id, args.trace_topic)
    if not contexts:
        raise CometMQError(
            f"no trace record of message {args.msg_id} in {args.trace_topic} (was tracing on in its "
            "producer and consumers?)"
        )
    if args.json:
        print_json([_trace_json(ctx) for ctx in contexts])
        return
    rows = [[printable(cell) for cell in _cells(trace_event(ctx))] for ctx in contexts]
    records = counted(len(contexts), "record")
    print(f"Trace of message {printable(args.msg_id)} ({records} in {args.trace_topic})")
    print(format_table(["TIME", "EVENT", "GROUP", "CLIENT", "COST", "STATUS", "DETAILS"], rows))


def _cells(event: TraceEvent) -> list[str]:
    time = format_time(event.timestamp) if event.timestamp else "-"
    return [time, event.event, event.group, event.client, event.cost, event.status, event.details]


def _trace_json(ctx: TraceContext) -> dict[str, Any]:
    """One trace record, for programs: RocketMQ's field names."""
    bean = ctx.beans[0]
    return {
        "traceType": ctx.trace_type.value,
        "timestamp": ctx.timestamp,
        "regionId": ctx.region_id,
        "groupName": ctx.group_name,
        "costTime": ctx.cost_time,
        "success": ctx.success,
        "requestId": ctx.request_id,
        "contextCode": ctx.context_code,
        "topic": bean.topic,
        "msgId": bean.msg_id,
        "offsetMsgId": bean.offset_msg_id,
        "tags": bean.tags,
        "keys": bean.keys,
        "storeHost": bean.store_host,
        "clientHost": bean.client_host,
        "retryTimes": bean.retry_times,
        "bodyLength": bean.body_length,
        "msgType": bean.msg_type.name,
        "transactionId": bean.transaction_id,
        "transactionState": bean.transaction_state or None,
        "fromTransactionCheck": bean.from_transaction_check,
    }
