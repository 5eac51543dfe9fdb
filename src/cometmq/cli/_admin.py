"""``cometmq topic …`` and ``cometmq cluster …``: administration through the NameServer, and the
plumbing every administration command shares (``add_admin_command``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from cometmq.cli._connect import add_connect_options, security
from cometmq.cli._loop import run_async
from cometmq.client import AdminClient
from cometmq.console import counted, format_table
from cometmq.errors import BrokerError, CometMQError, ConnectionClosedError
from cometmq.protocol import ResponseCode
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.naming import perm_text, topic_kind
from cometmq.protocol.route import MASTER_ID, BrokerData

DEFAULT_NAMESRV = "127.0.0.1:9876"

# The runtime-info key of a broker's last message store time (ms), for a slave's lag in seconds.
LAST_STORE_TIME = "lastMessageStoreTimestamp"

AdminAction = Callable[[AdminClient, argparse.Namespace], Awaitable[None]]


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An option's type: a whole number from *least* (to *most*); anything else is a usage error,
    not a traceback from deep inside a command."""

    def parse(text: str) -> int:
        value: int | None
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least or (most is not None and value > most):
            upper = f" and at most {most}" if most is not None else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least {least}{upper}")
        return value

    return parse


def add_namesrv_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("COMETMQ_NAMESRV") or DEFAULT_NAMESRV,
        metavar="HOST:PORT",
        help=f"NameServer address (default: $COMETMQ_NAMESRV, else {DEFAULT_NAMESRV})",
    )


def admin_options() -> argparse.ArgumentParser:
    """The options every administration command takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    add_namesrv_option(common)
    add_connect_options(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument(
        "--timeout", type=float, default=5.0, metavar="SECONDS", help="per-request timeout (default: 5)"
    )
    return common


def add_admin_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    action: AdminAction,
    *,
    help: str,
    description: str,
    aliases: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A subcommand with the administration options that runs *action* with a connected AdminClient."""

    def run(args: argparse.Namespace) -> int:
        async def main() -> int:
            async with AdminClient(
                args.namesrv, timeout=args.timeout, **security(args).client_options()
            ) as admin:
                await action(admin, args)
            return 0

        return run_async(main())

    parser = commands.add_parser(
        name, parents=[admin_options()], help=help, description=description, aliases=list(aliases)
    )
    parser.set_defaults(func=run)
    return parser


def add_admin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topic = commands.add_parser(
        "topic", help="create, list, inspect and delete topics", description="Manage topics."
    )
    topic_commands = topic.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

    create = add_admin_command(
        topic_commands,
        "create",
        _topic_create,
        help="create (or update) a topic on every master broker of a cluster",
        description=(
            "Create a topic, or change its queue count or attributes, on every master broker of the "
            "cluster ('update' is the same command). Without --cluster the only registered cluster is used."
        ),
        aliases=["update"],
    )
    create.add_argument("name", metavar="NAME", help="topic name: letters, digits, %%, |, _ and -")
    create.add_argument(
        "--queues",
        type=whole_number(1),
        metavar="N",
        help="read and write queues per broker (default: as the topic has them; 8 for a new topic)",
    )
    create.add_argument("--cluster", metavar="NAME", help="cluster to create it in")
    create.add_argument("--order", action="store_true", help="mark the topic as ordered")
    create.add_argument(
        "-a",
        "--attributes",
        metavar="CHANGES",
        help=(
            "change the topic's attributes, RocketMQ 5's way: +name=value sets, -name removes, "
            "comma-separated (+deduplication=true: sends to the topic are deduplicated); changes that "
            "start with - are given as --attributes=-name"
        ),
    )

    listing = add_admin_command(
        topic_commands,
        "list",
        _topic_list,
        help="list the topics the NameServer knows",
        description=(
            "List the topics the NameServer knows, one per line. System topics are left out unless "
            "--system is given: the brokers' own (TBW102, SCHEDULE_TOPIC_XXXX, RMQ_SYS_*, ...), the "
            "consumer groups' retry and dead-letter topics (%%RETRY%%GROUP, %%DLQ%%GROUP) and the "
            "topics named after each cluster and broker."
        ),
    )
    listing.add_argument(
        "--system",
        action="store_true",
        help="list system topics too, in a table whose KIND column says which is which",
    )

    status = add_admin_command(
        topic_commands,
        "status",
        _topic_status,
        help="show each queue of a topic: its offsets, message count and last store time",
        description=(
            "Show every queue of the topic on every master broker that holds it "
            "(GET_TOPIC_STATS_INFO): its oldest offset still stored (MIN_OFFSET), the offset the next "
            "message gets (MAX_OFFSET), how many messages it holds, and when its newest message was "
            "stored."
        ),
    )
    status.add_argument("name", metavar="NAME")

    route = add_admin_command(
        topic_commands,
        "route",
        _topic_route,
        help="show which brokers hold a topic's queues",
        description="Show a topic's route: its broker groups, their addresses, queue counts and permission.",
    )
    route.add_argument("name", metavar="NAME")

    delete = add_admin_command(
        topic_commands,
        "delete",
        _topic_delete,
        help="delete a topic from the brokers of a cluster and from the NameServer",
        description="Delete a topic on every master broker of the cluster, then from the NameServer.",
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--cluster", metavar="NAME", help="cluster to delete it from")

    cluster = commands.add_parser(
        "cluster",
        help="show clusters and their brokers, or run one on this machine",
        description="Show the clusters a NameServer knows (list), or run a replicated one here (up).",
    )
    cluster_commands = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    add_admin_command(
        cluster_commands,
        "list",
        _cluster_list,
        help="list clusters, broker groups and broker addresses",
        description=(
            "List every broker registered with the NameServer: cluster, broker name, broker id "
            "(0 = master), address, and from the broker itself its role (ASYNC_MASTER, SYNC_MASTER or "
            "SLAVE), its epoch (the mastership it follows or holds, numbered from 1), the in-sync set "
            "(IN_SYNC: the broker ids that may be elected master, in failover mode), version and "
            "message rates; for a slave, how far its commit log is behind its master's, in bytes and "
            "in seconds of message store time."
        ),
    )
    from cometmq.cli._cluster import add_cluster_up_command  # it builds on this module's helpers

    add_cluster_up_command(cluster_commands)

    broker = commands.choices["broker"]  # `cometmq broker` runs a broker; these inspect one
    broker_commands = broker.add_subparsers(
        dest="broker_command", metavar="COMMAND", title="commands (without one, the broker runs)"
    )
    ha_status = add_admin_command(
        broker_commands,
        "ha-status",
        _broker_ha_status,
        help="show a broker's replication state (a master's slaves, a slave's master link)",
        description=(
            "Ask the broker at ADDR for its replication state (GET_BROKER_HA_STATUS). A master lists "
            "each connected slave: its address, the commit-log offset it acknowledged, how many bytes "
            "it is behind, whether it is in sync, and the bytes per second sent to it. A slave shows "
            "its link to the master: the master's HA address, whether it is connected, its own "
            "commit-log end and when it last read from the master. Both say their epoch and, in "
            "failover mode, the in-sync set as etcd holds it. RocketMQ 4.x brokers do not answer "
            "this request."
        ),
    )
    ha_status.add_argument("addr", metavar="ADDR", help="the broker's HOST:PORT (its client port)")
    for option in ha_status._actions:
        if option.dest == "namesrv":  # the broker at ADDR is asked directly: no NameServer to name
            option.help = argparse.SUPPRESS
    from cometmq.cli._switch import add_role_switch_commands  # it builds on this module's helpers

    add_role_switch_commands(broker_commands)
    from cometmq.cli._ops import (  # they build on this module's helpers
        add_broker_config_commands,
        add_broker_consume_stats_command,
    )

    add_broker_config_commands(broker_commands)
    add_broker_consume_stats_command(broker_commands)


async def warn_of_groups_without_master(admin: AdminClient, cluster: str | None, consequence: str) -> None:
    """Commands that act on every master of a cluster skip a broker group whose master is away (its
    slaves take no changes): name each such group on stderr with *consequence*, so that the command
    is not taken for done everywhere. *cluster* None: the only one (the command failed otherwise)."""
    info = await admin.cluster_info()
    for name in [cluster] if cluster else sorted(info.cluster_addr_table):
        for broker in info.brokers_of(name):
            if broker.master_addr is None:
                slaves = ", ".join(addr for _, addr in sorted(broker.broker_addrs.items()))
                print(
                    f"cometmq: warning: {broker.broker_name} has no master registered, only slaves "
                    f"({slaves}): {consequence}",
                    file=sys.stderr,
                )


def not_done_there(what: str) -> str:
    return f"{what} there (a slave takes no changes); run the command again once its master is back"


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _broker_list(brokers: list[BrokerData]) -> str:
    return ", ".join(f"{b.broker_name} ({b.master_addr})" for b in brokers)


async def _topic_create(admin: AdminClient, args: argparse.Namespace) -> None:
    brokers = await admin.create_topic(
        args.name, queues=args.queues, cluster=args.cluster, order=args.order, attributes=args.attributes
    )
    if args.json:
        print_json({"topic": args.name, "queues": args.queues, "brokers": [b.to_json() for b in brokers]})
    else:
        done = "updated" if args.topic_command == "update" else "created"
        queues = f" with {args.queues} queues" if args.queues else ""
        print(f"{done} topic {args.name}{queues} on {_broker_list(brokers)}")
    await warn_of_groups_without_master(
        admin, args.cluster, not_done_there(f"topic {args.name} was not created")
    )


async def _topic_list(admin: AdminClient, args: argparse.Namespace) -> None:
    info = await admin.cluster_info()
    names = set(info.cluster_addr_table).union(*info.cluster_addr_table.values())
    kinds = {topic: topic_kind(topic, names) for topic in await admin.topic_list()}
    attributes = {name: _attributes_text(values) for name, values in (await admin.topic_attributes()).items()}
    if not args.system:
        topics = [topic for topic, kind in kinds.items() if kind == "user"]
        if args.json:
            print_json(topics)
        else:
            for topic in topics:  # a topic's attributes after its name, when it has any
                print(f"{topic}  {attributes[topic]}" if topic in attributes else topic)
    elif args.json:
        print_json([{"topic": topic, "kind": kind} for topic, kind in kinds.items()])
    else:
        rows = [[topic, kind, attributes.get(topic, "")] for topic, kind in kinds.items()]
        print(format_table(["TOPIC", "KIND", "ATTRIBUTES"], rows))


def _attributes_text(attributes: dict[str, str]) -> str:
    """A topic's attributes as they are given to ``topic create --attributes``."""
    return ",".join(f"+{name}={value}" for name, value in sorted(attributes.items()))


async def _topic_status(admin: AdminClient, args: argparse.Namespace) -> None:
    from cometmq.cli._message import format_time  # that module builds on this one

    queues = await admin.topic_status(args.name)
    if args.json:
        print_json(
            [
                {
                    "brokerName": q.broker_name,
                    "queueId": q.queue_id,
                    "minOffset": q.min_offset,
                    "maxOffset": q.max_offset,
                    "messages": q.messages,
                    "lastStoreTimestamp": q.last_store_timestamp,
                }
                for q in queues
            ]
        )
        return
    rows = [
        [
            q.broker_name,
            q.queue_id,
            q.min_offset,
            q.max_offset,
            q.messages,
            format_time(q.last_store_timestamp) if q.last_store_timestamp > 0 else "-",
        ]
        for q in queues
    ]
    print(format_table(["BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES", "LAST_STORE_TIME"], rows))
    print(f"{counted(sum(q.messages for q in queues), 'message')} in {counted(len(queues), 'queue')}")


async def _topic_route(admin: AdminClient, args: argparse.Namespace) -> None:
    route = await admin.topic_route(args.name)
    attributes = (await admin.topic_attributes()).get(args.name, {})
    if args.json:
        print_json({**route.to_json(), "attributes": attributes})
        return
    brokers = {b.broker_name: b for b in route.broker_datas}
    rows = []
    for queue in sorted(route.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(queue.broker_name)
        addrs = (
            ", ".join(
                f"{addr}" if i == 0 else f"{addr} (slave {i})"
                for i, addr in sorted(broker.broker_addrs.items())
            )
            if broker is not None
            else "-"
        )
        rows.append(
            [
                queue.broker_name,
                broker.cluster if broker is not None else "-",
                addrs,
                queue.read_queue_nums,
                queue.write_queue_nums,
                perm_text(queue.perm),
            ]
        )
    print(format_table(["BROKER", "CLUSTER", "ADDRESS", "READ", "WRITE", "PERM"], rows))
    if attributes:
        print(f"attributes: {_attributes_text(attributes)}")


async def _topic_delete(admin: AdminClient, args: argparse.Namespace) -> None:
    brokers = await admin.delete_topic(args.name, cluster=args.cluster)
    if args.json:
        print_json({"topic": args.name, "brokers": [b.to_json() for b in brokers]})
    else:
        print(f"deleted topic {args.name} from {_broker_list(brokers)} and the name server")
    await warn_of_groups_without_master(
        admin, args.cluster, not_done_there(f"topic {args.name} was not deleted")
    )


def _first_number(text: str | None) -> str:
    """putTps-style stats are rates over the last 10 s, 1 min and 10 min; show the first (a broker
    that has not measured one yet leaves it empty)."""
    first = (text or "").split(" ")[0]
    if not first:
        return "-"
    try:
        return f"{float(first):.1f}"
    except ValueError:
        return first


async def _not_a_broker(addr: str, error: CometMQError, args: argparse.Namespace) -> str | None:
    """What ``addr`` is when it is none of a broker's client ports but an address easily taken for
    one: a name server, or a master's HA port. None when it looks like a broker after all."""
    if isinstance(error, ConnectionClosedError):
        return (
            f"{addr} closed the connection without answering: it is not a broker's client port. A "
            "master's HA port (haListenPort, by default its client port + 1) does that; give the client "
            "port, as 'cometmq cluster list' shows it"
        )
    if not isinstance(error, BrokerError) or error.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        return None
    try:
        async with AdminClient(addr, timeout=args.timeout, **security(args).client_options()) as other:
            await other.cluster_info()
    except (CometMQError, OSError):
        return None
    return (
        f"{addr} is a name server, not a broker: give a broker's client port, as "
        f"'cometmq cluster list -n {addr}' shows it"
    )


async def _broker_ha_status(admin: AdminClient, args: argparse.Namespace) -> None:
    try:
        status = await admin.ha_status(args.addr)
    except (BrokerError, ConnectionClosedError) as exc:
        what = await _not_a_broker(args.addr, exc, args)
        if what is None:
            raise
        raise CometMQError(what) from None
    if args.json:
        print_json(status.to_json())
        return
    if status.master:
        print(
            f"{args.addr} is a master: commit log ends at {status.master_commit_log_max_offset}, "
            f"{status.in_sync_slave_nums} slave(s) in sync{_epoch_text(status)}"
        )
        if not status.ha_connection_info:
            print("no slave is connected")
            return
        rows = [
            [c.addr, c.slave_ack_offset, c.diff, "yes" if c.in_sync else "no", c.transferred_byte_in_second]
            for c in status.ha_connection_info
        ]
        print(format_table(["SLAVE", "ACKED_OFFSET", "BEHIND_BYTES", "IN_SYNC", "BYTES_PER_S"], rows))
        return
    link = status.ha_client_runtime_info
    last_read = (
        datetime.fromtimestamp(link.last_read_timestamp / 1000).isoformat(sep=" ", timespec="seconds")
        if link.last_read_timestamp > 0
        else "never"
    )
    print(f"{args.addr} is a slave{_epoch_text(status)}")
    print(
        format_table(
            ["MASTER", "CONNECTED", "OWN_END", "LAST_READ", "BYTES_PER_S"],
            [
                [
                    link.master_addr or "(unknown)",
                    "yes" if link.is_activated else "no",
                    link.max_offset,
                    last_read,
                    link.transferred_byte_in_second,
                ]
            ],
        )
    )


def _epoch_text(status: HARuntimeInfo) -> str:
    """The broker's epoch and, in failover mode, the in-sync set it knows, to end its summary line;
    nothing from a broker that reports neither."""
    text = f"; epoch {status.epoch}" if status.epoch else ""
    if status.failover:
        text += "; failover through etcd"
        if status.in_sync_replicas:  # the master's
            text += f", in-sync broker ids: {_in_sync_text(status)}"
    return text


def _in_sync_text(status: HARuntimeInfo | None) -> str:
    if status is None or not status.in_sync_replicas:
        return "-"
    return ",".join(str(i) for i in status.in_sync_replicas)


def _role(runtime: dict[str, str], broker_id: int) -> str:
    """The broker's role as RocketMQ names it (ASYNC_MASTER, SYNC_MASTER, SLAVE); from its id when the
    broker did not answer."""
    role = runtime.get("brokerRole")
    if role:
        return role
    return "MASTER" if broker_id == MASTER_ID else "SLAVE"


def _replication_lag(runtime: dict[str, str], master: dict[str, str] | None) -> dict[str, Any]:
    """A slave's lag behind its master, as far as both brokers said: ``lagBytes`` (commit-log ends)
    and ``lagSeconds`` (last message store times; unknown while the slave has stored nothing)."""
    lag: dict[str, Any] = {}
    if master is None:
        return lag
    with contextlib.suppress(KeyError, ValueError):
        lag["lagBytes"] = max(int(master["commitLogMaxOffset"]) - int(runtime["commitLogMaxOffset"]), 0)
    with contextlib.suppress(KeyError, ValueError):
        master_time, slave_time = int(master[LAST_STORE_TIME]), int(runtime[LAST_STORE_TIME])
        if slave_time > 0:
            lag["lagSeconds"] = max(master_time - slave_time, 0) / 1000
    return lag


async def _cluster_list(admin: AdminClient, args: argparse.Namespace) -> None:
    info = await admin.cluster_info()
    entries = [
        (cluster, broker.broker_name, broker_id, addr)
        for cluster in sorted(info.cluster_addr_table)
        for broker in info.brokers_of(cluster)
        for broker_id, addr in sorted(broker.broker_addrs.items())
    ]

    async def runtime(addr: str) -> dict[str, str]:
        # Statistics are extra: a broker that cannot answer still gets its row.
        try:
            return await admin.broker_runtime_info(addr)
        except (CometMQError, OSError, ValueError):
            return {}

    async def ha(addr: str) -> HARuntimeInfo | None:
        # RocketMQ 4.x brokers do not answer GET_BROKER_HA_STATUS: their row shows no epoch.
        try:
            return await admin.ha_status(addr)
        except (CometMQError, OSError, ValueError):
            return None

    runtimes, ha_states = await asyncio.gather(
        asyncio.gather(*(runtime(addr) for _, _, _, addr in entries)),
        asyncio.gather(*(ha(addr) for _, _, _, addr in entries)),
    )
    masters = {
        name: rt
        for (_, name, broker_id, _), rt in zip(entries, runtimes, strict=True)
        if broker_id == MASTER_ID and rt
    }
    lags = [
        {} if broker_id == MASTER_ID else _replication_lag(rt, masters.get(name))
        for (_, name, broker_id, _), rt in zip(entries, runtimes, strict=True)
    ]
    if args.json:
        print_json(
            [
                {
                    "cluster": cluster,
                    "brokerName": name,
                    "brokerId": broker_id,
                    "addr": addr,
                    "role": _role(rt, broker_id),
                    **lag,
                    **(
                        {}
                        if ha is None
                        else {
                            "epoch": ha.epoch,
                            "inSyncReplicas": ha.in_sync_replicas,
                            "failover": ha.failover,
                        }
                    ),
                    "runtime": rt,
                }
                for (cluster, name, broker_id, addr), rt, lag, ha in zip(
                    entries, runtimes, lags, ha_states, strict=True
                )
            ]
        )
        return
    if not entries:
        print("no broker is registered")
        return
    rows = [
        [
            cluster,
            name,
            broker_id,
            addr,
            _role(rt, broker_id),
            ha.epoch if ha is not None and ha.epoch else "-",
            _in_sync_text(ha),
            lag.get("lagBytes", "-"),
            f"{lag['lagSeconds']:.1f}" if "lagSeconds" in lag else "-",
            rt.get("brokerVersionDesc", "-"),
            _first_number(rt.get("putTps")),
            _first_number(rt.get("getTransferedTps", rt.get("getTransferredTps"))),
            rt.get("msgPutTotalTodayNow", "-"),
            rt.get("msgGetTotalTodayNow", "-"),
        ]
        for (cluster, name, broker_id, addr), rt, lag, ha in zip(
            entries, runtimes, lags, ha_states, strict=True
        )
    ]
    print(
        format_table(
            [
                "CLUSTER",
                "BROKER",
                "ID",
                "ADDRESS",
                "ROLE",
                "EPOCH",
                "IN_SYNC",
                "LAG_BYTES",
                "LAG_S",
                "VERSION",
                "IN_TPS",
                "OUT_TPS",
                "IN_TODAY",
                "OUT_TODAY",
            ],
            rows,
        )
    )
