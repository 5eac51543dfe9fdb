"""Messages sent and consumed by traced clients, for the tests that read their trace back."""

from __future__ import annotations

from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, ReceivedMessage
from waiting import wait_until


async def poll_until_some(consumer: LitePullConsumer) -> list[ReceivedMessage]:
    """The first non-empty poll of a started ``consumer``."""
    polled: list[ReceivedMessage] = []
    while not polled:
        polled = await consumer.poll(1.0)
    return polled


async def send_and_consume_traced(
    namesrv: str, message: Message, producer_group: str, consumer_group: str
) -> str:
    """Send ``message`` with a traced producer of ``producer_group`` and consume it with a traced lite pull
    consumer of ``consumer_group``; its id once its three trace records (Pub, SubBefore, SubAfter) are
    stored."""
    async with Producer(producer_group, namesrv, trace=True) as producer:
        sent = await producer.send(message)
    consumer = LitePullConsumer(consumer_group, namesrv, consume_from="first", trace=True)
    consumer.subscribe(message.topic)
    async with consumer:
        await poll_until_some(consumer)
    async with AdminClient(namesrv) as admin:

        async def traced() -> bool:
            return len(await admin.message_trace(sent.msg_id)) >= 3

        await wait_until(traced, message=f"the 3 trace records of {sent.msg_id}")
    return sent.msg_id
