"""The dashboard over plain HTTP: the charts' JSON, escaping of what clients wrote, and the checks on
posted forms."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from dashboard_support import LiveCluster, send, send_to_dead_letters, send_traced

from cometmq.client import Message
from cometmq.dashboard import _app as dashboard_app
from cometmq.dashboard import allowed_hosts
from cometmq.dashboard._history import MAX_GROUPS, Sampler, Series
from cometmq.errors import BrokerError
from cometmq.protocol.naming import PERM_READ, PERM_WRITE
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
    status, html = get(cluster, "/groups/GID_any?cluster=NoSuchCluster")
    assert status == 502 and 'id="error"' in html and "NoSuchCluster" in html and "Try again" in html


def test_a_topic_that_does_not_exist_is_not_found(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/topics/NoSuchTopic")
    assert status == 404 and "topic NoSuchTopic does not exist" in html and "Try again" not in html


def test_a_group_without_settings_offsets_or_members_is_not_found(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/groups/GID_nowhere")
    assert status == 404 and "group GID_nowhere does not exist on any broker" in html
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig("GID_created_only")))
    status, html = get(cluster, "/groups/GID_created_only")
    assert status == 200 and 'id="error"' not in html


def test_a_search_by_key_without_a_topic_says_a_topic_is_needed(cluster: LiveCluster) -> None:
    status, html = get(cluster, "/messages?by=key&topic=&value=order-1")
    assert status == 200 and "a search by key needs a topic" in html


def test_pages_link_the_favicon(cluster: LiveCluster) -> None:
    assert '<link rel="icon" href="/static/favicon.svg"' in get(cluster, "/topics")[1]
    status, svg = get(cluster, "/static/favicon.svg")
    assert status == 200 and svg.startswith("<svg")


def test_one_message_is_counted_in_the_singular(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("CountedOnce", 1))
    send(cluster, Message("CountedOnce", b"one"))
    status, html = get(cluster, "/topics/CountedOnce")
    assert status == 200 and '<span id="total">1</span> message stored in all.' in html


def post_as(cluster: LiveCluster, host: str, path: str, fields: dict[str, str], **headers: str) -> int:
    """A form posted to the dashboard's address, calling it ``host`` (the Host header)."""
    port = urllib.parse.urlsplit(cluster.url).port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = urllib.parse.urlencode(fields)
        all_headers = {"Host": host, "Content-Type": "application/x-www-form-urlencoded", **headers}
        connection.request("POST", path, body, all_headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_request_calling_the_dashboard_by_another_name_is_refused(cluster: LiveCluster) -> None:
    port = urllib.parse.urlsplit(cluster.url).port
    rebound = f"rebound.example:{port}"  # a name made to resolve to 127.0.0.1
    fields = {"topic": "Rebound", "queues": "1"}
    assert post_as(cluster, rebound, "/topics", fields, Origin=f"http://{rebound}") == 400
    assert post_as(cluster, rebound, "/topics", fields) == 400
    assert not topic_exists(cluster, "Rebound")
    # The dashboard's own names: the address served on, and the loopback names for a loopback one.
    for name in ("localhost", "127.0.0.1", "[::1]"):
        assert post_as(cluster, f"{name}:{port}", "/topics", {"topic": "Fine", "queues": "1"}) == 303
    # A page at an allowed name but another port is another site.
    origin = f"http://localhost:{port + 1 if port != 65535 else 1}"
    assert post_as(cluster, f"127.0.0.1:{port}", "/topics", fields, Origin=origin) == 403
    assert post_as(cluster, f"127.0.0.1:{port}", "/topics", fields, Origin=f"http://localhost:{port}") == 303
    assert topic_exists(cluster, "Rebound")


def test_allowed_hosts_are_the_address_the_loopback_names_and_more() -> None:
    assert allowed_hosts("127.0.0.1") == ["127.0.0.1", "[::1]", "localhost"]
    assert allowed_hosts("::1") == ["127.0.0.1", "[::1]", "localhost"]
    assert allowed_hosts("10.0.0.5", ["Dash.Example"]) == ["10.0.0.5", "dash.example"]


def post_raw(cluster: LiveCluster, head: bytes, body: bytes = b"") -> bytes:
    """The start of the answer to a POST of /topics with the headers ``head`` and ``body``."""
    port = urllib.parse.urlsplit(cluster.url).port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST /topics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n" + body)
        return conn.recv(100)


def test_a_form_over_a_mebibyte_is_refused_unread(cluster: LiveCluster) -> None:
    form = b"Content-Type: application/x-www-form-urlencoded\r\n"
    # Declares a large body and sends none of it: the answer comes without waiting for it.
    assert post_raw(cluster, form + b"Content-Length: 1073741824\r\n").startswith(b"HTTP/1.1 413 ")
    # Sends a body without saying its length: reading stops past the most a form may be.
    chunk = b"topic=Huge&body=" + b"x" * (1 << 20)
    chunked = b"%x\r\n%s\r\n" % (len(chunk), chunk)  # and no last chunk
    assert post_raw(cluster, form + b"Transfer-Encoding: chunked\r\n", chunked).startswith(b"HTTP/1.1 413 ")
    assert not topic_exists(cluster, "Huge")


def test_resetting_offsets_needs_the_groups_name(cluster: LiveCluster) -> None:
    group = "GID_dashboard_http_reset"
    cluster.run(cluster.admin.create_topic("ResetGuard", 1))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group)))
    send(cluster, Message("ResetGuard", b"x"), Message("ResetGuard", b"y"))
    cluster.run(cluster.admin.reset_offsets(group, "ResetGuard", to="latest"))
    fields = {"topic": "ResetGuard", "to": "earliest"}
    status, html = post(cluster, f"/groups/{group}/reset", fields)
    assert status == 200 and f"type the group&#39;s name ({group})" in html
    assert cluster.run(cluster.admin.consume_progress(group, "ResetGuard")).total_lag == 0
    status, html = post(cluster, f"/groups/{group}/reset", {**fields, "confirm": group})
    assert status == 200 and "reset to earliest" in html
    assert cluster.run(cluster.admin.consume_progress(group, "ResetGuard")).total_lag == 2


def test_fewer_queues_or_less_permission_needs_the_topics_name(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Shrinking", 4))

    def queues_and_perm() -> tuple[int, int, int]:
        [data] = cluster.run(cluster.admin.topic_route("Shrinking")).queue_datas
        return data.read_queue_nums, data.write_queue_nums, data.perm

    refused = "type the topic&#39;s name (Shrinking)"
    for fields in ({"queues": "2", "perm": "RW"}, {"queues": "4", "perm": "R"}, {"queues": "4", "perm": "W"}):
        status, html = post(cluster, "/topics/Shrinking/update", fields)
        assert status == 200 and refused in html, fields
        assert queues_and_perm() == (4, 4, PERM_READ | PERM_WRITE)
    status, html = post(cluster, "/topics/Shrinking/update", {"queues": "6", "perm": "RW"})
    assert status == 200 and "now has 6 queues" in html  # more queues: nothing lost, no name asked
    wait_until_blocking(lambda: queues_and_perm()[0] == 6, message="the route to show 6 queues")
    status, html = post(
        cluster, "/topics/Shrinking/update", {"queues": "2", "perm": "R", "confirm": "Shrinking"}
    )
    assert status == 200 and "now has 2 queues" in html
    wait_until_blocking(lambda: queues_and_perm() == (2, 2, PERM_READ), message="2 read-only queues")


def test_resend_all_resends_at_most_a_clicks_worth(
    cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "GID_dashboard_http_many_dead"
    cluster.run(cluster.admin.create_topic("ManyDead", 1))
    for sent in send(cluster, *(Message("ManyDead", b"d%d" % i) for i in range(3))):
        cluster.run(send_to_dead_letters(cluster, sent.offset_msg_id, group))
    wait_until_blocking(
        lambda: len(cluster.run(cluster.admin.dead_letters(group))) == 3, message="3 dead letters"
    )
    monkeypatch.setattr(dashboard_app, "MAX_RESEND", 2)
    status, html = post(cluster, "/dlq/resend", {"group": group})
    assert status == 200 and "resent 2 of 2 dead letters" in html and "click again for the rest" in html
    status, html = post(cluster, "/dlq/resend", {"group": group})
    assert status == 200 and "resent 1 of 3 dead letters" in html and "2 skipped" in html
    assert "click again" not in html
    assert sum(q.messages for q in cluster.run(cluster.admin.topic_status("ManyDead"))) == 6


def test_dead_letters_of_a_group_that_may_not_consume_are_shown(cluster: LiveCluster) -> None:
    group = "GID_dashboard_http_disabled"
    cluster.run(cluster.admin.create_topic("Disabled", 1))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group, consume_enable=False)))
    [sent] = send(cluster, Message("Disabled", b"stuck"))
    cluster.run(send_to_dead_letters(cluster, sent.offset_msg_id, group))
    # Read as TOOLS_CONSUMER: a pull as the group itself is refused (and would count as its consumption).
    wait_until_blocking(lambda: cluster.run(cluster.admin.dead_letters(group)), message="the dead letter")
    status, html = get(cluster, f"/dlq?group={group}")
    assert status == 200 and sent.msg_id in html


def test_a_group_not_opened_is_sampled_with_the_group_list(cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig("GID_sampled_seldom")))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig("GID_sampled_often")))
    sampler = Sampler(cluster.admin, interval_s=1.0, group_list_interval_s=3600.0)
    sampler.follow("GID_sampled_often", "DefaultCluster")
    for _ in range(3):
        cluster.run(sampler.sample())
    assert len(sampler.group_lag["GID_sampled_seldom"].times) == 1
    assert len(sampler.group_lag["GID_sampled_often"].times) == 3


def test_groups_followed_are_capped(cluster: LiveCluster) -> None:
    sampler = Sampler(cluster.admin)
    for i in range(MAX_GROUPS + 5):
        sampler.follow(f"GID_any_{i}", "DefaultCluster")
    assert len(sampler.followed) == MAX_GROUPS
    sampler.follow("GID_any_0", "DefaultCluster")  # one followed already is kept on
    assert "GID_any_0" in sampler.followed and f"GID_any_{MAX_GROUPS}" not in sampler.followed


def test_a_broker_no_longer_listed_leaves_the_rates(cluster: LiveCluster) -> None:
    sampler = Sampler(cluster.admin)
    sampler.broker_rates["broker-gone 127.0.0.1:1"] = Series(("in", "out"))
    cluster.run(sampler.sample())
    assert list(sampler.broker_rates) == [f"broker-a {cluster.broker_addr}"]


def test_sampling_goes_on_after_an_unexpected_failure(
    cluster: LiveCluster, caplog: pytest.LogCaptureFixture
) -> None:
    sampler = Sampler(cluster.admin, interval_s=0.01)
    calls = 0

    async def failing_sample() -> None:
        nonlocal calls
        calls += 1
        if calls >= 5:
            sampler.stop()
        raise RuntimeError("a bug")

    sampler.sample = failing_sample  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="cometmq.dashboard"):
        cluster.run(sampler.run())
    assert calls == 5
    assert [r.getMessage() for r in caplog.records] == ["dashboard: sampling the cluster failed"]
