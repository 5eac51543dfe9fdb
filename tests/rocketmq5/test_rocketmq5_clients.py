"""The official RocketMQ 5.x Python client (rocketmq-python-client, pinned by scripts/_rocketmq5.sh) through
CometMQ's gRPC proxy: its Producer, SimpleConsumer and PushConsumer, each test against a standalone's proxy
and against a proxy in front of two brokers."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from client5 import Client5, Event, Scenarios
from proxied import ProxiedCluster, ProxiedStandalone, admin

from waiting import wait_until_blocking

Servers = ProxiedStandalone | ProxiedCluster


@pytest.fixture
def client(proxied: Servers, tmp_path: Path) -> Scenarios:
    return Scenarios(proxied.endpoints, tmp_path)


def topic(server: Servers, name: str, message_type: str) -> str:
    admin(server.namesrv, "topic", "create", name, "--queues", "2", "-a", f"+message.type={message_type}")
    return name


def group(server: Servers, name: str, *options: str) -> str:
    admin(server.namesrv, "group", "create", name, *options)
    return name


def ids(run: Client5, event: str = "sent") -> list[str]:
    return [e["message_id"] for e in run.named(event)]


def in_message_groups(events: list[Event]) -> dict[str, list[str]]:
    bodies: dict[str, list[str]] = defaultdict(list)
    for event in events:
        bodies[event["message_group"]].append(event["body"])
    return dict(bodies)


# apache.rocketmq.v2.Code's for a message whose properties do not fit its topic's message type.
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014

# What the FIFO tests send: 12 messages in 3 message groups, message i in group-<i mod 3>.
FIFO_ORDER = {f"group-{g}": [f"msg-{i}" for i in range(g, 12, 3)] for g in range(3)}


def dead_letters(server: Servers, group_name: str) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = json.loads(admin(server.namesrv, "dlq", "list", group_name, "--json"))
    return letters


# ------------------------------------------------------------------------------------------------ Producer


def test_normal_messages_arrive_intact_at_a_simple_consumer(proxied: Servers, client: Scenarios) -> None:
    name = topic(proxied, "Normal5", "NORMAL")
    sent = client.produce(
        name, "--count", "10", "--tag", "TagA", "--keys-prefix", "key-", "--property", "color=red"
    )
    consumer = client.simple_consume(name, group(proxied, "GID_normal5"), "--until-acked", "10")

    received = consumer.named("received")
    assert sorted(ids(consumer, "received")) == sorted(ids(sent))
    for event in received:
        index = int(event["body"].removeprefix("msg-"))
        assert (event["topic"], event["tag"], event["keys"]) == (name, "TagA", [f"key-{index}"])
        assert event["properties"]["color"] == "red"
        assert event["delivery_attempt"] == 1


def test_a_tag_filter_receives_only_its_tag(proxied: Servers, client: Scenarios) -> None:
    name = topic(proxied, "Tagged5", "NORMAL")
    client.produce(name, "--count", "3", "--tag", "Skip")
    wanted = client.produce(name, "--count", "3", "--tag", "Take", "--body-prefix", "take-")
    consumer = client.simple_consume(name, group(proxied, "GID_tag5"), "--tag", "Take", "--until-acked", "3")
    assert sorted(ids(consumer, "received")) == sorted(ids(wanted))


def test_fifo_messages_of_each_message_group_arrive_in_send_order(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Fifo5", "FIFO")
    client.produce(name, "--count", "12", "--message-groups", "3")
    consumer = client.simple_consume(name, group(proxied, "GID_fifo5", "--fifo"), "--until-acked", "12")
    assert in_message_groups(consumer.named("received")) == FIFO_ORDER


def test_a_fifo_message_not_acked_holds_back_the_next_of_its_group_until_it_comes_again(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "FifoHeld5", "FIFO")
    client.produce(name, "--count", "2", "--message-groups", "1")
    # One message a receive; each first delivery is left unacked, its invisible duration cut to 1 s: the
    # message comes again before the next of its group is delivered at all.
    consumer = client.simple_consume(
        name, group(proxied, "GID_fifoheld5", "--fifo"), "--max-messages", "1", "--ack-from-attempt", "2",
        "--change-invisible", "1", "--until-acked", "2",
    )  # fmt: skip
    received = [(e["body"], e["delivery_attempt"]) for e in consumer.named("received")]
    assert received == [("msg-0", 1), ("msg-0", 2), ("msg-1", 1), ("msg-1", 2)]


def test_a_fifo_send_to_a_normal_topic_is_refused(proxied: Servers, client: Scenarios) -> None:
    name = topic(proxied, "NotFifo5", "NORMAL")
    with client.start("produce", name, "--message-groups", "1") as producer:
        assert not producer.finish()["ok"]
    # Refused by the client, from the route's accepted types, or else by the proxy.
    [error] = producer.named("error")
    assert "FIFO" in error["message"] or error["code"] == MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, error


# The 5.1.2 client sends the number its message was given as the seconds of the delivery timestamp: its
# example gives seconds, its own tests milliseconds; the proxy takes both.
@pytest.mark.parametrize(
    "delay", [("--delay-s", "3"), ("--delay-ms", "3000")], ids=["seconds", "milliseconds"]
)
def test_a_delay_message_is_received_not_before_its_delivery_time(
    proxied: Servers, client: Scenarios, delay: tuple[str, str]
) -> None:
    unit = delay[0].removeprefix("--delay-")
    name = topic(proxied, f"Delay5{unit}", "DELAY")
    consumer_group = group(proxied, f"GID_delay5{unit}")
    with client.start("simple-consume", name, "--group", consumer_group, "--until-acked", "1") as consumer:
        consumer.wait_for("started")
        client.produce(name, *delay)
        consumer.result()
    [received] = consumer.named("received")
    assert received["delivery_timestamp"] is not None
    assert received["received_at"] >= received["delivery_timestamp"]


def test_a_committed_transaction_is_delivered_and_a_rolled_back_one_is_not(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Tx5", "TRANSACTION")
    # Each checker answers as its producer ends, should the broker check before the end arrives.
    rolled_back = client.transaction(name, "--end", "rollback", "--check", "rollback", "--body-prefix", "no-")
    committed = client.transaction(name, "--end", "commit", "--check", "commit", "--body-prefix", "yes-")
    consumer = client.simple_consume(name, group(proxied, "GID_tx5"), "--until-acked", "1")
    # The rolled-back half was ended first: had it been delivered, it would have come first.
    assert ids(consumer, "received") == ids(committed)
    assert ids(rolled_back) != ids(committed)


def test_a_transaction_left_open_is_settled_by_the_checker(proxied: Servers, client: Scenarios) -> None:
    name = topic(proxied, "TxCheck5", "TRANSACTION")
    rolled_back = client.transaction(name, "--end", "none", "--check", "rollback", "--body-prefix", "no-")
    committed = client.transaction(name, "--end", "none", "--check", "commit", "--body-prefix", "yes-")
    assert ids(rolled_back, "checked")[:1] == ids(rolled_back)
    assert ids(committed, "checked")[:1] == ids(committed)
    consumer = client.simple_consume(name, group(proxied, "GID_txcheck5"), "--until-acked", "1")
    assert ids(consumer, "received") == ids(committed)


# ------------------------------------------------------------------------------------------ SimpleConsumer


def test_a_message_not_acked_comes_again_after_its_invisible_time(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Again5", "NORMAL")
    [sent] = ids(client.produce(name))
    # 10 s: the least a receive may ask for (RocketMQ proxy's minInvisibleTimeMillsForRecv).
    consumer = client.simple_consume(
        name,
        group(proxied, "GID_again5"),
        "--invisible",
        "10",
        "--ack-from-attempt",
        "2",
        "--until-acked",
        "1",
    )
    received = consumer.named("received")
    assert [(e["message_id"], e["delivery_attempt"]) for e in received] == [(sent, 1), (sent, 2)]


def test_a_changed_invisible_duration_brings_the_message_back_then(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Change5", "NORMAL")
    [sent] = ids(client.produce(name))
    # Received for 300 s, longer than the test waits: only the change to 1 s brings it back in time.
    consumer = client.simple_consume(
        name, group(proxied, "GID_change5"), "--invisible", "300", "--change-invisible", "1",
        "--ack-from-attempt", "2", "--until-acked", "1",
    )  # fmt: skip
    assert ids(consumer, "changed") == [sent]
    assert [(e["message_id"], e["delivery_attempt"]) for e in consumer.named("acked")] == [(sent, 2)]


def test_a_message_never_acked_goes_to_the_dead_letter_queue_after_max_attempts(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Dead5", "NORMAL")
    dead_group = group(proxied, "GID_dead5", "--retry-max-times", "1")
    sent = ids(client.produce(name))
    consumer = client.simple_consume(
        name, dead_group, "--ack-from-attempt", "0", "--change-invisible", "1", "--until-received", "2"
    )
    assert [e["delivery_attempt"] for e in consumer.named("received")] == [1, 2]
    letters = wait_until_blocking(lambda: dead_letters(proxied, dead_group), message="the dead letter")
    assert [letter["msgId"] for letter in letters] == sent, letters


# ------------------------------------------------------------------------------------------- PushConsumer


def test_a_push_consumer_consumes_every_message_and_a_failed_one_again(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "Push5", "NORMAL")
    sent = ids(client.produce(name, "--count", "6"))
    consumer = client.push_consume(
        name, group(proxied, "GID_push5"), "--fail-calls", "1", "--until-consumed", "6"
    )
    assert sorted(ids(consumer, "failed")) == sorted(sent)
    assert sorted(ids(consumer, "consumed")) == sorted(sent)
    # Failed, the message went back to the server and came again.
    assert {e["delivery_attempt"] for e in consumer.named("consumed")} == {2}


def test_a_fifo_push_consumer_consumes_each_message_group_in_order(
    proxied: Servers, client: Scenarios
) -> None:
    name = topic(proxied, "PushFifo5", "FIFO")
    client.produce(name, "--count", "12", "--message-groups", "3")
    # Each message's first call fails: FIFO consumption calls it again before the next of its group.
    consumer = client.push_consume(
        name, group(proxied, "GID_pushfifo5", "--fifo"), "--fail-calls", "1", "--until-consumed", "12"
    )
    assert in_message_groups(consumer.named("consumed")) == FIFO_ORDER
