"""ClientInstance without a cluster: route listeners."""

from __future__ import annotations

import pytest
from client_support import run

from cometmq.client._instance import ClientInstance
from cometmq.protocol.route import TopicRouteData


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
