"""Who may change a broker's route: only requests naming its address, until it expires; a closed
connection takes away only what it registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cometmq.errors import RequestRefused
from cometmq.namesrv import NameServer
from cometmq.namesrv.route_info import RouteInfoManager
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.namesrv_headers import BrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody, TopicRouteData
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import RemotingClient
from waiting import wait_until

from .broker_sim import addr_of, ask, ask_route, register

Run = Callable[..., Any]
REAL_ADDR = "127.0.0.1:10911"  # where broker_sim.register puts broker-a
IMPOSTOR_ADDR = "10.6.6.6:10911"


async def masters_of(client: RemotingClient, namesrv: NameServer, topic: str) -> dict[str, str] | None:
    """broker name → master address in the route of *topic*, None when it has no route."""
    reply = await ask_route(client, addr_of(namesrv), topic)
    if reply.code != ResponseCode.SUCCESS:
        return None
    route = TopicRouteData.decode(reply.body)
    return {data.broker_name: data.broker_addrs[0] for data in route.broker_datas}


def assert_refused(reply: RemotingCommand, holder: str) -> None:
    """NO_PERMISSION, with a remark naming broker-a, the address holding it and the expiry time."""
    assert reply.code == ResponseCode.NO_PERMISSION
    remark = reply.remark or ""
    assert "broker-a id 0" in remark and f"registered at {holder}" in remark
    assert "silent for 120 s" in remark


def test_a_registration_naming_another_address_is_refused_and_the_route_stays(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    real, impostor, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        assert (await register(real, addr_of(namesrv))).code == ResponseCode.SUCCESS
        reply = await register(impostor, addr_of(namesrv), broker_addr=IMPOSTOR_ADDR, topics={"Taken": 8})
        assert_refused(reply, REAL_ADDR)
        assert await masters_of(tool, namesrv, "TopicTest") == {"broker-a": REAL_ADDR}
        assert await masters_of(tool, namesrv, "Taken") is None
        # The real broker goes on registering as before.
        assert (await register(real, addr_of(namesrv), counter=2)).code == ResponseCode.SUCCESS

    run(scenario())


def test_closing_the_impostors_connection_does_not_remove_the_real_broker(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    real, impostor, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(real, addr_of(namesrv))
        assert_refused(await register(impostor, addr_of(namesrv), broker_addr=IMPOSTOR_ADDR), REAL_ADDR)
        # Accepted on the impostor's connection: a broker of its own at its own address, and another
        # name at the real broker's address (the address alone proves nothing more).
        await register(
            impostor, addr_of(namesrv), broker_name="marker", broker_addr=IMPOSTOR_ADDR, topics={"M": 1}
        )
        await register(impostor, addr_of(namesrv), broker_name="broker-z", topics={"Z": 1})
        assert await masters_of(tool, namesrv, "Z") == {"broker-z": REAL_ADDR}

        impostor.close_connection(addr_of(namesrv))

        async def impostor_gone() -> bool:
            return (
                await masters_of(tool, namesrv, "M") is None and await masters_of(tool, namesrv, "Z") is None
            )

        await wait_until(impostor_gone, message="the entries the impostor registered gone")
        assert await masters_of(tool, namesrv, "TopicTest") == {"broker-a": REAL_ADDR}

    run(scenario())


def test_a_broker_that_registered_again_on_a_new_connection_outlives_its_old_one(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    old_connection, new_connection, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(old_connection, addr_of(namesrv))
        await register(old_connection, addr_of(namesrv), broker_name="marker", broker_addr=IMPOSTOR_ADDR)
        await register(new_connection, addr_of(namesrv))
        old_connection.close_connection(addr_of(namesrv))

        async def marker_gone() -> bool:
            masters = await masters_of(tool, namesrv, "TopicTest")
            return masters is not None and "marker" not in masters

        await wait_until(marker_gone, message="the old connection's other entry gone")
        assert await masters_of(tool, namesrv, "TopicTest") == {"broker-a": REAL_ADDR}

    run(scenario())


def test_an_unregister_naming_another_address_is_refused(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    real, impostor, tool = make_client(), make_client(), make_client()
    header = BrokerRequestHeader(
        broker_name="broker-a", broker_addr=IMPOSTOR_ADDR, cluster_name="DefaultCluster", broker_id=0
    )

    async def scenario() -> None:
        await register(real, addr_of(namesrv))
        reply = await ask(impostor, addr_of(namesrv), RequestCode.UNREGISTER_BROKER, header)
        assert_refused(reply, REAL_ADDR)
        assert await masters_of(tool, namesrv, "TopicTest") == {"broker-a": REAL_ADDR}

    run(scenario())


@pytest.mark.parametrize("scan_interval_s", [0.05, 3600.0], ids=["expiry-scan", "expired-at-registration"])
def test_after_the_real_broker_expires_a_new_address_may_register(
    run: Run,
    start_namesrv: Callable[..., NameServer],
    make_client: Callable[[], RemotingClient],
    scan_interval_s: float,
) -> None:
    # The name server's clock is the test's: the broker expires when the test says 120 s have passed,
    # whether the expiry scan drops it first or the new registration finds it expired.
    now = [1000.0]
    namesrv = start_namesrv(scan_interval_s=scan_interval_s, clock=lambda: now[0])
    real, successor, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(real, addr_of(namesrv))
        assert_refused(await register(successor, addr_of(namesrv), broker_addr=IMPOSTOR_ADDR), REAL_ADDR)
        now[0] += 120.0
        assert_refused(await register(successor, addr_of(namesrv), broker_addr=IMPOSTOR_ADDR), REAL_ADDR)

        now[0] += 1.0

        async def successor_registered() -> bool:
            reply = await register(successor, addr_of(namesrv), broker_addr=IMPOSTOR_ADDR)
            return reply.code == ResponseCode.SUCCESS

        await wait_until(successor_registered, message="the successor's registration accepted")
        assert await masters_of(tool, namesrv, "TopicTest") == {"broker-a": IMPOSTOR_ADDR}
        # Now the successor holds the entry: the old address coming back is the one refused.
        reply = await register(make_client(), addr_of(namesrv))
        assert_refused(reply, IMPOSTOR_ADDR)

    run(scenario())


# The same rules on the bookkeeping alone, against a model, for any sequence of requests.

EXPIRY_S = 120.0
Entry = tuple[str, int]  # broker name, broker id

_register = st.tuples(
    st.just("register"),
    st.sampled_from(["a", "b"]),
    st.sampled_from([0, 1]),
    st.sampled_from(["x:1", "y:1", "z:1"]),
    st.sampled_from([0, 1, 2]),
)
_unregister = st.tuples(
    st.just("unregister"),
    st.sampled_from(["a", "b"]),
    st.sampled_from([0, 1]),
    st.sampled_from(["x:1", "y:1"]),
)
_close = st.tuples(st.just("close"), st.sampled_from([0, 1, 2]))
_wait = st.tuples(st.just("wait"), st.sampled_from([1.0, 60.0, EXPIRY_S + 1]))
_scan = st.tuples(st.just("scan"))


class OwnershipModel:
    """What the routes should hold: each entry's address and connection, each address's last sign of
    life. Its register and unregister return the live address that refuses the request, if any."""

    def __init__(self) -> None:
        self.entries: dict[Entry, tuple[str, object]] = {}
        self.last_update: dict[str, float] = {}

    def register(self, entry: Entry, broker_addr: str, connection: object, now: float) -> str | None:
        held = self.entries.get(entry)
        if held is not None and held[0] != broker_addr:
            if now - self.last_update[held[0]] <= EXPIRY_S:
                return held[0]
            self._drop(lambda key, addr, conn: addr == held[0])  # expired: its address goes entirely
        self._drop(lambda key, addr, conn: key[0] == entry[0] and addr == broker_addr)  # slave turned master
        self.entries[entry] = (broker_addr, connection)
        self.last_update[broker_addr] = now
        return None

    def unregister(self, entry: Entry, broker_addr: str, now: float) -> str | None:
        held = self.entries.get(entry)
        if held is None:
            return None
        if held[0] != broker_addr:
            return held[0] if now - self.last_update[held[0]] <= EXPIRY_S else None
        self._drop(lambda key, addr, conn: key == entry)
        return None

    def close(self, connection: object) -> None:
        self._drop(lambda key, addr, conn: conn is connection)

    def scan(self, now: float) -> None:
        self._drop(lambda key, addr, conn: now - self.last_update[addr] > EXPIRY_S)

    def _drop(self, doomed: Callable[[Entry, str, object], bool]) -> None:
        self.entries = {key: held for key, held in self.entries.items() if not doomed(key, *held)}
        in_use = {addr for addr, _ in self.entries.values()}
        self.last_update = {addr: t for addr, t in self.last_update.items() if addr in in_use}


@given(st.lists(st.one_of(_register, _unregister, _close, _wait, _scan), max_size=40))
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine is slow to start
def test_only_the_holders_address_or_connection_or_expiry_changes_an_entry(
    operations: list[tuple[Any, ...]],
) -> None:
    routes = RouteInfoManager(broker_expiry_s=EXPIRY_S)
    model = OwnershipModel()
    connections = [object(), object(), object()]
    body = RegisterBrokerBody(DataVersion(1, 1), {"T": TopicConfig("T", 4, 4)})
    now = 0.0
    for kind, *args in operations:
        refusing: str | None = None
        try:
            if kind == "register":
                name, broker_id, addr, connection = args[0], args[1], args[2], connections[args[3]]
                refusing = model.register((name, broker_id), addr, connection, now)
                routes.register_broker(
                    cluster="C",
                    broker_addr=addr,
                    broker_name=name,
                    broker_id=broker_id,
                    ha_server_addr="",
                    body=body,
                    connection=connection,
                    now=now,
                )
            elif kind == "unregister":
                name, broker_id, addr = args
                refusing = model.unregister((name, broker_id), addr, now)
                routes.unregister_broker(broker_addr=addr, broker_name=name, broker_id=broker_id, now=now)
            elif kind == "close":
                model.close(connections[args[0]])
                routes.connection_closed(connections[args[0]])
            elif kind == "wait":
                now += args[0]
            else:
                model.scan(now)
                routes.scan_not_active(now)
        except RequestRefused as refusal:
            assert refusal.code == ResponseCode.NO_PERMISSION
            assert refusing is not None and f"registered at {refusing}" in refusal.remark
        else:
            assert refusing is None

        held_addrs = {
            (name, broker_id): addr
            for name, data in routes.broker_addr_table.items()
            for broker_id, addr in data.broker_addrs.items()
        }
        assert held_addrs == {key: addr for key, (addr, _) in model.entries.items()}
        assert routes.registering_connection == {key: conn for key, (_, conn) in model.entries.items()}
        assert {
            addr: live.last_update for addr, live in routes.broker_live_table.items()
        } == model.last_update
        assert routes.cluster_addr_table == (
            {"C": {name for name, _ in model.entries}} if model.entries else {}
        )
