"""The election of a broker group's master through etcd, run by every broker in failover mode.

Keys, under ``<prefix>/<cluster>/<brokerName>/`` (values JSON):

- ``state``: ``{"epoch", "leaderId", "inSync"}``, changed only by compare-and-swap on its mod_revision;
- ``leader``: ``{"brokerId", "addr", "haAddr", "epoch"}``, under the master's lease: it goes when the
  master stops renewing it;
- ``members/<brokerId>``: ``{"addr", "haAddr", "end", "epoch", "lastEpoch"}``, under each broker's own
  lease; a member whose ``epoch`` is the one an election is for has reported its final commit-log ``end``
  for it; ``lastEpoch`` is the last epoch its own log holds.

Only a member of the in-sync set may be elected (no unclean election), and among those that reported,
the one with the longest log (then the lowest id): every message the old master acknowledged is on
every in-sync member, so the new master has all of them. The group is founded by the member present
with the longest log (then the lowest id). Every epoch chosen, founding or elected, is past the last
epoch of every member present, so that no broker begins an epoch its log already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._etcd import Compare, EtcdClient, EtcdError, EtcdUnavailable, KeyValue, Put

__all__ = ["Failover", "FailoverStatus", "LeaderInfo", "ReplicaNode", "lease_trusted_until"]

log = logging.getLogger("cometmq.failover")


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    broker_id: int
    addr: str
    ha_addr: str
    epoch: int


@dataclass(frozen=True, slots=True)
class FailoverStatus:
    epoch: int
    leader_id: int | None
    in_sync: frozenset[int]
    etcd_reachable: bool


class ReplicaNode(Protocol):
    """What the election needs of a broker."""

    @property
    def broker_id(self) -> int: ...

    def replica_end(self) -> int:
        """The end of this broker's commit log."""

    def last_epoch(self) -> int:
        """The last epoch this broker's log holds (0: none)."""

    def addresses(self) -> tuple[str, str]:
        """This broker's remoting and HA addresses (``host:port``)."""

    async def become_master(self, epoch: int) -> None:
        """Act as master of *epoch*; an exception means it did not, and the election gives the
        mastership up."""

    async def become_slave(self, leader: LeaderInfo) -> None: ...

    async def stop_following(self) -> None:
        """Stops replicating from the master (if following one): the end is final until told more."""

    def in_sync_candidates(self) -> frozenset[int]:
        """As master: the slaves connected and caught up (HAServer.in_sync_candidates)."""

    def set_in_sync(self, members: frozenset[int]) -> None:
        """As master: the in-sync set as committed in etcd, which SYNC sends wait for. Called right
        after become_master (with the set the master starts with) and whenever a swap succeeded."""


def lease_trusted_until(sent_at: float, ttl_s: float) -> float:
    """When the lease renewed by a keepalive sent at *sent_at* (monotonic) stops being trusted: its TTL
    less a margin (a fifth of it, at least a second) for clock drift and a slow answer."""
    return sent_at + ttl_s - max(1.0, ttl_s / 5)


class _Role(enum.Enum):
    WAITING = "waiting"
    SLAVE = "slave"
    CANDIDATE = "candidate"
    MASTER = "master"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class _State:
    epoch: int
    leader_id: int
    in_sync: frozenset[int]
    revision: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {"epoch": self.epoch, "leaderId": self.leader_id, "inSync": sorted(self.in_sync)}
        ).encode()

    @classmethod
    def decode(cls, kv: KeyValue) -> _State:
        value = json.loads(kv.value)
        return cls(
            int(value["epoch"]), int(value["leaderId"]), frozenset(map(int, value["inSync"])), kv.mod_revision
        )


def _encode_leader(leader: LeaderInfo) -> bytes:
    return json.dumps(
        {"brokerId": leader.broker_id, "addr": leader.addr, "haAddr": leader.ha_addr, "epoch": leader.epoch}
    ).encode()


def _decode_leader(kv: KeyValue) -> LeaderInfo:
    value = json.loads(kv.value)
    return LeaderInfo(int(value["brokerId"]), str(value["addr"]), str(value["haAddr"]), int(value["epoch"]))


class Failover:
    """Runs the election for *node* (broker *broker_id* of *broker_name* in *cluster*) with etcd at
    *endpoints*, and tells the node which role to take."""

    def __init__(
        self,
        node: ReplicaNode,
        endpoints: Sequence[str],
        prefix: str,
        cluster: str,
        broker_name: str,
        broker_id: int,
        lease_ttl_s: int = 5,
    ) -> None:
        if broker_id < 1:
            raise ValueError(f"brokerId must be at least 1 in failover mode, not {broker_id}")
        self._node = node
        self._broker_id = broker_id
        self._ttl = lease_ttl_s
        self._group = f"{prefix.rstrip('/')}/{cluster}/{broker_name}/"
        self._state_key = self._group + "state"
        self._leader_key = self._group + "leader"
        self._members_prefix = self._group + "members/"
        self._etcd = EtcdClient(endpoints, timeout_s=max(1.0, lease_ttl_s / 3))
        self._lease = 0
        self._trusted_until = 0.0
        self._role = _Role.WAITING
        self._following: LeaderInfo | None = None
        self._epoch = 0
        self._state: _State | None = None
        self._leader_id: int | None = None
        self._committed_in_sync: frozenset[int] | None = None
        # The election this broker reported its end for (its member key's epoch), and since when.
        self._reported_epoch = 0
        self._reported_at = 0.0
        self._reachable = True
        self._renewal_sent_at: float | None = None  # monotonic, of the renewal awaiting etcd's answer
        self._waiting_for = ""
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(), name="failover-election"),
            asyncio.create_task(self._keep_alive(), name="failover-keepalive"),
            asyncio.create_task(self._watch(), name="failover-watch"),
        ]

    async def stop(self) -> None:
        """Stops taking part and revokes the lease: the leader key (if held) goes at once, and the
        others elect a master without waiting for the lease to expire."""
        self._role = _Role.STOPPED
        for task in self._tasks:
            task.cancel()
        # return_exceptions: a task's own failure must not keep the lease from being revoked, while a
        # cancellation of stop() itself still reaches its caller.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._lease:
            try:
                await self._etcd.revoke(self._lease)
            except EtcdError as e:
                log.warning("could not revoke the lease on stopping (%s): it expires in %d s", e, self._ttl)
            self._lease = 0
        await self._etcd.close()

    def lease_trusted(self) -> bool:
        """Whether this broker is master and its lease is surely still alive in etcd."""
        return self._role is _Role.MASTER and time.monotonic() < self._trusted_until

    @property
    def etcd_reachable(self) -> bool:
        """Whether etcd is known to answer: False from a request that could not reach it until a renewal
        of the lease that does (a step answered in between does not count), and while a renewal sent
        while the lease was trusted, less than a TTL ago, is unanswered (etcd electing a leader of its
        own after losing a member). Not for a renewal sent before a pause of this process or after it:
        etcd may have answered the one long since, and deposed this broker before the other."""
        pending = self._renewal_sent_at
        if pending is not None and pending < self._trusted_until and time.monotonic() - pending < self._ttl:
            return False
        return self._reachable

    def in_sync_changed(self) -> None:
        """The node's in-sync candidates may have changed: propose them soon."""
        self._wake.set()

    def status(self) -> FailoverStatus:
        state = self._state
        return FailoverStatus(
            epoch=state.epoch if state else 0,
            leader_id=self._leader_id,
            in_sync=state.in_sync if state else frozenset(),
            etcd_reachable=self._reachable,
        )

    # -- the loops -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._step()
            except EtcdUnavailable as e:
                self._set_reachable(False, str(e))
            except EtcdError as e:
                if "lease not found" in str(e) and self._lease:
                    # A put under this broker's lease, which expired meanwhile (its keepalives stalled).
                    self._lease_lost(self._lease)
                else:
                    log.info("etcd refused a step of the election (%s); retrying", e)
            except Exception:
                log.exception("failover step failed; retrying")
            # asyncio.timeout rather than wait_for: Python 3.11's wait_for can swallow a cancellation that
            # arrives as the event is set, and the loop would outlive stop().
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ttl / 3):
                    await self._wake.wait()

    async def _keep_alive(self) -> None:
        sent_at = time.monotonic()
        while True:
            # A renewal every third of the TTL from when the last was sent, not answered: a slow answer
            # (etcd electing a leader) must not leave the lease untrusted before the next one is sent.
            await asyncio.sleep(max(0.0, sent_at + self._ttl / 3 - time.monotonic()))
            sent_at = time.monotonic()
            lease = self._lease
            if not lease:
                continue
            self._renewal_sent_at = sent_at
            try:
                remaining = await self._etcd.keepalive(lease)
            except EtcdUnavailable as e:
                self._set_reachable(False, str(e))
                continue
            except EtcdError as e:
                log.info("etcd refused to renew lease %x (%s); retrying", lease, e)
                continue
            except Exception:  # renewals must go on: a master that stops renewing loses its lease
                log.exception("renewing lease %x failed; retrying", lease)
                continue
            finally:
                self._renewal_sent_at = None
            self._set_reachable(True, "")
            if remaining > 0:
                self._trusted_until = lease_trusted_until(sent_at, self._ttl)
            elif lease == self._lease:
                self._lease_lost(lease)

    async def _watch(self) -> None:
        while True:
            try:
                async for _event in self._etcd.watch(self._group, prefix=True):
                    self._wake.set()
            except EtcdError:
                await asyncio.sleep(self._ttl / 3)
            except Exception:  # without the watch, changes are seen only every ttl/3
                log.exception("watching the group's keys in etcd failed; watching again")
                await asyncio.sleep(self._ttl / 3)
            self._wake.set()

    # -- one step of the election ----------------------------------------------------------------

    async def _step(self) -> None:
        if not self._lease:
            await self._register()
        kvs, _revision = await self._etcd.get_prefix(self._group)
        by_key = {kv.key: kv for kv in kvs}
        state_kv = by_key.get(self._state_key)
        leader_kv = by_key.get(self._leader_key)
        state = _State.decode(state_kv) if state_kv else None
        self._state = state
        leader = _decode_leader(leader_kv) if leader_kv else None
        self._leader_id = leader.broker_id if leader else None
        members = {
            int(kv.key[len(self._members_prefix) :]): json.loads(kv.value)
            for kv in kvs
            if kv.key.startswith(self._members_prefix)
        }
        if state is None:
            await self._found_group(members)
        elif leader_kv is not None and leader is not None:
            if leader_kv.lease == self._lease:
                if self._role is _Role.MASTER:
                    await self._lead(state)
                else:  # won, but taking over broke off (etcd went away): take it up again
                    await self._became_master(leader.epoch, state.in_sync)
            elif leader.broker_id == self._broker_id:
                self._demote_without_leader("the leader key")
                self._wait_for(
                    "the leader key is this broker's from an earlier run: waiting for its lease to expire"
                )
            else:
                await self._follow(leader)
        else:
            await self._elect(state, members)

    async def _register(self) -> None:
        self._lease = await self._etcd.grant(self._ttl)
        self._reported_epoch = 0
        await self._put_member(end=self._node.replica_end(), epoch=self._state.epoch if self._state else 0)

    async def _put_member(self, *, end: int, epoch: int) -> None:
        addr, ha_addr = self._node.addresses()
        value = json.dumps(
            {
                "addr": addr,
                "haAddr": ha_addr,
                "end": end,
                "epoch": epoch,
                "lastEpoch": self._node.last_epoch(),
            }
        ).encode()
        await self._etcd.put(f"{self._members_prefix}{self._broker_id}", value, lease=self._lease)

    def _leader_put(self, epoch: int) -> Put:
        addr, ha_addr = self._node.addresses()
        return Put(
            self._leader_key, _encode_leader(LeaderInfo(self._broker_id, addr, ha_addr, epoch)), self._lease
        )

    def _epoch_past(self, epoch: int, members: dict[int, dict[str, Any]]) -> int:
        """An epoch past *epoch*, this broker's last and every member's last (``lastEpoch``)."""
        last = [int(member.get("lastEpoch", 0)) for member in members.values()]
        return max(epoch, self._node.last_epoch(), *last) + 1

    async def _found_group(self, members: dict[int, dict[str, Any]]) -> None:
        """No state yet: the member present with the longest log (then the lowest id) writes it and is
        the master of the first epoch, past every member's last: moving from static roles, or after
        etcd lost its data, the broker with the most data leads and the others replicate from it."""
        ends = {broker_id: int(member["end"]) for broker_id, member in members.items()}
        ends[self._broker_id] = self._node.replica_end()
        best = max(ends, key=lambda broker_id: (ends[broker_id], -broker_id))
        if best != self._broker_id:
            self._wait_for(
                f"broker {best} has the longest log ({ends[best]}): waiting for it to found the group"
            )
            return
        epoch = self._epoch_past(0, members)
        me = frozenset({self._broker_id})
        state = _State(epoch, self._broker_id, me)
        founded = await self._etcd.txn(
            [Compare.absent(self._state_key)],
            [Put(self._state_key, state.encode()), self._leader_put(epoch)],
            [],
        )
        if founded:
            self._state = state  # what status() tells until the next step reads it back
            log.info("founded the group's state in etcd at epoch %d", epoch)
            await self._became_master(epoch, me)
        else:
            self._wake.set()

    async def _became_master(self, epoch: int, in_sync: frozenset[int]) -> None:
        # The lease held the leader key when the transaction succeeded, but how long it has left is not
        # known until renewed.
        sent_at = time.monotonic()
        lease = self._lease
        if await self._etcd.keepalive(lease) == 0:
            self._lease_lost(lease)
            return
        self._following = None
        self._waiting_for = ""
        self._leader_id = self._broker_id
        try:
            await self._node.become_master(epoch)
        except Exception:
            log.exception(
                "broker %d could not become master of epoch %d; giving the mastership up",
                self._broker_id,
                epoch,
            )
            await self._give_up(lease)
            return
        # Master (and its lease trusted) only once the broker acts as one; the keepalives sent meanwhile
        # may have renewed it further.
        self._trusted_until = max(self._trusted_until, lease_trusted_until(sent_at, self._ttl))
        self._role = _Role.MASTER
        self._epoch = epoch
        log.info("broker %d is master of epoch %d", self._broker_id, epoch)
        self._committed_in_sync = in_sync
        self._node.set_in_sync(in_sync)

    async def _give_up(self, lease: int) -> None:
        """Gives the leader key up by revoking *lease* (or, etcd unreachable, by no longer renewing it):
        the others elect a master, this broker among them under a lease granted afresh after a pause (a
        failure that lasts is not retried in a tight loop)."""
        self._role = _Role.CANDIDATE
        self._lease = 0
        self._leader_id = None
        try:
            await self._etcd.revoke(lease)
        except EtcdError as e:
            log.warning("could not revoke lease %x (%s): the leader key goes when it expires", lease, e)
            await asyncio.sleep(self._ttl / 3)
            raise  # the step failed: etcd may be unreachable
        await asyncio.sleep(self._ttl / 3)

    async def _lead(self, state: _State) -> None:
        """As master: propose the in-sync set ({me} and the caught-up slaves) when it changed."""
        committed = state.in_sync
        if committed != self._committed_in_sync:
            # A swap whose answer was lost may have landed: the broker waits for the set etcd holds before
            # it is asked for candidates, so a member that may be elected is never left unwaited for.
            self._committed_in_sync = committed
            self._node.set_in_sync(committed)
        proposed = frozenset({self._broker_id}) | self._node.in_sync_candidates()
        if proposed != state.in_sync:
            swapped = await self._etcd.txn(
                [
                    Compare.mod_revision(self._state_key, state.revision),
                    Compare(self._leader_key, "LEASE", self._lease),
                ],
                [Put(self._state_key, _State(state.epoch, self._broker_id, proposed).encode())],
                [],
            )
            if swapped:
                committed = proposed
                log.info("in-sync set of epoch %d: %s", state.epoch, sorted(proposed))
            else:
                self._wake.set()
        if committed != self._committed_in_sync:
            self._committed_in_sync = committed
            self._node.set_in_sync(committed)

    async def _follow(self, leader: LeaderInfo) -> None:
        if self._role is _Role.SLAVE and self._following == leader:
            return
        if self._role is _Role.MASTER:
            log.warning(
                "broker %d is no longer master of epoch %d: broker %d leads epoch %d",
                self._broker_id,
                self._epoch,
                leader.broker_id,
                leader.epoch,
            )
        self._role = _Role.SLAVE
        self._following = leader
        self._epoch = leader.epoch
        self._waiting_for = ""
        log.info(
            "broker %d follows broker %d (epoch %d) at %s",
            self._broker_id,
            leader.broker_id,
            leader.epoch,
            leader.ha_addr,
        )
        await self._node.become_slave(leader)

    def _demote_without_leader(self, what: str) -> None:
        if self._role is _Role.MASTER:
            self._role = _Role.CANDIDATE
            log.warning(
                "broker %d is no longer master of epoch %d: %s is gone", self._broker_id, self._epoch, what
            )

    def _lease_lost(self, lease: int) -> None:
        log.warning("etcd no longer has lease %x of broker %d", lease, self._broker_id)
        self._lease = 0
        self._demote_without_leader("its lease")
        self._wake.set()

    async def _elect(self, state: _State, members: dict[int, dict[str, Any]]) -> None:
        self._demote_without_leader("the leader key")
        if self._broker_id not in state.in_sync:
            self._wait_for("not in the in-sync set; waiting for a master")
            return
        epoch = self._epoch_past(state.epoch, members)
        if self._reported_epoch != epoch:
            # Stop following first: the end reported is final, nothing more arrives from the old master.
            self._role = _Role.CANDIDATE
            self._following = None
            await self._node.stop_following()
            end = self._node.replica_end()
            await self._put_member(end=end, epoch=epoch)
            self._reported_epoch = epoch
            self._reported_at = time.monotonic()
            log.info(
                "broker %d is a candidate for epoch %d with its log's end at %d", self._broker_id, epoch, end
            )
            self._wake.set()
            return
        reports = {
            broker_id: int(member["end"])
            for broker_id, member in members.items()
            if broker_id in state.in_sync and member.get("epoch") == epoch
        }
        silent = {broker_id for broker_id in members if broker_id in state.in_sync} - reports.keys()
        if silent and time.monotonic() - self._reported_at < self._ttl:
            self._wait_for(
                f"waiting for in-sync members {sorted(silent)} to report their ends for epoch {epoch}"
            )
            return
        if self._broker_id not in reports:
            return
        best = max(reports, key=lambda broker_id: (reports[broker_id], -broker_id))
        if best != self._broker_id:
            self._wait_for(
                f"broker {best} has the longest log ({reports[best]}): waiting for it to lead epoch {epoch}"
            )
            return
        won = await self._etcd.txn(
            [Compare.absent(self._leader_key), Compare.mod_revision(self._state_key, state.revision)],
            [
                self._leader_put(epoch),
                Put(self._state_key, _State(epoch, self._broker_id, frozenset({self._broker_id})).encode()),
            ],
            [],
        )
        if won:
            self._state = _State(epoch, self._broker_id, frozenset({self._broker_id}))
            await self._became_master(epoch, frozenset({self._broker_id}))
        else:
            self._wake.set()

    def _wait_for(self, reason: str) -> None:
        """Logs why this broker waits, once for as long as the reason stays the same."""
        if reason != self._waiting_for:
            self._waiting_for = reason
            log.info("broker %d: %s", self._broker_id, reason)

    def _set_reachable(self, reachable: bool, error: str) -> None:
        """Logs once when etcd stops answering and once when it answers again, not once per retry."""
        if reachable == self._reachable:
            return
        self._reachable = reachable
        if reachable:
            log.info("broker %d: etcd is reachable again, the election goes on", self._broker_id)
        else:
            log.warning(
                "broker %d: etcd is unreachable (%s): roles stay as they are, and no master is elected "
                "until it is back",
                self._broker_id,
                error,
            )
