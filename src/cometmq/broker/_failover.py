"""The broker as the failover election sees it (``cometmq.failover.ReplicaNode``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cometmq.failover import LeaderInfo

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker


class BrokerReplica:
    """A broker's replica of its group's commit log, which the election makes master or slave."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def broker_id(self) -> int:
        return self._broker.own_id

    def replica_end(self) -> int:
        return self._broker.store.replica_end()

    def last_epoch(self) -> int:
        epochs = self._broker.store.epochs()
        return epochs[-1].epoch if epochs else 0

    def addresses(self) -> tuple[str, str]:
        config = self._broker.config
        return config.broker_addr, f"{config.broker_ip1}:{self._broker.ha_port}"

    async def become_master(self, epoch: int) -> None:
        await self._broker.become_master(epoch)

    async def become_slave(self, leader: LeaderInfo) -> None:
        await self._broker.become_slave(leader.addr, leader.ha_addr, leader.epoch)

    async def stop_following(self) -> None:
        await self._broker.stop_following()

    def in_sync_candidates(self) -> frozenset[int]:
        broker = self._broker
        if broker.is_slave or broker.ha_server is None:
            return frozenset()
        return broker.ha_server.in_sync_candidates()

    def set_in_sync(self, members: frozenset[int]) -> None:
        self._broker.set_in_sync(members)
