"""``cometmq broker promote | demote``: switch a broker's role by hand, in a group without etcd.

The broker is told through NOTIFY_BROKER_ROLE_CHANGED (RocketMQ 5's request). A promoted broker becomes
its group's master with an epoch above every epoch the group's brokers report, so that the others,
following it, truncate what they hold beyond its history; a demoted master becomes a slave under its
own brokerId and follows the master the name server names.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from cometmq.cli._admin import add_admin_command
from cometmq.client import AdminClient
from cometmq.errors import CometMQError
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.route import BrokerData

__all__ = ["add_role_switch_commands"]


def add_role_switch_commands(broker_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    promote = add_admin_command(
        broker_commands,
        "promote",
        _promote,
        help="make a slave its group's master (groups without etcd)",
        description=(
            "Make the broker at ADDR its group's master (broker id 0), with an epoch one above the "
            "highest any broker of its group reports (GET_BROKER_HA_STATUS), through "
            "NOTIFY_BROKER_ROLE_CHANGED. Demote the group's master first: while it answers as master, "
            "promote refuses. The group's other brokers follow the new master once the name server "
            "names it, and cut what they hold beyond its history. Brokers in failover mode refuse: "
            "etcd elects their masters."
        ),
    )
    promote.add_argument("addr", metavar="ADDR", help="the broker's HOST:PORT (its client port)")
    demote = add_admin_command(
        broker_commands,
        "demote",
        _demote,
        help="make a master a slave of its group (groups without etcd)",
        description=(
            "Make the master at ADDR a slave (under its own brokerId, which must be 1 or more) that "
            "follows the master the name server names, through NOTIFY_BROKER_ROLE_CHANGED. Sends "
            "waiting for their slaves when it is demoted are answered. Brokers in failover mode "
            "refuse: etcd elects their masters."
        ),
    )
    demote.add_argument("addr", metavar="ADDR", help="the master's HOST:PORT (its client port)")


async def _group_of(admin: AdminClient, addr: str) -> BrokerData:
    """The broker group the name server registers *addr* in; CometMQError when it registers none."""
    info = await admin.cluster_info()
    for broker in info.broker_addr_table.values():
        if addr in broker.broker_addrs.values():
            return broker
    raise CometMQError(
        f"no broker is registered at {addr} with the name server at {';'.join(admin.namesrv_addrs)}: "
        "give a broker's client port, as 'cometmq cluster list' shows it"
    )


async def _states(admin: AdminClient, addrs: list[str]) -> dict[str, HARuntimeInfo | None]:
    """Each broker's replication state; None for one that does not answer."""

    async def ask(addr: str) -> HARuntimeInfo | None:
        try:
            return await admin.ha_status(addr)
        except (CometMQError, OSError):
            return None

    answers = await asyncio.gather(*(ask(addr) for addr in addrs))
    return dict(zip(addrs, answers, strict=True))


def _answering(state: HARuntimeInfo | None, addr: str, group: BrokerData) -> HARuntimeInfo:
    """The state of the broker to switch, which must answer and not be in failover mode (which its
    broker would refuse too, after the command had asked the whole group)."""
    if state is None:
        raise CometMQError(f"the broker at {addr} does not answer GET_BROKER_HA_STATUS: is it running?")
    if state.failover:
        raise CometMQError(
            f"{addr} ({group.broker_name}) runs in failover mode: etcd elects its group's master, "
            "roles are not switched by hand (stop the master to have another elected)"
        )
    return state


async def _promote(admin: AdminClient, args: argparse.Namespace) -> None:
    group = await _group_of(admin, args.addr)
    states = await _states(admin, sorted(set(group.broker_addrs.values())))
    target = _answering(states[args.addr], args.addr, group)
    if target.master:
        print(f"{args.addr} ({group.broker_name}) is already the master, epoch {target.epoch}")
        return
    masters = [addr for addr, state in states.items() if state is not None and state.master]
    if masters:
        raise CometMQError(
            f"{group.broker_name} has a master answering at {masters[0]}: demote it first "
            f"('cometmq broker demote {masters[0]}'), so that two masters never take sends"
        )
    epoch = max(state.epoch for state in states.values() if state is not None) + 1
    silent = [addr for addr, state in states.items() if state is None]
    if silent:
        print(
            f"cometmq: warning: {', '.join(silent)} did not answer: the epoch is chosen without theirs",
            file=sys.stderr,
        )
    await admin.notify_role_changed(args.addr, args.addr, epoch)
    print(f"{args.addr} ({group.broker_name}) is the master from epoch {epoch}")


async def _demote(admin: AdminClient, args: argparse.Namespace) -> None:
    group = await _group_of(admin, args.addr)
    state = _answering((await _states(admin, [args.addr]))[args.addr], args.addr, group)
    if not state.master:
        print(f"{args.addr} ({group.broker_name}) is already a slave, epoch {state.epoch}")
        return
    # No master named: the broker follows whichever master the name server registers next.
    await admin.notify_role_changed(args.addr, "", state.epoch)
    print(
        f"{args.addr} ({group.broker_name}) is a slave now; it follows the master the name server "
        "names ('cometmq broker promote ADDR' makes one)"
    )
