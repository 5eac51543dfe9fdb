"""What operators reach for on a running cluster: ``cometmq broker config get|set``, ``cometmq producer
connections``, ``cometmq group clone-offsets`` and ``cometmq stats``."""

from __future__ import annotations

import argparse

from cometmq.cli._admin import add_admin_command, print_json
from cometmq.cli._message import format_time
from cometmq.client import AdminClient
from cometmq.console import format_table
from cometmq.errors import CometMQError


def add_broker_config_commands(broker_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cometmq broker config get|set`` (under ``cometmq broker``)."""
    config = broker_commands.add_parser(
        "config",
        help="show or change a broker's settings while it runs",
        description=(
            "The settings in effect on brokers (GET_BROKER_CONFIG), and changing those that can "
            "change while a broker runs (UPDATE_BROKER_CONFIG); docs/operations.md lists them."
        ),
    )
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    get = add_admin_command(
        config_commands,
        "get",
        _config_get,
        help="print a broker's settings as broker.conf lines",
        description=(
            "Print the settings in effect on the broker at --broker-addr, or on every broker of --cluster "
            "(the only registered cluster when neither is given), as key=value lines of broker.conf "
            "(secrets and tls.* keys left out); --key prints one setting."
        ),
    )
    _target_options(get)
    get.add_argument("--key", metavar="KEY", help="only this setting")
    set_ = add_admin_command(
        config_commands,
        "set",
        _config_set,
        help="change a setting of running brokers (kept across restarts)",
        description=(
            "Change KEY to VALUE on the broker at --broker-addr, or on every broker of --cluster (the only "
            "registered cluster when neither is given). The broker applies it at once and keeps it in "
            "<storePathRootDir>/config/broker.properties, which wins over broker.conf at its next "
            "start. Only keys that can change while a broker runs are taken; any other is refused "
            "with the list of those that can."
        ),
    )
    set_.add_argument("key", metavar="KEY", help="the setting, by its broker.conf key")
    set_.add_argument("value", metavar="VALUE", help="its new value")
    _target_options(set_)


def add_broker_consume_stats_command(
    broker_commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """``cometmq broker consume-stats`` (under ``cometmq broker``)."""
    consume_stats = add_admin_command(
        broker_commands,
        "consume-stats",
        _broker_consume_stats,
        help="every consumer group's progress on one broker",
        description=(
            "Ask the broker at ADDR (GET_BROKER_CONSUME_STATS) for every consumer group's progress on "
            "each topic it has offsets for: per queue the broker offset, the group's offset, the lag "
            "and the store time of the last message it consumed; then the broker's total lag (as "
            "RocketMQ's mqadmin brokerConsumeStats)."
        ),
    )
    consume_stats.add_argument("addr", metavar="ADDR", help="the broker's HOST:PORT (its client port)")
    consume_stats.add_argument("--order", action="store_true", help="only ordered topics")
    consume_stats.add_argument(
        "--min-lag", type=int, default=0, metavar="N", help="only queues at least N messages behind"
    )
    for option in consume_stats._actions:
        if option.dest == "namesrv":  # the broker at ADDR is asked directly: no NameServer to name
            option.help = argparse.SUPPRESS


def add_ops_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cometmq producer …`` and ``cometmq stats``."""
    producer = commands.add_parser(
        "producer", help="see a producer group's clients", description="Producer groups."
    )
    producer_commands = producer.add_subparsers(dest="producer_command", metavar="COMMAND", required=True)
    connections = add_admin_command(
        producer_commands,
        "connections",
        _producer_connections,
        help="the producers of a group connected to the brokers of a topic",
        description=(
            "The clients of producer group GROUP connected now (from their heartbeats) to the master "
            "brokers holding TOPIC: client id, address, language, version and the brokers they are "
            "connected to."
        ),
    )
    connections.add_argument("group", metavar="GROUP", help="the producer group")
    connections.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="a topic they send to")

    stats = add_admin_command(
        commands,
        "stats",
        _stats,
        help="per-topic and per-group message rates of the whole cluster",
        description=(
            "For every topic (not the system ones), or --topic: messages stored per second over about "
            "the last minute (IN_TPS) and in about the last day (IN_DAY); for each consumer group with "
            "offsets on it, its lag (LAG), messages pulled per second (OUT_TPS) and in the last day "
            "(OUT_DAY), summed over the master brokers (as RocketMQ's mqadmin statsAll)."
        ),
    )
    stats.add_argument("--topic", "-t", metavar="TOPIC", help="only this topic")
    stats.add_argument(
        "--active", action="store_true", help="only topics with messages stored or pulled in the last day"
    )
    stats.add_argument("--cluster", metavar="NAME", help="the cluster (needed when several are registered)")


def add_clone_offsets_command(group_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cometmq group clone-offsets`` (under ``cometmq group``)."""
    clone = add_admin_command(
        group_commands,
        "clone-offsets",
        _clone_offsets,
        help="give a group another group's offsets on a topic",
        description=(
            "Give consumer group DEST the offsets SOURCE committed on TOPIC, on every master broker "
            "holding it (CLONE_GROUP_OFFSET): DEST then continues where SOURCE is. DEST's own offsets "
            "there are replaced; its online consumers pick them up at their next offset query. While "
            "SOURCE is online, a broker skips a topic SOURCE does not subscribe to, unless --offline."
        ),
    )
    clone.add_argument("source", metavar="SOURCE", help="the group whose offsets are copied")
    clone.add_argument("dest", metavar="DEST", help="the group that gets them")
    clone.add_argument("--topic", "-t", required=True, metavar="TOPIC", help="the topic")
    clone.add_argument("--offline", action="store_true", help="copy even while SOURCE is online elsewhere")


def _target_options(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--broker-addr", metavar="HOST:PORT", help="the broker at this address")
    target.add_argument("--cluster", metavar="NAME", help="every broker of this cluster")


async def _targets(admin: AdminClient, args: argparse.Namespace) -> list[tuple[str, str]]:
    """(broker name, address) of the brokers a config command acts on: --broker-addr, else every broker
    (masters and slaves) of --cluster or of the only cluster."""
    if args.broker_addr:
        return [(args.broker_addr, args.broker_addr)]
    info = await admin.cluster_info()
    clusters = sorted(info.cluster_addr_table)
    cluster = args.cluster
    if cluster is None:
        if len(clusters) != 1:
            known = ", ".join(clusters) or "none is registered"
            raise CometMQError(f"say which cluster (--cluster) or broker (--broker-addr): clusters {known}")
        cluster = clusters[0]
    elif cluster not in info.cluster_addr_table:
        raise CometMQError(
            f"cluster {cluster!r} is unknown to the name server (known: {', '.join(clusters)})"
        )
    return [
        (broker.broker_name, addr)
        for broker in sorted(info.brokers_of(cluster), key=lambda b: b.broker_name)
        for _, addr in sorted(broker.broker_addrs.items())
    ]


def _where(name: str, addr: str) -> str:
    return addr if name == addr else f"{name} ({addr})"


async def _config_get(admin: AdminClient, args: argparse.Namespace) -> None:
    targets = await _targets(admin, args)
    found: dict[str, dict[str, str]] = {}
    for _, addr in targets:
        settings = await admin.broker_config(addr)
        if args.key is not None:
            if args.key not in settings:
                raise CometMQError(f"the broker at {addr} has no setting {args.key}")
            settings = {args.key: settings[args.key]}
        found[addr] = settings
    if args.json:
        print_json(found)
        return
    for number, (name, addr) in enumerate(targets):
        if len(targets) > 1:
            print(f"{chr(10) if number else ''}# {_where(name, addr)}")
        for key, value in found[addr].items():
            print(f"{key}={value}")


async def _config_set(admin: AdminClient, args: argparse.Namespace) -> None:
    targets = await _targets(admin, args)
    for name, addr in targets:
        await admin.update_broker_config(addr, {args.key: args.value})
        if not args.json:
            print(f"{args.key}={args.value} on {_where(name, addr)}")
    if args.json:
        print_json({"key": args.key, "value": args.value, "brokers": [addr for _, addr in targets]})


async def _broker_consume_stats(admin: AdminClient, args: argparse.Namespace) -> None:
    groups = await admin.broker_consume_stats(args.addr, order_only=args.order)
    rows = [(p.group, q) for p in groups for q in p.queues if q.lag >= args.min_lag]
    total = sum(q.lag for p in groups for q in p.queues)
    if args.json:
        queues = [
            {
                "group": group,
                "topic": q.topic,
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "brokerOffset": q.broker_offset,
                "consumerOffset": q.consumer_offset,
                "lag": q.lag,
                "lastTimestamp": q.last_timestamp,
            }
            for group, q in rows
        ]
        print_json({"broker": args.addr, "totalLag": total, "queues": queues})
        return
    table = [
        [
            q.topic,
            group,
            q.broker_name,
            q.queue_id,
            q.broker_offset,
            q.consumer_offset,
            q.lag,
            format_time(q.last_timestamp) if q.last_timestamp > 0 else "-",
        ]
        for group, q in rows
    ]
    headers = [
        "TOPIC",
        "GROUP",
        "BROKER",
        "QUEUE",
        "BROKER_OFFSET",
        "CONSUMER_OFFSET",
        "LAG",
        "LAST_CONSUME_TIME",
    ]
    print(format_table(headers, table))
    print(f"total lag: {total}")


async def _producer_connections(admin: AdminClient, args: argparse.Namespace) -> None:
    producers = await admin.producer_connections(args.group, args.topic)
    if args.json:
        print_json(
            [
                {
                    "clientId": p.client_id,
                    "clientAddr": p.client_addr,
                    "language": p.language,
                    "version": p.version,
                    "brokers": p.broker_names,
                }
                for p in producers
            ]
        )
        return
    rows = [[p.client_id, p.client_addr, p.language, p.version, ", ".join(p.broker_names)] for p in producers]
    print(format_table(["CLIENT_ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKERS"], rows))


async def _clone_offsets(admin: AdminClient, args: argparse.Namespace) -> None:
    # CLONE_GROUP_OFFSET answers success whatever it copied (as RocketMQ's): ask first whether SOURCE
    # has offsets there. Asked for every topic, GET_CONSUME_STATS lists only those it has offsets on.
    clusters = {broker.cluster for broker in (await admin.topic_route(args.topic)).broker_datas}
    source_topics: set[str] = set()
    for cluster in sorted(clusters):
        source_topics |= {
            queue.topic for queue in (await admin.consume_progress(args.source, None, cluster)).queues
        }
    if args.topic not in source_topics:
        raise CometMQError(f"group {args.source} has no offsets on {args.topic}: nothing to copy")
    masters = await admin.clone_group_offsets(args.source, args.dest, args.topic, offline=args.offline)
    names = [broker.broker_name for broker in masters]
    if args.json:
        print_json({"source": args.source, "dest": args.dest, "topic": args.topic, "brokers": names})
    else:
        print(f"group {args.dest} has the offsets of {args.source} on {args.topic} on {', '.join(names)}")


async def _stats(admin: AdminClient, args: argparse.Namespace) -> None:
    topics = [args.topic] if args.topic else None
    traffic = await admin.traffic(topics, args.cluster)
    if args.active:
        traffic = [t for t in traffic if t.in_today or any(g.out_today for g in t.groups)]
    if args.json:
        print_json(
            [
                {
                    "topic": t.topic,
                    "inTps": t.in_tps,
                    "inToday": t.in_today,
                    "groups": [
                        {"group": g.group, "lag": g.lag, "outTps": g.out_tps, "outToday": g.out_today}
                        for g in t.groups
                    ],
                }
                for t in traffic
            ]
        )
        return
    rows: list[list[object]] = []
    for t in traffic:
        if not t.groups:
            rows.append([t.topic, "-", "-", f"{t.in_tps:.2f}", "-", t.in_today, "-"])
        for g in t.groups:
            rows.append(
                [t.topic, g.group, g.lag, f"{t.in_tps:.2f}", f"{g.out_tps:.2f}", t.in_today, g.out_today]
            )
    print(format_table(["TOPIC", "GROUP", "LAG", "IN_TPS", "OUT_TPS", "IN_DAY", "OUT_DAY"], rows))
