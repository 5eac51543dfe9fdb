"""CometMQ's Producer sending timer messages (``Message.deliver_at_ms``, RocketMQ 5's delivery timestamp)
to a real `cometmq standalone`: the consumer gets them not before their time, with the time on the
received message; what the producer refuses before sending; the broker's horizon as a BrokerError."""

from __future__ import annotations

import time

import pytest
from client_support import poll_until, run

from cometmq.client import AdminClient, LitePullConsumer, Message, Producer
from cometmq.errors import BrokerError, InvalidMessageError
from cometmq.protocol import ResponseCode
from processes import StandaloneServer


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_message_with_a_delivery_time_is_consumed_not_before_it(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("TimerClient", 1, attributes="+message.type=DELAY")
        deliver_at = now_ms() + 1500
        async with Producer("PID_timer", server.namesrv) as producer:
            result = await producer.send(Message("TimerClient", b"later", tags="T", deliver_at_ms=deliver_at))
            assert result.queue.topic == "TimerClient"
            plain = await producer.send(Message("TimerClient", b"now"))
        async with LitePullConsumer("GID_timer", server.namesrv, consume_from="first") as consumer:
            consumer.assign(await consumer.fetch_queues("TimerClient"))
            first, second = await poll_until(consumer, 2)
        assert (first.body, first.deliver_at_ms) == (b"now", None)
        assert first.msg_id == plain.msg_id
        assert (second.body, second.tags, second.msg_id) == (b"later", "T", result.msg_id)
        assert second.deliver_at_ms == deliver_at
        assert second.store_timestamp >= deliver_at

    run(scenario())


def test_what_the_producer_and_the_broker_refuse(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("TimerRefused", 1)
        async with Producer("PID_timer_refused", server.namesrv) as producer:
            one_of = "one of delay_level, deliver_at_ms and delay_ms"
            with pytest.raises(InvalidMessageError, match=one_of):
                await producer.send(Message("TimerRefused", b"x", delay_level=1, deliver_at_ms=now_ms()))
            with pytest.raises(InvalidMessageError, match=one_of):
                await producer.send(Message("TimerRefused", b"x", deliver_at_ms=now_ms(), delay_ms=5))
            with pytest.raises(InvalidMessageError, match="is not a time in epoch ms"):
                await producer.send(Message("TimerRefused", b"x", deliver_at_ms=-1))
            with pytest.raises(InvalidMessageError, match="delay_ms -1 is not a number of ms"):
                await producer.send(Message("TimerRefused", b"x", delay_ms=-1))
            with pytest.raises(InvalidMessageError, match="reserved by RocketMQ"):
                await producer.send(Message("TimerRefused", b"x", properties={"TIMER_DELAY_SEC": "5"}))
            with pytest.raises(InvalidMessageError, match="cannot be delayed"):
                await producer.send_batch([Message("TimerRefused", b"x", deliver_at_ms=now_ms() + 1000)])
            four_days = now_ms() + 4 * 86_400_000  # beyond RocketMQ's default horizon of 3 days
            with pytest.raises(BrokerError) as refused:
                await producer.send(Message("TimerRefused", b"x", deliver_at_ms=four_days))
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "timerMaxDelaySec of 259200 s" in refused.value.remark

    run(scenario())
