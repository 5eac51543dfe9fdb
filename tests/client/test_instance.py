"""ClientInstance without a cluster: route listeners, route refreshes after an unreachable broker, and
route answers from a stand-in name server."""

from __future__ import annotations

import pytest
from client_support import run

from cometmq.client._instance import ClientInstance
from cometmq.errors import (
    BrokerError,
    ConfigError,
    ConnectionClosedError,
    ProtocolError,
    RemotingTimeoutError,
)
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.namesrv_headers import GetRouteInfoRequestHeader
from cometmq.protocol.route import TopicRouteData
from cometmq.remoting import Connection, Dispatcher, RemotingServer


def test_a_route_that_disappears_on_refresh_is_reported_to_the_listeners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instance = ClientInstance("127.0.0.1:1")
    seen: list[tuple[str, TopicRouteData | None]] = []
    instance.add_route_listener(lambda topic, route: seen.append((topic, route)))
    route = TopicRouteData()
    instance._learn_route("Orders", route)
    assert seen == [("Orders", route)]

    async def deleted(topic: str) -> TopicRouteData | None:
        return None  # what fetch_route answers once no broker holds the topic

    monkeypatch.setattr(instance, "fetch_route", deleted)
    run(instance.refresh_routes())
    assert seen == [("Orders", route), ("Orders", None)]
    run(instance.refresh_routes())  # forgotten: nothing more to report
    assert seen == [("Orders", route), ("Orders", None)]


def test_an_unreachable_broker_refreshes_its_topic_route_at_most_once_a_second_per_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instance = ClientInstance("127.0.0.1:1")
    now = [100.0]
    instance.clock = lambda: now[0]
    fetched: list[str] = []

    async def fetch(topic: str) -> TopicRouteData | None:
        fetched.append(topic)
        return TopicRouteData()

    monkeypatch.setattr(instance, "fetch_route", fetch)
    lost = ConnectionClosedError("cannot connect to 127.0.0.1:2")

    async def scenario() -> None:
        for _ in range(5):  # every queue's pull to the dead broker fails
            await instance.refresh_route_if_unreachable("Orders", lost)
        await instance.refresh_route_if_unreachable("Payments", RemotingTimeoutError("no answer"))
        await instance.refresh_route_if_unreachable("Refunds", BrokerError(ResponseCode.SYSTEM_ERROR, "busy"))
        # A broker that answers, even with a refusal, is reachable; one that does not serve may have
        # lost its mastership.
        assert fetched == ["Orders", "Payments"]
        now[0] += 0.5
        await instance.refresh_route_if_unreachable("Orders", lost)
        assert fetched == ["Orders", "Payments"]
        now[0] += 0.5
        await instance.refresh_route_if_unreachable("Orders", lost)
        assert fetched == ["Orders", "Payments", "Orders"]
        deposed = BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "the mastership lease lapsed")
        await instance.refresh_route_if_unreachable("Refunds", deposed)
        assert fetched == ["Orders", "Payments", "Orders", "Refunds"]

    run(scenario())


def test_a_malformed_route_answer_is_a_protocol_error_naming_the_field() -> None:
    asked: list[GetRouteInfoRequestHeader] = []

    def answer(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        asked.append(GetRouteInfoRequestHeader.decode(request.ext_fields))
        return request.response(body=b'{"brokerDatas":[{"cluster":"C"}],"queueDatas":[]}')

    async def scenario() -> None:
        namesrv = RemotingServer(Dispatcher({RequestCode.GET_ROUTEINFO_BY_TOPIC: answer}), "127.0.0.1", 0)
        await namesrv.start()
        instance = ClientInstance(f"127.0.0.1:{namesrv.port}")
        try:
            with pytest.raises(ProtocolError, match="has no field brokerName"):
                await instance.fetch_route("Orders")
        finally:
            await instance.close()
            await namesrv.stop()

    run(scenario())
    assert asked == [GetRouteInfoRequestHeader(topic="Orders", accept_standard_json_only=True)]


def test_a_server_that_does_not_know_name_server_requests_is_named_as_no_name_server() -> None:
    async def scenario() -> None:
        nothing = RemotingServer(Dispatcher({}), "127.0.0.1", 0)  # refuses every request code
        await nothing.start()
        addr = f"127.0.0.1:{nothing.port}"
        instance = ClientInstance(addr)
        try:
            with pytest.raises(ConfigError) as raised:
                await instance.fetch_route("Orders")
        finally:
            await instance.close()
            await nothing.stop()
        assert str(raised.value) == (
            f"{addr} is not a name server: it does not serve name-server request"
            f" {RequestCode.GET_ROUTEINFO_BY_TOPIC} (response code {ResponseCode.REQUEST_CODE_NOT_SUPPORTED})"
        )

    run(scenario())
