"""The dashboard over plain HTTP: the charts' JSON, escaping of what clients wrote, and the checks on
posted forms."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from dashboard_support import LiveCluster, send_traced

from cometmq.client import Message, Producer
from cometmq.errors import BrokerError
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from waiting import wait_until_blocking


def get(cluster: LiveCluster, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(cluster.url + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get_json(cluster: LiveCluster, path: str) -> Any:
    status, body = get(cluster, path)
    assert status == 200, body
    return json.loads(body)


def post(cluster: LiveCluster, path: str, fields: dict[str, str], **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(
        cluster.url + path,
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def send(cluster: LiveCluster, *messages: Message) -> list[Any]:
    async def go() -> list[Any]:
        async with Producer("PID_dashboard_http", cluster.namesrv) as producer:
            return [await producer.send(msg) for msg in messages]

    return cluster.run(go())


def topic_exists(cluster: LiveCluster, topic: str) -> bool:
    try:
        cluster.run(cluster.admin.topic_route(topic))
    except BrokerError:
        return False
    return True


def test_rates_json_has_one_series_per_broker_and_sees_sends(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Rated", 1))

    def latest_in() -> float:
        send(cluster, Message("Rated", b"r"))
        series = get_json(cluster, "/api/rates")[f"broker-a {cluster.broker_addr}"]
        assert set(series) == {"t", "in", "out"}
        assert len(series["t"]) == len(series["in"]) == len(series["out"])
        assert series["t"] == sorted(series["t"])
        return float(series["in"][-1] or 0)

    wait_until_blocking(lambda: latest_in() > 0, message="a sampled in-rate above 0")
    assert list(get_json(cluster, "/api/rates")) == [f"broker-a {cluster.broker_addr}"]


def test_lag_json_follows_a_group_and_is_empty_for_an_unknown_one(cluster: LiveCluster) -> None:
    assert get_json(cluster, "/api/groups/GID_nobody/lag") == {"t": [], "lag": []}
    group = "GID_dashboard_http_lag"
    cluster.run(cluster.admin.create_topic("LagJson", 1))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group)))
    cluster.run(cluster.admin.reset_offsets(group, "LagJson", to="latest"))
    send(cluster, *(Message("LagJson", b"x") for _ in range(3)))
    assert get(cluster, f"/groups/{group}")[0] == 200  # opening the page starts sampling the group
    wait_until_blocking(
        lambda: get_json(cluster, f"/api/groups/{group}/lag")["lag"][-1:] == [3.0],
        message="the sampled lag of the group",
    )


def test_message_page_escapes_what_the_client_wrote(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Hostile", 1))
    body = b'"><img src=x onerror=alert(1)>'
    [sent] = send(
        cluster,
        Message("Hostile", body, keys="<k>", properties={"<p>": "<script>alert(2)</script>"}),
    )
    status, html = get(cluster, f"/messages/view?id={sent.offset_msg_id}&topic=Hostile")
    assert status == 200
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html and "&lt;p&gt;" in html
    assert "<img" not in html and "<script>alert" not in html and "<p>" not in html
    status, html = get(cluster, "/messages?by=key&topic=Hostile&value=%3Ck%3E")
    assert status == 200 and "&lt;k&gt;" in html and "<k>" not in html


def test_trace_page_escapes_a_tag_the_client_wrote(cluster: LiveCluster) -> None:
    message = Message("HostileTraced", b"x", tags="<script>alert(3)</script>")
    msg_id = send_traced(cluster, message, "PID_dash_hostile", "GID_dash_hostile")
    status, html = get(cluster, f"/trace?id={msg_id}")
    assert status == 200 and "tags &lt;script&gt;alert(3)&lt;/script&gt;" in html
    assert "<script>alert" not in html


def test_a_trace_topic_that_does_not_exist_holds_no_trace(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/trace?id=0123456789ABCDEF0123456789ABCDEF&trace_topic=NoSuchTraces")
    assert status == 200 and 'id="no-trace"' in html and "NoSuchTraces" in html


def test_a_binary_body_is_shown_as_hex_escapes(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Binary", 1))
    [sent] = send(cluster, Message("Binary", b"\x00\x01ok\\"))
    status, html = get(cluster, f"/messages/view?id={sent.offset_msg_id}&topic=Binary")
    assert status == 200 and r"\x00\x01ok\x5c" in html and "binary as hex escapes" in html


def test_a_notice_comes_only_from_the_dashboard(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/topics?flash=forged-notice")
    assert status == 200 and "forged-notice" not in html and 'class="flash' not in html


def test_a_form_posted_from_another_site_is_refused(cluster: LiveCluster) -> None:
    status, _ = post(cluster, "/topics", {"topic": "Forged"}, Origin="http://evil.example")
    assert status == 403
    status, _ = post(cluster, "/topics", {"topic": "Forged"}, Origin="null")  # a sandboxed frame
    assert status == 403
    status, _ = post(cluster, "/topics", {"topic": "Forged"}, Referer="http://evil.example/page")
    assert status == 403
    assert not topic_exists(cluster, "Forged")
    host = urllib.parse.urlsplit(cluster.url).netloc
    status, html = post(cluster, "/topics", {"topic": "Posted", "queues": "1"}, Origin=f"http://{host}")
    assert status == 200 and "topic Posted created" in html
    assert topic_exists(cluster, "Posted")


def test_a_form_must_be_url_encoded(cluster: LiveCluster) -> None:
    request = urllib.request.Request(
        cluster.url + "/topics", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as exc:
        assert exc.code == 415
    else:
        raise AssertionError("a JSON body was taken as a form")


def test_a_failed_action_says_why_on_the_page_it_came_from(cluster: LiveCluster) -> None:
    status, html = post(cluster, "/topics", {"topic": "bad name!", "back": "/topics"})
    assert status == 200 and "illegal" in html and "<h1>Topics</h1>" in html
    status, _ = post(cluster, "/topics", {"topic": "bad name!", "back": "//evil.example/"})
    assert status == 200  # redirected to the dashboard's own page, not away


def test_a_page_the_cluster_refuses_shows_the_error(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/topics/NoSuchTopic")
    assert status == 502 and 'id="error"' in html and "response code" in html
