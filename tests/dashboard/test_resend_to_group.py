"""AdminClient.resend_to_group, what the message page's resend does: the group's consumers get the
message once more, under its original topic, and another group does not."""

from __future__ import annotations

import dataclasses
from typing import Any

from dashboard_support import LiveCluster

from cometmq.client import AdminClient, Message, Producer, PushConsumer, ReceivedMessage
from cometmq.protocol import RequestCode
from cometmq.protocol.broker_headers import SendMessageRequestHeader
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG
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


def test_a_copy_leaves_the_host_flags_to_the_broker(cluster: LiveCluster) -> None:
    """A record's IPv6 host flags say how its stored hosts are laid out; a copy's hosts are the
    receiving broker's to choose (RocketMQ's broker only ever sets them, so a copy of a record stored
    over IPv6 would be laid out for IPv6 hosts and store IPv4 ones)."""

    async def go() -> None:
        await cluster.admin.create_topic("FromV6", 1)
        async with Producer("PID_from_v6", cluster.namesrv) as producer:
            await producer.send(Message("FromV6", b"born over IPv6", keys="v6-1"))
        [record] = await cluster.admin.query_message("FromV6", "v6-1")
        v6_flags = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
        record = dataclasses.replace(record, sys_flag=record.sys_flag | v6_flags)
        async with AdminClient(cluster.namesrv) as admin:
            sent_flags: list[int] = []
            invoke_ok = admin._instance.invoke_ok

            async def spy(addr: str, code: int, ext_fields: Any = None, *rest: Any) -> Any:
                if code == RequestCode.SEND_MESSAGE_V2:
                    sent_flags.append(SendMessageRequestHeader.decode(ext_fields, compact=True).sys_flag)
                return await invoke_ok(addr, code, ext_fields, *rest)

            admin._instance.invoke_ok = spy  # type: ignore[method-assign]
            await admin.resend_to_group(record, "GID_v6")
            await admin.resend_dead_letter(
                dataclasses.replace(record, properties=encode_properties({"RETRY_TOPIC": "FromV6"}))
            )
        assert len(sent_flags) == 2 and not any(flags & v6_flags for flags in sent_flags)

    cluster.run(go(), timeout=120)
