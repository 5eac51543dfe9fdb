"""``cometmq group …``: consumer groups — their settings, who consumes, how far they are, and moving
their offsets."""

from __future__ import annotations

import argparse
from typing import Any, Final

from cometmq.cli._admin import (
    add_admin_command,
    not_done_there,
    print_json,
    warn_of_groups_without_master,
    whole_number,
)
from cometmq.cli._message import format_time, parse_time
from cometmq.cli._ops import add_clone_offsets_command
from cometmq.client import AdminClient
from cometmq.client.admin import ConsumerConnections, ResetResult
from cometmq.console import counted, format_table
from cometmq.errors import BrokerError, CometMQError
from cometmq.protocol import ResponseCode
from cometmq.protocol.route import BrokerData
from cometmq.protocol.subscription_group import SubscriptionGroupConfig

# CLI option (dest) → SubscriptionGroupConfig field, for create and update.
_SETTINGS: Final = {
    "retry_max_times": "retry_max_times",
    "retry_queues": "retry_queue_nums",
    "broadcast": "consume_broadcast_enable",
    "consume_enable": "consume_enable",
    "fifo": "consume_message_orderly",
}

_RESET_DESCRIPTION: Final = (
    "Move the consumer offsets of GROUP on TOPIC, on every broker that holds the topic. --timestamp "
    "TS: each queue continues from its first message stored at or after TS (epoch ms or ISO-8601, "
    "local time unless it names a zone; the queue's end if every message is older). --to earliest: "
    "from each queue's first message; --to latest: from each queue's end (skip everything stored); "
    "--to OFFSET: queue --queue N continues from that offset. The brokers store the new offsets and "
    "send them to the group's online consumers (RESET_CONSUMER_CLIENT_OFFSET), which continue from "
    "them at once (the RocketMQ C++ and Java clients do; a consumer that ignores the request, such as "
    "the Node.js client, overwrites the reset with its next commit: stop it first). Prints each "
    "queue's old and new offset and how many consumers were told."
)


def _settings_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    def said(text: str, default: str) -> str:
        return f"{text} (default {default})" if defaults else f"{text} (unchanged if not given)"

    parser.add_argument(
        "--retry-max-times",
        type=whole_number(0),
        metavar="N",
        help=said("deliveries a failed message gets again before it goes to %%DLQ%%GROUP", "16"),
    )
    parser.add_argument(
        "--retry-queues",
        type=whole_number(0),
        metavar="N",
        help=said("queues of the group's retry topic %%RETRY%%GROUP; 0 drops failed messages", "1"),
    )
    parser.add_argument(
        "--broadcast",
        action=argparse.BooleanOptionalAction,
        help=said("whether consumers may use the BROADCASTING message model", "allowed"),
    )
    parser.add_argument(
        "--consume-enable",
        action=argparse.BooleanOptionalAction,
        help=said("whether the group may consume at all; --no-consume-enable refuses its pulls", "yes"),
    )
    parser.add_argument(
        "--fifo",
        action=argparse.BooleanOptionalAction,
        help=said(
            "whether the group consumes FIFO (RocketMQ 5's consumeMessageOrderly): a queue's messages "
            "go to one consumer at a time, each message group in order",
            "no",
        ),
    )
    _cluster_option(parser)


def _cluster_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="NAME", help="the cluster (needed when several are registered)")


def add_group_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser(
        "group",
        help="manage consumer groups, see their progress, reset their offsets",
        description=(
            "Consumer groups: their settings on the brokers (RocketMQ's subscription groups, created "
            "on first use unless autoCreateSubscriptionGroup=false), who consumes, how far each queue "
            "is consumed, and resetting where a group continues."
        ),
    )
    group_commands = group.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    create = add_admin_command(
        group_commands,
        "create",
        _create,
        help="create a consumer group on every master broker",
        description=(
            "Create GROUP with the given settings on every master broker of the cluster. A group "
            "that exists already is an error: 'group update' changes it."
        ),
    )
    create.add_argument("group", metavar="GROUP", help="the consumer group")
    _settings_options(create, defaults=True)

    update = add_admin_command(
        group_commands,
        "update",
        _update,
        help="change settings of an existing consumer group",
        description=(
            "Change the given settings of GROUP on every master broker of the cluster; the others "
            "stay as they are. The group must exist."
        ),
    )
    update.add_argument("group", metavar="GROUP", help="the consumer group")
    _settings_options(update, defaults=False)

    listing = add_admin_command(
        group_commands,
        "list",
        _list,
        help="list the consumer groups and their settings",
        description=(
            "List every consumer group of the cluster's master brokers with its settings on each: "
            "CONSUME, whether it may consume at all (consumeEnable); FIFO, whether it consumes "
            "FIFO (consumeMessageOrderly); BROADCAST_READS, whether its "
            "consumers may read in the BROADCASTING model, each of them every message, instead of "
            "sharing the messages (consumeBroadcastEnable); RETRY_QUEUES, the queues of its retry "
            "topic; RETRY_MAX, the deliveries a failed message gets before it becomes a dead letter."
        ),
    )
    _cluster_option(listing)

    delete = add_admin_command(
        group_commands,
        "delete",
        _delete,
        help="delete a consumer group's settings",
        description=(
            "Delete GROUP's settings on every master broker of the cluster. Its committed offsets stay "
            "unless --remove-offsets. A group still in use is created again, with default settings, "
            "on its consumers' next request (unless the brokers run with "
            "autoCreateSubscriptionGroup=false)."
        ),
    )
    delete.add_argument("group", metavar="GROUP", help="the consumer group")
    delete.add_argument("--remove-offsets", action="store_true", help="forget its committed offsets too")
    _cluster_option(delete)

    progress = add_admin_command(
        group_commands,
        "progress",
        _progress,
        help="how far a group has consumed, per queue, and its lag",
        description=(
            "Per queue of every topic GROUP has offsets for (its retry topic included), or of --topic: "
            "the broker offset (where the next message will be stored), the consumer offset (the next "
            "message the group gets), the lag between them and the store time of the last message "
            "it consumed; then the total lag."
        ),
    )
    progress.add_argument("group", metavar="GROUP", help="the consumer group")
    progress.add_argument("--topic", "-t", metavar="TOPIC", help="only this topic")
    _cluster_option(progress)

    reset = add_admin_command(
        group_commands,
        "reset",
        _reset,
        help="move a group's offsets on a topic: to a time, the start, the end or an offset",
        description=_RESET_DESCRIPTION,
    )
    reset.add_argument("group", metavar="GROUP", help="the consumer group")
    reset.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="the topic whose offsets move")
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--timestamp",
        type=parse_time,
        metavar="TS",
        help="continue from the first message stored at or after TS: epoch ms or ISO-8601 such as "
        "2024-05-01T12:00:00",
    )
    where.add_argument(
        "--to",
        type=_reset_target,
        metavar="earliest|latest|OFFSET",
        help="each queue's first message, each queue's end, or an offset in the queue --queue",
    )
    reset.add_argument("--queue", type=int, metavar="N", help="only queue N (required with --to OFFSET)")
    reset.add_argument("--broker", metavar="NAME", help="only the broker NAME (a topic may span several)")

    consumers = add_admin_command(
        group_commands,
        "consumers",
        _consumers,
        help="the group's online consumers",
        description=(
            "The clients consuming for GROUP now (from their heartbeats): client id, address, "
            "language and version, and the group's message model and subscriptions; or that none is "
            "online (an answer: exit status 0; with --json an empty connections list)."
        ),
    )
    consumers.add_argument("group", metavar="GROUP", help="the consumer group")
    _cluster_option(consumers)
    add_clone_offsets_command(group_commands)


def _reset_target(text: str) -> str | int:
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return value
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{text!r} is not earliest, latest or an offset (a whole number ≥ 0)")


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    changes = {
        field: getattr(args, dest) for dest, field in _SETTINGS.items() if getattr(args, dest) is not None
    }
    return changes


def _describe(config: SubscriptionGroupConfig) -> str:
    return (
        f"retry max times {config.retry_max_times}, retry queues {config.retry_queue_nums}, "
        f"broadcast {'allowed' if config.consume_broadcast_enable else 'refused'}, "
        f"consume {'enabled' if config.consume_enable else 'disabled'}, "
        f"fifo {'yes' if config.consume_message_orderly else 'no'}"
    )


def _broker_names(masters: list[BrokerData]) -> list[str]:
    return [broker.broker_name for broker in masters]


def _brokers(masters: list[BrokerData]) -> str:
    return ", ".join(_broker_names(masters))


async def _create(admin: AdminClient, args: argparse.Namespace) -> None:
    config = SubscriptionGroupConfig(args.group, **_changes(args))
    masters = await admin.create_group(config, cluster=args.cluster)
    if args.json:
        print_json({"group": config.to_json(), "brokers": _broker_names(masters)})
    else:
        print(f"created group {args.group} on {_brokers(masters)}: {_describe(config)}")
    await warn_of_groups_without_master(
        admin, args.cluster, not_done_there(f"group {args.group} was not created")
    )


async def _update(admin: AdminClient, args: argparse.Namespace) -> None:
    changes = _changes(args)
    if not changes:
        raise CometMQError(
            "nothing to change: give --retry-max-times, --retry-queues, --[no-]broadcast, "
            "--[no-]consume-enable or --[no-]fifo"
        )
    masters, config = await admin.update_group(args.group, cluster=args.cluster, **changes)
    if args.json:
        print_json({"group": config.to_json(), "brokers": _broker_names(masters)})
    else:
        print(f"updated group {args.group} on {_brokers(masters)}: {_describe(config)}")
    await warn_of_groups_without_master(
        admin, args.cluster, not_done_there(f"group {args.group} was not updated")
    )


async def _list(admin: AdminClient, args: argparse.Namespace) -> None:
    groups = await admin.list_groups(cluster=args.cluster)
    if args.json:
        print_json(
            [
                {"brokerName": broker, **config.to_json()}
                for per_broker in groups.values()
                for broker, config in sorted(per_broker.items())
            ]
        )
        return
    if not groups:
        print("no consumer group")
        return
    rows = [
        [
            name,
            broker,
            "yes" if config.consume_enable else "no",
            "yes" if config.consume_message_orderly else "no",
            "allowed" if config.consume_broadcast_enable else "refused",
            config.retry_queue_nums,
            config.retry_max_times,
        ]
        for name, per_broker in groups.items()
        for broker, config in sorted(per_broker.items())
    ]
    # BROADCAST_READS: consumeBroadcastEnable, whether the group's consumers may use the BROADCASTING
    # message model (each of them reads every message) rather than share the messages (CLUSTERING).
    headers = ["GROUP", "BROKER", "CONSUME", "FIFO", "BROADCAST_READS", "RETRY_QUEUES", "RETRY_MAX"]
    print(format_table(headers, rows))


async def _delete(admin: AdminClient, args: argparse.Namespace) -> None:
    masters = await admin.delete_group(args.group, cluster=args.cluster, remove_offsets=args.remove_offsets)
    if args.json:
        print_json({"group": args.group, "brokers": _broker_names(masters)})
    else:
        offsets = " and its offsets" if args.remove_offsets else ""
        print(f"deleted group {args.group}{offsets} on {_brokers(masters)}")
    await warn_of_groups_without_master(
        admin, args.cluster, not_done_there(f"group {args.group} was not deleted")
    )


async def _progress(admin: AdminClient, args: argparse.Namespace) -> None:
    progress = await admin.consume_progress(args.group, topic=args.topic, cluster=args.cluster)
    await warn_of_groups_without_master(
        admin, args.cluster, "its queues are left out (a group's progress is asked of the masters)"
    )
    if args.json:
        print_json(
            {
                "group": progress.group,
                "consumeTps": progress.consume_tps,
                "totalLag": progress.total_lag,
                "queues": [
                    {
                        "topic": q.topic,
                        "brokerName": q.broker_name,
                        "queueId": q.queue_id,
                        "brokerOffset": q.broker_offset,
                        "consumerOffset": q.consumer_offset,
                        "lag": q.lag,
                        "lastTimestamp": q.last_timestamp,
                    }
                    for q in progress.queues
                ],
            }
        )
        return
    if not progress.queues:
        where = f" on topic {args.topic}" if args.topic else ""
        print(f"group {args.group} has no consumer offsets{where}")
        return
    rows = [
        [
            q.topic,
            q.broker_name,
            q.queue_id,
            q.broker_offset,
            q.consumer_offset,
            q.lag,
            format_time(q.last_timestamp) if q.last_timestamp > 0 else "-",
        ]
        for q in progress.queues
    ]
    headers = ["TOPIC", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_CONSUME_TIME"]
    print(format_table(headers, rows))
    print(f"total lag: {progress.total_lag}  (consume rate {progress.consume_tps:.1f} msg/s)")


def _reset_json(result: ResetResult) -> dict[str, Any]:
    return {
        "consumersNotified": result.consumers_notified,
        "queues": [
            {
                "topic": q.topic,
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "oldOffset": q.old_offset,
                "newOffset": q.new_offset,
            }
            for q in result.queues
        ],
    }


async def _reset(admin: AdminClient, args: argparse.Namespace) -> None:
    target: dict[str, Any]
    if args.timestamp is not None:
        target = {"timestamp": args.timestamp}
    elif isinstance(args.to, int):
        if args.queue is None:
            raise CometMQError("--to OFFSET needs --queue N: an offset is a position in one queue")
        target = {"offset": args.to}
    else:
        target = {"to": args.to}
    result = await admin.reset_offsets(
        args.group, args.topic, queue_id=args.queue, broker_name=args.broker, **target
    )
    if args.json:
        print_json(_reset_json(result))
        return
    rows = [
        [q.broker_name, q.queue_id, "-" if q.old_offset < 0 else q.old_offset, "→", q.new_offset]
        for q in result.queues
    ]
    print(format_table(["BROKER", "QUEUE", "OLD_OFFSET", "", "NEW_OFFSET"], rows))
    told = result.consumers_notified
    print(
        f"reset {counted(len(result.queues), 'queue')} of topic {args.topic} for group {args.group}; "
        f"told {counted(told, 'online consumer')}"
    )


async def _consumers(admin: AdminClient, args: argparse.Namespace) -> None:
    try:
        info = await admin.consumer_connections(args.group, cluster=args.cluster)
    except BrokerError as exc:
        if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
            raise
        # An answer, not a failure (RocketMQ's tools, too, tell "not online" apart from errors).
        info = ConsumerConnections(args.group, "", "", "", {}, [])
    if not info.connections and not args.json:
        print(f"the consumer group {args.group} has no consumer online")
        return
    if args.json:
        print_json(
            {
                "group": info.group,
                "consumeType": info.consume_type,
                "messageModel": info.message_model,
                "consumeFromWhere": info.consume_from_where,
                "subscriptions": info.subscriptions,
                "connections": [
                    {
                        "clientId": c.client_id,
                        "clientAddr": c.client_addr,
                        "language": c.language,
                        "version": c.version,
                        "brokers": c.broker_names,
                    }
                    for c in info.connections
                ],
            }
        )
        return
    rows = [[c.client_id, c.client_addr, c.language, c.version] for c in info.connections]
    print(format_table(["CLIENT_ID", "ADDRESS", "LANGUAGE", "VERSION"], rows))
    subs = ", ".join(f"{topic} ({expr})" for topic, expr in sorted(info.subscriptions.items()))
    print(
        f"{info.message_model}, {info.consume_type}, {info.consume_from_where}; subscribed to {subs or '-'}"
    )
