"""POP consumption against a real broker: pop, ack, change invisible time, revive, DLQ, order pops,
long polling, and the refusals."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from _pop_support import (
    ack_request,
    change_request,
    handle_of,
    notification_request,
    peek_request,
    polling_info_request,
    pop,
    pop_request,
    real_topic,
)
from _support import (
    address,
    broker_and_client,
    create_topic,
    name_server,
    pull,
    run,
    running_broker,
    send,
)

from cometmq.broker import _pop
from cometmq.client import SimpleConsumer
from cometmq.client.instance import changed_handle
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import ResetOffsetRequestHeader
from cometmq.protocol.pop import (
    BatchAck,
    ChangeInvisibleTimeResponseHeader,
    NotificationResponseHeader,
    PollingInfoResponseHeader,
    PopMessageResponseHeader,
    RetryMark,
    encode_batch_ack_body,
)
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import decode_records
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.remoting import RemotingClient
from waiting import wait_until


async def one_queue(
    client: RemotingClient, addr: str, topic: str, bodies: list[bytes], **properties: str
) -> None:
    """*topic*, of one queue, holding a message of each of *bodies* with *properties*."""
    await create_topic(client, addr, topic, 1)
    for body in bodies:
        await send(client, addr, topic, body, 0, **properties)


def test_a_popped_message_is_invisible_until_acked(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Orders", 2)).code == 0
            await send(client, addr, "Orders", b"one", 0, TAGS="a")
            await send(client, addr, "Orders", b"two", 1, TAGS="b")
            response, records = await pop(client, broker, "Orders")
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert sorted(r.body for r in records) == [b"one", b"two"]
            again, none = await pop(client, broker, "Orders")
            assert again.code == ResponseCode.POLLING_TIMEOUT and none == []
            for record in records:
                acked = await client.invoke(address(broker), ack_request(record))
                assert acked.code == ResponseCode.SUCCESS, acked.remark
                assert handle_of(record).queue_offset == 0
            assert broker.offsets.query("CG", "Orders", 0) == 1

    run(scenario())


def test_an_ack_with_rocketmq_proxys_nine_field_handle_settles_the_message(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"proxied"])
            _, (record,) = await pop(client, broker, "Orders")
            # RocketMQ's proxy names the message by its commit-log offset in a ninth field.
            proxied = dataclasses.replace(handle_of(record), commitlog_offset=4096)
            acked = await client.invoke(addr, ack_request(record, handle=str(proxied)))
            assert acked.code == ResponseCode.SUCCESS, acked.remark
            assert broker.offsets.query("CG", "Orders", 0) == 1

    run(scenario())


def test_an_unacked_message_comes_back_from_the_retry_topic_with_its_attempt_counted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"pay"], UNIQ_KEY="U1", TAGS="t")
            _, first = await pop(client, broker, "Orders", invisible_ms=300)
            assert [r.reconsume_times for r in first] == [0]
            # Redelivered once the invisible time passes: from %RETRY%CG_Orders, under the topic.
            _, second = await pop(client, broker, "Orders", poll_ms=20_000, invisible_ms=60_000)
            assert [r.body for r in second] == [b"pay"]
            record = second[0]
            assert record.topic == "Orders" and record.reconsume_times == 1
            assert decode_properties(record.properties)["UNIQ_KEY"] == "U1"
            info = handle_of(record)
            assert info.retry is RetryMark.RETRY_V1
            assert real_topic(record) == "%RETRY%CG_Orders"
            # The first handle is stale: the redelivered copy is what is in flight now.
            stale = await client.invoke(addr, ack_request(first[0]))
            assert stale.code == ResponseCode.NO_MESSAGE, stale.remark
            assert "not in flight" in (stale.remark or "")
            assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            assert broker.offsets.query("CG", "Orders", 0) == 1
            assert broker.offsets.query("CG", "%RETRY%CG_Orders", 0) == 1

    run(scenario())


def test_after_retry_max_times_redeliveries_a_message_goes_to_the_dlq(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            broker.groups.put(SubscriptionGroupConfig("CG", retry_max_times=2))
            await one_queue(client, addr, "Orders", [b"doomed"], UNIQ_KEY="U9")
            attempts = []
            for _ in range(3):
                _, records = await pop(client, broker, "Orders", poll_ms=20_000, invisible_ms=200)
                attempts += [r.reconsume_times + 1 for r in records]
            assert attempts == [1, 2, 3]
            dead = await wait_until(
                lambda: broker.store.max_offset("%DLQ%CG", 0) == 1, message="the message in %DLQ%CG"
            )
            assert dead
            response, records = await pull(client, addr, "%DLQ%CG", 0, 0)
            assert response.code == ResponseCode.SUCCESS
            props = decode_properties(records[0].properties)
            assert records[0].body == b"doomed" and records[0].reconsume_times == 3
            assert props["DLQ_ORIGIN_TOPIC"] == "Orders" and props["UNIQ_KEY"] == "U9"
            nothing, _ = await pop(client, broker, "Orders")
            assert nothing.code == ResponseCode.POLLING_TIMEOUT

    run(scenario())


def test_change_invisible_time_answers_a_new_handle_and_retires_the_old(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"slow"])
            _, records = await pop(client, broker, "Orders", invisible_ms=60_000)
            record = records[0]
            first = handle_of(record)
            changed = await client.invoke(addr, change_request(record, 120_000))
            assert changed.code == ResponseCode.SUCCESS, changed.remark
            answer = ChangeInvisibleTimeResponseHeader.decode(changed.ext_fields)
            assert answer.invisible_time == 120_000 and answer.pop_time > first.pop_time
            renewed = changed_handle(first, answer)
            refused = await client.invoke(addr, ack_request(record))
            assert refused.code == ResponseCode.NO_MESSAGE
            acked = await client.invoke(addr, ack_request(record, handle=str(renewed)))
            assert acked.code == ResponseCode.SUCCESS, acked.remark

    run(scenario())


def test_a_shorter_invisible_time_brings_the_message_back_sooner(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"nack"])
            _, records = await pop(client, broker, "Orders", invisible_ms=600_000)
            changed = await client.invoke(addr, change_request(records[0], 0))
            assert changed.code == ResponseCode.SUCCESS
            _, again = await pop(client, broker, "Orders", poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in again] == [(b"nack", 1)]

    run(scenario())


def test_bad_receipt_handles_and_unknown_groups_are_refused_with_rocketmqs_codes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, autoCreateSubscriptionGroup="false") as (broker, addr, client):
            broker.groups.put(SubscriptionGroupConfig("CG"))
            await one_queue(client, addr, "Orders", [b"x"])
            _, records = await pop(client, broker, "Orders")
            record = records[0]
            garbled = await client.invoke(addr, ack_request(record, handle="not a handle"))
            assert garbled.code == ResponseCode.INVALID_PARAMETER
            assert "receipt handle" in (garbled.remark or "")
            unknown = await client.invoke(addr, ack_request(record, group="Nobody"))
            assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert "Nobody" in (unknown.remark or "")
            wrong_pop_time = dataclasses.replace(handle_of(record), pop_time=1)
            stale = await client.invoke(addr, ack_request(record, handle=str(wrong_pop_time)))
            assert stale.code == ResponseCode.NO_MESSAGE
            beyond = dataclasses.replace(handle_of(record), queue_offset=7)
            request = ack_request(record, handle=str(beyond))
            request.ext_fields["offset"] = "7"
            past_end = await client.invoke(addr, request)
            assert past_end.code == ResponseCode.NO_MESSAGE and "offset is illegal" in (past_end.remark or "")
            no_topic = await client.invoke(addr, pop_request("Nowhere"))
            assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST
            too_many = await client.invoke(addr, pop_request("Orders", max_nums=33))
            assert too_many.code == ResponseCode.INVALID_PARAMETER
            no_group = await client.invoke(addr, pop_request("Orders", group="Nobody"))
            assert no_group.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            bad_queue = await client.invoke(addr, pop_request("Orders", queue_id=5))
            assert bad_queue.code == ResponseCode.INVALID_PARAMETER
            assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            twice = await client.invoke(addr, ack_request(record))
            assert twice.code == ResponseCode.NO_MESSAGE

    run(scenario())


def test_a_held_pop_is_answered_when_a_message_arrives(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 2)
            held = asyncio.ensure_future(pop(client, broker, "Orders", poll_ms=60_000))
            await wait_until(lambda: broker.pop._held_count, message="the pop held")
            info = await client.invoke(addr, polling_info_request("Orders"))
            assert PollingInfoResponseHeader.decode(info.ext_fields).polling_num == 1
            await send(client, addr, "Orders", b"wake up", 1)
            response, records = await held
            assert response.code == ResponseCode.SUCCESS and [r.body for r in records] == [b"wake up"]
            assert not broker.pop._held_count

    run(scenario())


def test_a_notification_says_whether_there_is_something_to_pop(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 2)
            empty = await client.invoke(addr, notification_request("Orders"))
            assert not NotificationResponseHeader.decode(empty.ext_fields).has_msg
            held = asyncio.ensure_future(client.invoke(addr, notification_request("Orders", poll_ms=60_000)))
            await wait_until(lambda: broker.pop._held_count, message="the notification held")
            await send(client, addr, "Orders", b"here", 0)
            assert NotificationResponseHeader.decode((await held).ext_fields).has_msg

    run(scenario())


def test_a_peek_reads_without_popping(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"look"])
            peeked = await client.invoke(addr, peek_request("Orders"))
            assert peeked.code == ResponseCode.SUCCESS
            assert [r.body for r in decode_records(peeked.body)] == [b"look"]
            _, records = await pop(client, broker, "Orders")
            assert [r.body for r in records] == [b"look"]
            after = await client.invoke(addr, peek_request("Orders"))
            assert after.code == ResponseCode.PULL_NOT_FOUND

    run(scenario())


def test_a_batch_ack_settles_the_offsets_its_bitset_names(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"m%d" % n for n in range(4)])
            response, records = await pop(client, broker, "Orders")
            header = PopMessageResponseHeader.decode(response.ext_fields)
            info = handle_of(records[0])
            ack = BatchAck(
                "CG",
                "Orders",
                RetryMark.TOPIC,
                info.ck_queue_offset,
                0,
                0,
                header.pop_time,
                header.invisible_time,
                (0, 2),
            )
            body = encode_batch_ack_body(broker.config.broker_name, [ack])
            acked = await client.invoke(addr, RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=body))
            assert acked.code == ResponseCode.SUCCESS
            state = broker.pop.journal.states[("CG", "Orders", 0)]
            assert sorted(state.inflight) == [1, 3]
            assert broker.offsets.query("CG", "Orders", 0) == 1

    run(scenario())


def test_a_tag_filter_pops_only_matching_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            for tag in ("a", "b", "a", "c"):
                await send(client, addr, "Orders", tag.encode(), 0, TAGS=tag)
            _, records = await pop(client, broker, "Orders", exp="a || c", exp_type="TAG")
            assert [r.body for r in records] == [b"a", b"a", b"c"]

    run(scenario())


def test_an_order_pop_keeps_a_queue_blocked_until_its_messages_are_acked(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Fifo", [b"%d" % n for n in range(3)], __SHARDINGKEY="g1")
            _, first = await pop(client, broker, "Fifo", order=True, max_nums=2)
            assert [r.body for r in first] == [b"0", b"1"]
            assert handle_of(first[0]).is_order
            blocked, none = await pop(client, broker, "Fifo", order=True)
            assert blocked.code == ResponseCode.POLLING_TIMEOUT and none == []
            held = asyncio.ensure_future(pop(client, broker, "Fifo", order=True, poll_ms=60_000))
            await wait_until(lambda: broker.pop._held_count, message="the order pop held")
            for record in first:
                assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            _, rest = await held
            assert [r.body for r in rest] == [b"2"]

    run(scenario())


def test_an_order_pop_hands_unacked_messages_out_again_in_order_then_dead_letters_them(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            broker.groups.put(SubscriptionGroupConfig("CG", retry_max_times=1))
            await one_queue(client, addr, "Fifo", [b"%d" % n for n in range(3)])
            _, first = await pop(client, broker, "Fifo", order=True, max_nums=2, invisible_ms=200)
            assert [(r.body, r.reconsume_times) for r in first] == [(b"0", 0), (b"1", 0)]
            # Message 0 is acked, 1 is not: after the invisible time only 1 comes back, before 2.
            assert (await client.invoke(addr, ack_request(first[0]))).code == ResponseCode.SUCCESS
            _, second = await pop(client, broker, "Fifo", order=True, poll_ms=20_000, invisible_ms=200)
            assert [(r.body, r.reconsume_times) for r in second] == [(b"1", 1), (b"2", 0)]
            # Neither acked: 1 has had its one redelivery and goes to the DLQ; 2 comes back.
            _, third = await pop(client, broker, "Fifo", order=True, poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in third] == [(b"2", 1)]
            assert broker.store.max_offset("%DLQ%CG", 0) == 1

    run(scenario())


def test_the_in_flight_state_is_replayed_at_a_restart_and_follows_deleted_groups(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            await create_topic(client, addr, "Gone", 1)
            for n in range(3):
                await send(client, addr, "Orders", b"%d" % n, 0)
            await send(client, addr, "Gone", b"x", 0)
            _, records = await pop(client, broker, "Orders")
            await pop(client, broker, "Gone")
            assert (await client.invoke(addr, ack_request(records[1]))).code == ResponseCode.SUCCESS
            deleted = RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "Gone"})
            assert (await client.invoke(addr, deleted)).code == ResponseCode.SUCCESS
        async with broker_and_client(tmp_path) as (broker, addr, client):
            states = broker.pop.journal.states
            assert set(states) == {("CG", "Orders", 0)}
            assert sorted(states[("CG", "Orders", 0)].inflight) == [0, 2]
            assert broker.offsets.query("CG", "Orders", 0) == 0
            assert (await client.invoke(addr, ack_request(records[0]))).code == ResponseCode.SUCCESS
            assert broker.offsets.query("CG", "Orders", 0) == 2
            removed = RemotingCommand(
                code=RequestCode.DELETE_SUBSCRIPTIONGROUP, ext_fields={"groupName": "CG"}
            )
            assert (await client.invoke(addr, removed)).code == ResponseCode.SUCCESS
            assert not broker.pop.journal.states

    run(scenario())


def test_a_torn_journal_tail_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"kept"])
            await pop(client, broker, "Orders")
            journal = broker.pop.journal.path
        with journal.open("ab") as torn:
            torn.write(b'0badc0de {"op":"ack","g":"CG","t":"Orders","q":0,"o":0}\n{"op":')
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert sorted(broker.pop.journal.states[("CG", "Orders", 0)].inflight) == [0]
            assert b"0badc0de" not in journal.read_bytes()

    run(scenario())


def test_an_sql92_filter_pops_only_matching_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, enablePropertyFilter="true") as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            for amount in (5, 50, 500):
                await send(client, addr, "Orders", b"%d" % amount, 0, amount=str(amount))
            _, records = await pop(client, broker, "Orders", exp="amount > 10", exp_type="SQL92")
            assert [r.body for r in records] == [b"50", b"500"]
            bad = await client.invoke(addr, pop_request("Orders", exp="amount >", exp_type="SQL92"))
            assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

    run(scenario())


def test_pops_beyond_the_held_limit_are_answered_polling_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pop, "MAX_HELD_PER_QUEUE", 1)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            held = asyncio.ensure_future(pop(client, broker, "Orders", poll_ms=60_000))
            await wait_until(lambda: broker.pop._held_count, message="the first pop held")
            full = await client.invoke(addr, pop_request("Orders", poll_ms=60_000))
            assert full.code == ResponseCode.POLLING_FULL
            await send(client, addr, "Orders", b"for the first", 0)
            assert [r.body for r in (await held)[1]] == [b"for the first"]

    run(scenario())


def test_a_popped_retry_can_be_sent_to_the_dlq_by_send_back_then_acked(tmp_path: Path) -> None:
    """RocketMQ 5's ForwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK with delay level -1 of the
    popped message's commit-log offset, then its ack."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"poison"])
            await pop(client, broker, "Orders", invisible_ms=200)
            _, (retried,) = await pop(client, broker, "Orders", poll_ms=20_000)
            assert real_topic(retried) == "%RETRY%CG_Orders"
            fields = {
                "offset": str(retried.commitlog_offset),
                "group": "CG",
                "delayLevel": "-1",
                "originTopic": "Orders",
            }
            back = await client.invoke(
                addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=fields)
            )
            assert back.code == ResponseCode.SUCCESS, back.remark
            assert (await client.invoke(addr, ack_request(retried))).code == ResponseCode.SUCCESS
            assert broker.store.max_offset("%DLQ%CG", 0) == 1

    run(scenario())


def test_an_order_pop_repeated_with_its_attempt_id_gets_the_same_messages_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Fifo", [b"%d" % n for n in range(3)])
            _, lost = await pop(client, broker, "Fifo", order=True, max_nums=2, attempt_id="a1")
            _, again = await pop(client, broker, "Fifo", order=True, max_nums=2, attempt_id="a1")
            assert [r.body for r in again] == [r.body for r in lost] == [b"0", b"1"]
            assert [r.reconsume_times for r in again] == [0, 0]  # the lost answer was no delivery
            other, none = await pop(client, broker, "Fifo", order=True, attempt_id="a2")
            assert other.code == ResponseCode.POLLING_TIMEOUT and none == []
            stale = await client.invoke(addr, ack_request(lost[0]))
            assert stale.code == ResponseCode.NO_MESSAGE
            for record in again:
                assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            _, rest = await pop(client, broker, "Fifo", order=True, attempt_id="a3")
            assert [r.body for r in rest] == [b"2"]

    run(scenario())


def test_a_simple_consumer_receives_from_every_broker_of_its_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            name_server() as (_, ns_addr),
            running_broker(tmp_path / "a", namesrvAddr=ns_addr, brokerName="broker-a") as first,
            running_broker(tmp_path / "b", namesrvAddr=ns_addr, brokerName="broker-b") as second,
        ):
            client = RemotingClient()
            try:
                for broker, body in ((first, b"from a"), (second, b"from b")):
                    await create_topic(client, address(broker), "Spread", 2)
                    await send(client, address(broker), "Spread", body, 1)
                    await broker.register_all()
            finally:
                await client.close()
            async with SimpleConsumer("GID_spread", ns_addr, subscriptions={"Spread": "*"}) as consumer:
                got = []
                while len(got) < 2:
                    got += await consumer.receive(8, 30, await_duration=10)
                assert sorted((m.broker_name, m.body) for m in got) == [
                    ("broker-a", b"from a"),
                    ("broker-b", b"from b"),
                ]
                for message in got:
                    await consumer.ack(message)
            assert first.offsets.query("GID_spread", "Spread", 1) == 1
            assert second.offsets.query("GID_spread", "Spread", 1) == 1

    run(scenario())


def test_order_pops_give_each_message_group_to_one_consumer_at_a_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Fifo", 2)
            # A FIFO producer puts a message group in one queue (by its __SHARDINGKEY's hash).
            for n in range(2):
                await send(client, addr, "Fifo", b"red-%d" % n, 0, __SHARDINGKEY="red")
                await send(client, addr, "Fifo", b"blue-%d" % n, 1, __SHARDINGKEY="blue")
            _, (first,) = await pop(client, broker, "Fifo", order=True, max_nums=1)
            _, (second,) = await pop(client, broker, "Fifo", order=True, max_nums=1)
            groups = {decode_properties(r.properties)["__SHARDINGKEY"] for r in (first, second)}
            assert groups == {"red", "blue"} and first.body.endswith(b"-0") and second.body.endswith(b"-0")
            blocked, _ = await pop(client, broker, "Fifo", order=True)
            assert blocked.code == ResponseCode.POLLING_TIMEOUT
            assert (await client.invoke(addr, ack_request(first))).code == ResponseCode.SUCCESS
            _, (next_one,) = await pop(client, broker, "Fifo", order=True)
            assert next_one.body == first.body[:-1] + b"1"

    run(scenario())


def test_an_offset_reset_moves_pops_and_forgets_what_was_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await one_queue(client, addr, "Orders", [b"%d" % n for n in range(3)])
            _, first = await pop(client, broker, "Orders")
            assert len(first) == 3
            reset = ResetOffsetRequestHeader(
                topic="Orders", group="CG", timestamp=0, is_force=True, queue_id=0, offset=1
            )
            answer = await client.invoke(
                addr,
                RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext_fields=reset.encode()),
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            _, again = await pop(client, broker, "Orders")
            assert [r.body for r in again] == [b"1", b"2"]
            assert (await client.invoke(addr, ack_request(first[0]))).code == ResponseCode.NO_MESSAGE

    run(scenario())


def test_a_pop_held_for_a_closed_connection_is_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            leaving = RemotingClient()
            held = asyncio.ensure_future(
                leaving.invoke(addr, pop_request("Orders", poll_ms=60_000), timeout=60)
            )
            await wait_until(lambda: broker.pop._held_count, message="the pop held")
            await leaving.close()
            await wait_until(lambda: not broker.pop._held_count, message="the held pop forgotten")
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            await send(client, addr, "Orders", b"for whoever asks next", 0)
            _, records = await pop(client, broker, "Orders")
            assert [r.body for r in records] == [b"for whoever asks next"]

    run(scenario())
