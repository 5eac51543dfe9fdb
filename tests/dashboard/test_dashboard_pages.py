"""The dashboard's pages in a real browser (headless Chromium) against a live broker: each page shows
the cluster's numbers, and its forms change the cluster (checked through an AdminClient)."""

from __future__ import annotations

from typing import Any

from dashboard_support import SAMPLE_INTERVAL_S, LiveCluster, send, send_to_dead_letters, send_traced
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.expected_conditions import staleness_of, text_to_be_present_in_element
from selenium.webdriver.support.ui import Select, WebDriverWait

from cometmq.client import Message
from cometmq.errors import BrokerError
from cometmq.protocol.naming import dlq_topic, retry_topic
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from waiting import DEFAULT_TIMEOUT_S, wait_until_blocking


def open_page(browser: WebDriver, cluster: LiveCluster, path: str) -> None:
    browser.get(cluster.url + path)


def cells(browser: WebDriver, table_id: str) -> list[list[str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def submit(browser: WebDriver, form_id: str, **fields: str) -> None:
    form = browser.find_element(By.ID, form_id)
    for name, value in fields.items():
        element = form.find_element(By.NAME, name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    click(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))


def click(browser: WebDriver, button: WebElement) -> None:
    """Click a link or a form's button and wait for the page the form leads to (so that nothing of the page
    before is read as the answer)."""
    page = browser.find_element(By.TAG_NAME, "html")
    button.click()
    WebDriverWait(browser, DEFAULT_TIMEOUT_S).until(staleness_of(page))


def flash(browser: WebDriver) -> str:
    found = browser.find_elements(By.CSS_SELECTOR, ".flash")
    return found[0].text if found else ""


def test_cluster_page_shows_the_broker_and_its_rates_chart(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Rates", 1))
    send(cluster, *(Message("Rates", b"x") for _ in range(5)))
    open_page(browser, cluster, "/")
    [row] = cells(browser, "brokers")
    assert row[:6] == ["DefaultCluster", "broker-a", "0", "ASYNC_MASTER", cluster.broker_addr, row[5]]
    assert row[5].startswith("CometMQ ")
    runtime = cluster.run(cluster.admin.broker_runtime_info(cluster.broker_addr))
    assert int(row[8]) >= 5 and int(runtime["msgPutTotalTodayNow"]) >= int(row[8])
    chart = browser.find_element(By.CSS_SELECTOR, ".chart")
    wait_until_blocking(
        lambda: int(chart.get_attribute("data-points") or 0) >= 2, message="the rates chart to get samples"
    )
    assert chart.find_elements(By.TAG_NAME, "canvas"), "uPlot drew no canvas"


def test_creating_a_topic_in_the_form_creates_it(browser: WebDriver, cluster: LiveCluster) -> None:
    open_page(browser, cluster, "/topics")
    submit(browser, "create-topic", topic="Created", queues="3")
    assert "topic Created created with 3 queues" in flash(browser)
    route = cluster.run(cluster.admin.topic_route("Created"))
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 3)]
    assert len(cells(browser, "queues")) == 3  # redirected to the topic's page
    open_page(browser, cluster, "/topics")
    assert ["Created", "user"] in cells(browser, "topics")


def test_topic_page_shows_each_queue_and_the_total(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Counted", 2))
    send(cluster, *(Message("Counted", b"m%d" % i) for i in range(7)))
    status = cluster.run(cluster.admin.topic_status("Counted"))
    open_page(browser, cluster, "/topics/Counted")
    assert browser.find_element(By.ID, "total").text == "7"
    shown = [row[:5] for row in cells(browser, "queues")]
    assert shown == [
        [q.broker_name, str(q.queue_id), str(q.min_offset), str(q.max_offset), str(q.messages)]
        for q in status
    ]


def test_sending_a_test_message_stores_it(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Tested", 1))
    open_page(browser, cluster, "/topics/Tested")
    submit(browser, "send", tags="t1", keys="order-7", body="hello from the dashboard")
    assert "sent message" in flash(browser)
    [found] = cluster.run(cluster.admin.query_message("Tested", "order-7"))
    assert found.body == b"hello from the dashboard"
    assert decode_properties(found.properties)["TAGS"] == "t1"
    assert browser.find_element(By.ID, "total").text == "1"


def test_deleting_a_topic_needs_its_name_and_deletes_it(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Doomed", 1))
    open_page(browser, cluster, "/topics/Doomed")
    submit(browser, "delete", confirm="not-it")
    assert "type the topic's name" in flash(browser)
    cluster.run(cluster.admin.topic_route("Doomed"))  # still there
    submit(browser, "delete", confirm="Doomed")
    assert "topic Doomed deleted" in flash(browser)

    def gone() -> bool:
        try:
            cluster.run(cluster.admin.topic_route("Doomed"))
        except BrokerError:
            return True
        return False

    wait_until_blocking(gone, message="the topic to be gone from the route")


def test_group_page_shows_lag_and_resets_offsets(browser: WebDriver, cluster: LiveCluster) -> None:
    group = "GID_dashboard_lag"
    cluster.run(cluster.admin.create_topic("Lagging", 2))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group)))
    send(cluster, *(Message("Lagging", b"old") for _ in range(4)))
    cluster.run(cluster.admin.reset_offsets(group, "Lagging", to="latest"))
    send(cluster, *(Message("Lagging", b"new") for _ in range(6)))

    open_page(browser, cluster, f"/groups/{group}")
    progress = cluster.run(cluster.admin.consume_progress(group, "Lagging"))
    assert progress.total_lag == 6
    assert browser.find_element(By.ID, "total-lag").text == "6"
    assert [row[5] for row in cells(browser, "progress")] == [str(q.lag) for q in progress.queues]
    assert browser.find_element(By.ID, "members").text == "No consumer of this group is online."
    chart = browser.find_element(By.CSS_SELECTOR, ".chart")
    wait_until_blocking(
        lambda: int(chart.get_attribute("data-points") or 0) >= 1, message="the lag chart to get samples"
    )

    submit(browser, "reset", topic="Lagging", to="earliest", confirm=group)
    assert "reset to earliest: 2 queues" in flash(browser)
    after = cluster.run(cluster.admin.consume_progress(group, "Lagging"))
    assert [q.consumer_offset for q in after.queues] == [0, 0]
    assert after.total_lag == 10
    assert browser.find_element(By.ID, "total-lag").text == "10"


def test_groups_page_lists_a_group(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(
        cluster.admin.create_group(SubscriptionGroupConfig("GID_dashboard_listed", retry_max_times=3))
    )
    open_page(browser, cluster, "/groups")
    rows = {row[0]: row for row in cells(browser, "groups")}
    assert rows["GID_dashboard_listed"][1:6] == ["DefaultCluster", "broker-a", "yes", "allowed", "3"]


def test_finding_a_message_by_key_and_resending_it_to_a_group(
    browser: WebDriver, cluster: LiveCluster
) -> None:
    group = "GID_dashboard_resend"
    cluster.run(cluster.admin.create_topic("Found", 1))
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group)))
    [sent] = send(cluster, Message("Found", b"<b>not bold</b>", keys="k-42", properties={"note": "<i>x</i>"}))
    open_page(browser, cluster, "/messages")
    submit(browser, "search", by="key", topic="Found", value="k-42")
    [row] = cells(browser, "found")
    assert row[:4] == [sent.msg_id, "Found", "", "k-42"]
    click(browser, browser.find_element(By.LINK_TEXT, sent.msg_id))
    assert browser.find_element(By.ID, "body").text == "<b>not bold</b>"
    props = {
        row.find_element(By.TAG_NAME, "th").text: row.find_element(By.TAG_NAME, "td").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#properties tr")
    }
    assert props["note"] == "<i>x</i>" and props["UNIQ_KEY"] == sent.msg_id

    submit(browser, "resend", group=group)
    assert f"resent to group {group}" in flash(browser)

    def copies() -> list[Any]:
        try:
            return cluster.run(cluster.admin.query_message(retry_topic(group), sent.msg_id, unique=True))
        except BrokerError:  # the retry topic not routed yet
            return []

    [copy] = wait_until_blocking(copies, message="the copy in the retry topic")
    copied = decode_properties(copy.properties)
    assert (
        copy.body == b"<b>not bold</b>" and copied["RETRY_TOPIC"] == "Found" and copied["note"] == "<i>x</i>"
    )


def test_finding_messages_by_time_range(browser: WebDriver, cluster: LiveCluster) -> None:
    cluster.run(cluster.admin.create_topic("Timed", 1))
    sent = send(cluster, *(Message("Timed", b"t%d" % i) for i in range(3)))
    open_page(browser, cluster, "/messages?by=time&topic=Timed")
    assert [row[0] for row in cells(browser, "found")] == [result.msg_id for result in sent]


def test_dead_letters_page_lists_and_resends(browser: WebDriver, cluster: LiveCluster) -> None:
    group = "GID_dashboard_dlq"
    cluster.run(cluster.admin.create_topic("Failing", 1))
    [sent] = send(cluster, Message("Failing", b"poison"))
    cluster.run(send_to_dead_letters(cluster, sent.offset_msg_id, group))
    wait_until_blocking(
        lambda: cluster.run(cluster.admin.dead_letters(group)), message=f"the {dlq_topic(group)} topic routed"
    )
    open_page(browser, cluster, f"/dlq?group={group}")
    [row] = cells(browser, "dead-letters")
    assert row[:3] == [sent.msg_id, "Failing", "1"] and row[4] == "poison"
    click(browser, browser.find_element(By.CSS_SELECTOR, "#dead-letters button.resend"))
    assert "resent 1 of 1 dead letters" in flash(browser)
    [dead] = cluster.run(cluster.admin.dead_letters(group))
    assert cluster.run(cluster.admin.resent_copies(dead))
    assert sum(q.messages for q in cluster.run(cluster.admin.topic_status("Failing"))) == 2

    click(browser, browser.find_element(By.CSS_SELECTOR, "#dead-letters button.resend"))
    assert "1 skipped" in flash(browser)


def test_trace_page_shows_the_send_and_the_consumption_of_a_traced_message(
    browser: WebDriver, cluster: LiveCluster
) -> None:
    msg_id = send_traced(
        cluster, Message("Traced", b"hello", keys="k-traced"), "PID_dash_traced", "GID_dash_traced"
    )
    open_page(browser, cluster, "/messages")
    submit(browser, "search", by="key", topic="Traced", value="k-traced")
    click(browser, browser.find_element(By.CSS_SELECTOR, "#found a.trace"))
    assert browser.find_element(By.NAME, "id").get_attribute("value") == msg_id
    rows = cells(browser, "timeline")
    assert [(row[1], row[2], row[3]) for row in rows] == [
        ("Pub", "sent", "PID_dash_traced"),
        ("SubBefore", "consume started", "GID_dash_traced"),
        ("SubAfter", "consumed", "GID_dash_traced"),
    ]
    assert rows[0][6] == "success" and f"stored at {cluster.broker_addr}" in rows[0][7]
    assert rows[2][6] == "success"


def test_trace_page_says_when_a_message_has_no_trace(browser: WebDriver, cluster: LiveCluster) -> None:
    open_page(browser, cluster, "/trace")
    submit(browser, "trace", id="0123456789ABCDEF0123456789ABCDEF")
    # Read once the answer's page is in place: a node looked up while it still replaces the form's page
    # can belong to neither.
    WebDriverWait(browser, DEFAULT_TIMEOUT_S, ignored_exceptions=(WebDriverException,)).until(
        text_to_be_present_in_element(
            (By.ID, "no-trace"), "No trace record of message 0123456789ABCDEF0123456789ABCDEF"
        )
    )
    assert not browser.find_elements(By.ID, "timeline")


def test_a_chart_with_one_point_says_it_is_collecting_data(browser: WebDriver, cluster: LiveCluster) -> None:
    group = "GID_dashboard_one_point"
    cluster.run(cluster.admin.create_group(SubscriptionGroupConfig(group)))
    # Every chart's JSON answered with one sample, whatever the sampler has taken by then.
    one_point = """
        window.fetch = function () {
            return Promise.resolve(new Response('{"t": [1700000000], "lag": [3]}'));
        };
    """
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": one_point})
    try:
        open_page(browser, cluster, f"/groups/{group}")
        chart = browser.find_element(By.CSS_SELECTOR, ".chart")
        wait_until_blocking(lambda: chart.get_attribute("data-points") == "1", message="the one sample drawn")
        assert chart.text == f"collecting data — a point every {SAMPLE_INTERVAL_S} s"
        assert not chart.find_elements(By.TAG_NAME, "canvas")
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", script)
