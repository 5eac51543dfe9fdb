"""The proxy keeps the messages of an auto-renew receive (a push consumer's) invisible while their consumer
is connected, and settles them with the latest handle; a consumer that is gone gets no renewals.

The proxy runs in this process, in front of the module's standalone, with its renewal made quick (an
invisible time of 2 s, renewed a second and a half ahead), so that a renewal happens within a test.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from proxy_support import ProxiedStandalone, consumer_settings
from test_receive import (
    METADATA,
    ack,
    from_first_message,
    proxy_in_process,
    receive,
    receive_request,
    receive_until,
    run,
    send,
    topic_and_group,
)

from cometmq.client import Message
from cometmq.proxy import _receive, definition_pb2, service_pb2, service_pb2_grpc
from cometmq.proxy._receive import parse_receipt_handle
from waiting import wait_until

v2 = definition_pb2
pb = service_pb2


@pytest.fixture(autouse=True)
def quick_renewals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_receive, "AUTO_RENEW_INVISIBLE_MS", 2_000)
    monkeypatch.setattr(_receive, "RENEW_AHEAD_MS", 1_500)
    monkeypatch.setattr(_receive, "RENEW_PERIOD_S", 0.1)


@contextlib.asynccontextmanager
async def connected(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str
) -> AsyncIterator[None]:
    """A push consumer's Telemetry stream, open (its settings sent and answered) until the block ends."""
    call = stub.Telemetry(metadata=METADATA)
    await call.write(consumer_settings(group, topic, client_type=v2.PUSH_CONSUMER))
    answer = await call.read()
    assert answer.status.code == v2.OK, answer
    try:
        yield
    finally:
        await call.done_writing()
        call.cancel()


def auto_renew_request(group: str, topic: str) -> pb.ReceiveMessageRequest:
    request = receive_request(group, topic)
    request.ClearField("invisible_duration")
    request.auto_renew = True
    return request


async def past_its_invisible_time(message: v2.Message) -> None:
    visible_at = parse_receipt_handle(message.system_properties.receipt_handle).visible_at
    await wait_until(
        lambda: time.time() * 1000 > visible_at + 1_000,
        message="the receive's invisible time to pass",
        interval=0.1,
    )


def test_a_connected_consumers_message_is_renewed_and_acked_with_its_first_handle(
    proxied: ProxiedStandalone,
) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RenewKept")
        await send(proxied, Message(topic, b"slow work"))
        async with proxy_in_process(proxied.namesrv) as stub, connected(stub, group, topic):
            await from_first_message(stub, group, topic)
            [message] = await receive_until(stub, auto_renew_request(group, topic), 1)
            await past_its_invisible_time(message)
            status, others = await receive(stub, receive_request(group, topic))
            assert (status.code, others) == (v2.MESSAGE_NOT_FOUND, []), "a renewed message came again"
            answer = await ack(stub, group, topic, message)
            assert answer.status.code == v2.OK, answer

    run(scenario())


def test_the_message_of_a_consumer_without_telemetry_is_not_renewed(proxied: ProxiedStandalone) -> None:
    async def scenario() -> None:
        topic, group = await topic_and_group(proxied, "RenewGone")
        [msg_id] = await send(proxied, Message(topic, b"orphan"))
        async with proxy_in_process(proxied.namesrv) as stub:
            await from_first_message(stub, group, topic)
            [message] = await receive_until(stub, auto_renew_request(group, topic), 1)
            await past_its_invisible_time(message)
            answer = await ack(stub, group, topic, message)
            assert answer.status.code == v2.INVALID_RECEIPT_HANDLE
            [again] = await receive_until(stub, receive_request(group, topic), 1)
            assert again.system_properties.message_id == msg_id
            assert again.system_properties.delivery_attempt == 2

    run(scenario())
