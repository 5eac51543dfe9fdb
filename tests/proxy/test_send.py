"""SendMessage: what a 5.x producer sends is stored as RocketMQ's proxy stores it, and what RocketMQ's proxy
refuses is refused with the code the clients expect."""

from __future__ import annotations

import time

import pytest
from proxy_support import ProxiedStandalone, Stub, client_metadata, message, new_client_id

from cometmq.client import blocking
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from waiting import wait_until_blocking


def send(stub: Stub, *messages: v2.Message) -> pb.SendMessageResponse:
    response: pb.SendMessageResponse = stub.SendMessage(
        pb.SendMessageRequest(messages=messages), metadata=client_metadata(new_client_id())
    )
    return response


def stored(proxied: ProxiedStandalone, message_id: str, topic: str) -> DecodedRecord:
    """The record a message id names in *topic*, once the broker's index has it."""
    with blocking.AdminClient(proxied.namesrv) as admin:

        def found() -> DecodedRecord | None:
            return next((r for r in admin.view_message(message_id, topic) if r.topic == topic), None)

        record = wait_until_blocking(found, message=f"message {message_id} stored in {topic}")
        assert record is not None
        return record


def test_normal_message_is_stored_with_its_properties(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    sent = message(topic, b"a body", tag="TagA", keys=["k1", "k2"])
    sent.user_properties["color"] = "blue"
    response = send(stub, sent)
    assert response.status.code == v2.OK
    [entry] = response.entries
    assert entry.status.code == v2.OK
    assert entry.message_id == sent.system_properties.message_id
    assert not entry.transaction_id
    record = stored(proxied, entry.message_id, topic)
    assert record.body == b"a body"
    assert record.queue_offset == entry.offset
    properties = decode_properties(record.properties)
    assert properties["TAGS"] == "TagA"
    assert properties["KEYS"] == "k1 k2"
    assert properties["color"] == "blue"
    assert properties["PGROUP"] == topic  # RocketMQ's proxy sends under the topic's name as group
    assert record.born_timestamp == sent.system_properties.born_timestamp.ToMilliseconds()


def test_messages_of_one_group_go_to_one_queue(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic("+message.type=FIFO", queues=8)
    queues: dict[str, set[int]] = {"first": set(), "second": set()}
    for index in range(8):
        group = "first" if index % 2 else "second"
        response = send(stub, message(topic, f"m{index}".encode(), message_type=v2.FIFO, message_group=group))
        assert response.status.code == v2.OK, response.status
        record = stored(proxied, response.entries[0].message_id, topic)
        assert decode_properties(record.properties)["__SHARDINGKEY"] == group
        queues[group].add(record.queue_id)
    assert len(queues["first"]) == 1 and len(queues["second"]) == 1


def test_delivery_time_travels_as_timer_deliver_ms(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic("+message.type=DELAY")
    sent = message(topic, message_type=v2.DELAY)
    deliver_ms = int(time.time() * 1000) + 1500
    sent.system_properties.delivery_timestamp.FromMilliseconds(deliver_ms)
    response = send(stub, sent)
    assert response.status.code == v2.OK, response.status
    # Stored in the timer's system topic or, once due, in its own: either way it carries its time.
    with blocking.AdminClient(proxied.namesrv) as admin:
        records = wait_until_blocking(
            lambda: admin.view_message(response.entries[0].message_id), message="the delayed message stored"
        )
    assert decode_properties(records[0].properties)["TIMER_DELIVER_MS"] == str(deliver_ms)


def test_delivery_time_in_milliseconds_where_seconds_go_is_read_as_milliseconds(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    # The official Python client 5.1.2 writes the delivery time it is given in ms into the seconds field.
    topic = proxied.new_topic("+message.type=DELAY")
    sent = message(topic, message_type=v2.DELAY)
    deliver_ms = int(time.time() * 1000) + 1500
    sent.system_properties.delivery_timestamp.seconds = deliver_ms
    response = send(stub, sent)
    assert response.status.code == v2.OK, response.status
    with blocking.AdminClient(proxied.namesrv) as admin:
        records = wait_until_blocking(
            lambda: admin.view_message(response.entries[0].message_id), message="the delayed message stored"
        )
    assert decode_properties(records[0].properties)["TIMER_DELIVER_MS"] == str(deliver_ms)


def test_message_of_another_type_than_the_topic_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()  # NORMAL
    response = send(stub, message(topic, message_type=v2.FIFO, message_group="g"))
    assert response.status.code == v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "NORMAL" in response.status.message and "FIFO" in response.status.message


def test_missing_topic_is_topic_not_found(stub: Stub) -> None:
    response = send(stub, message("proxy-send-no-such-topic"))
    assert response.status.code == v2.TOPIC_NOT_FOUND


def test_no_message_is_message_corrupted(stub: Stub) -> None:
    assert send(stub).status.code == v2.MESSAGE_CORRUPTED


def test_messages_of_two_topics_in_one_send_are_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    response = send(stub, message(proxied.new_topic()), message(proxied.new_topic()))
    assert response.status.code == v2.MESSAGE_CORRUPTED


def _with_user_property(topic: str, key: str) -> v2.Message:
    sent = message(topic)
    sent.user_properties[key] = "value"
    return sent


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda topic: message(topic, b""), v2.MESSAGE_BODY_EMPTY),
        (lambda topic: message(topic, b"x" * (4 * 1024 * 1024 + 1)), v2.MESSAGE_BODY_TOO_LARGE),
        (lambda topic: _with_user_property(topic, "UNIQ_KEY"), v2.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda topic: _with_user_property(topic, "bad\x01key"), v2.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda topic: message(topic, tag="a|b"), v2.ILLEGAL_MESSAGE_TAG),
        (lambda topic: message(topic, tag=" "), v2.ILLEGAL_MESSAGE_TAG),
        (lambda topic: message(topic, keys=["with space"]), v2.ILLEGAL_MESSAGE_KEY),
        (
            lambda topic: message(topic, message_group="g" * 64, message_type=v2.FIFO),
            v2.ILLEGAL_MESSAGE_GROUP,
        ),
        (lambda topic: message(topic, body_encoding=v2.GZIP), v2.MESSAGE_CORRUPTED),
    ],
    ids=[
        "empty body",
        "body too large",
        "system property",
        "control character in a property name",
        "tag with a bar",
        "blank tag",
        "key with a space",
        "message group too long",
        "body not gzip",
    ],
)
def test_bad_message_is_refused_with_its_code(
    proxied: ProxiedStandalone, stub: Stub, make: object, code: int
) -> None:
    topic = proxied.new_topic("+message.type=MIXED")
    response = send(stub, make(topic))  # type: ignore[operator]
    assert response.status.code == code, response.status
    assert response.status.message


def test_message_without_id_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    sent = message(proxied.new_topic())
    sent.system_properties.message_id = ""
    assert send(stub, sent).status.code == v2.ILLEGAL_MESSAGE_ID


def test_gzip_body_is_stored_plain(proxied: ProxiedStandalone, stub: Stub) -> None:
    import gzip

    topic = proxied.new_topic()
    response = send(stub, message(topic, gzip.compress(b"packed body"), body_encoding=v2.GZIP))
    assert response.status.code == v2.OK, response.status
    assert stored(proxied, response.entries[0].message_id, topic).body == b"packed body"


def test_several_messages_are_sent_as_one_batch(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    response = send(stub, *(message(topic, f"m{index}".encode()) for index in range(3)))
    assert response.status.code == v2.OK, response.status
    offsets = [entry.offset for entry in response.entries]
    assert offsets == list(range(offsets[0], offsets[0] + 3))
    for index, entry in enumerate(response.entries):
        assert stored(proxied, entry.message_id, topic).body == f"m{index}".encode()
