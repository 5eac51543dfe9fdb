"""AdminClient.resend_to_group, what the message page's resend does: the group's consumers get the
message once more, under its original topic, and another group does not."""

from __future__ import annotations

from dashboard_support import LiveCluster

from cometmq.client import Message, Producer, PushConsumer, ReceivedMessage
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from waiting import wait_until


def test_a_group_consumes_a_resent_message_again_and_another_group_does_not(cluster: LiveCluster) -> None:
    async def go() -> None:
        admin = cluster.admin
        await admin.create_topic("Again", 1)
        received: dict[str, list[ReceivedMessage]] = {"GID_again": [], "GID_other": []}
        consumers = []
        for group, seen in received.items():
            await admin.create_group(SubscriptionGroupConfig(group))
            consumer = PushConsumer(group, cluster.namesrv, consume_from="first")
            consumer.subscribe("Again")

            async def listen(messages: list[ReceivedMessage], seen: list[ReceivedMessage] = seen) -> None:
                seen.extend(messages)

            consumer.listen(listen)
            await consumer.start()
            consumers.append(consumer)
        try:
            async with Producer("PID_again", cluster.namesrv) as producer:
                sent = await producer.send(Message("Again", b"once more", keys="again-1"))
            await wait_until(lambda: all(received.values()), message="both groups consumed the message")
            [record] = await admin.query_message("Again", "again-1")
            resent = await admin.resend_to_group(record, "GID_again")
            assert resent.topic == "%RETRY%GID_again"
            await wait_until(lambda: len(received["GID_again"]) == 2, message="the group got the copy")
            copy = received["GID_again"][1]
            assert (copy.topic, copy.body, copy.msg_id) == ("Again", b"once more", sent.msg_id)
            assert len(received["GID_other"]) == 1
        finally:
            for consumer in consumers:
                await consumer.close()

    cluster.run(go(), timeout=120)
