"""CometMQ's clients against a standalone with aclEnable: with the right credentials a Producer sends
and a PushConsumer receives (asyncio and blocking, the blocking send over its own socket); a wrong
secret, an unknown user, no credentials at all, or a user without Pub on the topic is refused with the
server's reason, and nothing is stored."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from client_support import run

from cometmq.auth import Credentials
from cometmq.client import Message, Producer, PushConsumer, ReceivedMessage, blocking
from cometmq.errors import BrokerError
from cometmq.protocol import ResponseCode
from processes import StandaloneServer
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_standalone
from waiting import wait_until

REFUSALS = {
    "wrong secret": (
        Credentials(WRITER.access_key, "not-the-secret"),
        "signature of user writer does not match",
    ),
    "unknown user": (Credentials("nobody", "whatever"), "user nobody is not known here"),
    "unsigned": (None, "is not signed"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with secured_standalone(tmp_path_factory.mktemp("secured")) as server:
        yield server


def stored_messages(server: StandaloneServer) -> int:
    with blocking.AdminClient(server.namesrv, credentials=ADMIN) as admin:
        total = 0
        for queue in admin.readable_queues(ACL_TOPIC):
            low, high = admin.offset_bounds(queue)
            total += high - low
        return total


def test_a_producer_with_credentials_sends_and_a_push_consumer_receives(secured: StandaloneServer) -> None:
    bodies = [f"asyncio-{i}".encode() for i in range(5)]

    async def main() -> list[bytes]:
        async with Producer("PID_acl_async", secured.namesrv, credentials=WRITER) as producer:
            for body in bodies:
                await producer.send(Message(ACL_TOPIC, body, tags="asyncio"))
        received: list[bytes] = []
        consumer = PushConsumer("GID_acl_async", secured.namesrv, consume_from="first", credentials=READER)
        consumer.subscribe(ACL_TOPIC, "asyncio")
        async with consumer:
            async for message in consumer:
                received.append(message.body)
                if len(received) == len(bodies):
                    break
        return received

    assert sorted(run(main())) == sorted(bodies)


def test_the_blocking_clients_with_credentials_send_and_receive(secured: StandaloneServer) -> None:
    bodies = [f"blocking-{i}".encode() for i in range(5)]
    with blocking.Producer("PID_acl_blocking", secured.namesrv, credentials=WRITER) as producer:
        for body in bodies:  # the first through the loop (no route yet), the rest over the lane
            assert producer.send(Message(ACL_TOPIC, body, tags="blocking")).status.name == "SEND_OK"
        producer.send_batch([Message(ACL_TOPIC, b"batched", tags="blocking")])
    received: list[bytes] = []
    consumer = blocking.PushConsumer(
        "GID_acl_blocking", secured.namesrv, consume_from="first", credentials=READER
    )
    consumer.subscribe(ACL_TOPIC, "blocking")
    with consumer:
        for message in consumer:
            received.append(message.body)
            if len(received) == len(bodies) + 1:
                break
    assert sorted(received) == sorted([*bodies, b"batched"])


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_producer_that_is_not_authenticated_is_refused(secured: StandaloneServer, case: str) -> None:
    credentials, reason = REFUSALS[case]
    before = stored_messages(secured)

    async def main() -> None:
        async with Producer("PID_acl_refused", secured.namesrv, credentials=credentials) as producer:
            await producer.send(Message(ACL_TOPIC, b"refused"))

    with pytest.raises(BrokerError, match=reason) as refused:
        run(main())
    assert refused.value.code == ResponseCode.NO_PERMISSION
    assert stored_messages(secured) == before


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_blocking_producer_that_is_not_authenticated_is_refused(
    secured: StandaloneServer, case: str
) -> None:
    credentials, reason = REFUSALS[case]
    with (
        blocking.Producer("PID_acl_refused_blocking", secured.namesrv, credentials=credentials) as producer,
        pytest.raises(BrokerError, match=reason),
    ):
        producer.send(Message(ACL_TOPIC, b"refused"))


def test_a_user_without_pub_on_the_topic_is_refused_sends(secured: StandaloneServer) -> None:
    before = stored_messages(secured)

    async def main() -> None:
        async with Producer("PID_acl_reader", secured.namesrv, credentials=READER, retry_times=0) as producer:
            await producer.send(Message(ACL_TOPIC, b"not allowed"))

    with pytest.raises(BrokerError, match=f"user reader may not Pub on Topic:{ACL_TOPIC}") as refused:
        run(main())
    assert refused.value.code == ResponseCode.NO_PERMISSION
    # The blocking send's own socket is refused the same way.
    with (
        blocking.Producer("PID_acl_reader_blocking", secured.namesrv, credentials=READER) as producer,
        pytest.raises(BrokerError, match="may not Pub"),
    ):
        producer.send(Message(ACL_TOPIC, b"not allowed"))
    assert stored_messages(secured) == before


def test_a_push_consumer_that_is_not_authenticated_receives_nothing_and_logs_why(
    secured: StandaloneServer, caplog: pytest.LogCaptureFixture
) -> None:
    credentials, reason = REFUSALS["unknown user"]

    async def main() -> None:
        consumer = PushConsumer(
            "GID_acl_refused", secured.namesrv, consume_from="first", credentials=credentials
        )
        consumer.subscribe(ACL_TOPIC)
        received: list[ReceivedMessage] = []

        async def listener(messages: list[ReceivedMessage]) -> None:
            received.extend(messages)

        consumer.listen(listener)
        async with consumer:
            await wait_until(lambda: reason in caplog.text, message="the refusal logged")
        assert received == []

    with caplog.at_level(logging.WARNING, logger="cometmq.client"):
        run(main())
