"""POP consumption against a real broker: pop, ack, change invisible time, revive, DLQ, order pops,
long polling, and the refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading
import time
import types
from pathlib import Path
from typing import Any

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
from cometmq.broker._popstate import JOURNAL_NAME
from cometmq.client import SimpleConsumer, _popapi
from cometmq.client.instance import changed_handle
from cometmq.errors import BrokerError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import ResetOffsetRequestHeader
from cometmq.protocol.pop import (
    MAX_BATCH_ACK_OFFSETS,
    MAX_BATCH_ACKS,
    MAX_BITSET_BYTES,
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


def test_a_backlog_of_due_revives_is_taken_a_batch_per_loop_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pop, "REVIVE_BATCH", 2)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            for n in range(5):
                await send(client, addr, "Orders", b"%d" % n, 0)
            _, records = await pop(client, broker, "Orders", invisible_ms=600_000)
            assert len(records) == 5
            steps: list[int] = []  # revives per call of _revive_due
            service = broker.pop
            revive_due, revive = service._revive_due, service._revive

            def counted_due() -> None:
                steps.append(0)
                revive_due()

            def counted(*args: object) -> None:
                steps[-1] += 1
                revive(*args)  # type: ignore[arg-type]

            service._revive_due = counted_due  # type: ignore[method-assign]
            service._revive = counted  # type: ignore[method-assign]
            # All five come due at once, as after a broker was down past their invisible time.
            clock = _pop._now_ms
            monkeypatch.setattr(_pop, "_now_ms", lambda: clock() + 3_600_000)
            assert service._revive_timer is not None
            service._revive_timer.cancel()
            service._revive_timer = None
            service._arm_revive()
            await wait_until(
                lambda: broker.store.max_offset("%RETRY%CG_Orders", 0) == 5, message="five revived"
            )
            assert sum(steps) == 5 and max(steps) == 2

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


def test_the_revive_heap_keeps_to_what_is_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            await send(client, addr, "Orders", b"renewed", 0)
            _, (record,) = await pop(client, broker, "Orders", invisible_ms=600_000)
            handle = handle_of(record)
            # Each change leaves the heap entry of the handle it replaces behind.
            for _ in range(2 * _pop.REVIVE_HEAP_SLACK):
                changed = await client.invoke(addr, change_request(record, 600_000, handle=str(handle)))
                assert changed.code == ResponseCode.SUCCESS, changed.remark
                answer = ChangeInvisibleTimeResponseHeader.decode(changed.ext_fields)
                handle = dataclasses.replace(handle, pop_time=answer.pop_time)
                assert len(broker.pop._revive_heap) <= 2 + _pop.REVIVE_HEAP_SLACK
            assert (await client.invoke(addr, ack_request(record, handle=str(handle)))).code == 0

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


def test_an_arrival_wakes_the_held_pops_it_can_serve_in_the_order_they_came(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            held = []
            for n in range(10):
                held.append(asyncio.ensure_future(pop(client, broker, "Orders", poll_ms=60_000)))
                await wait_until(lambda n=n: broker.pop._held_total == n + 1, message=f"pop {n} held")
            reads = []
            take = broker.pop._pop
            broker.pop._pop = lambda pop: reads.append(pop) or take(pop)  # type: ignore[method-assign]
            await send(client, addr, "Orders", b"one", 0)
            _, records = await held[0]
            assert [r.body for r in records] == [b"one"]
            await wait_until(lambda: len(reads) == 2, message="the second held pop tried")
            assert broker.pop._held_total == 9 and not any(each.done() for each in held[1:])
            await send(client, addr, "Orders", b"two", 0)
            _, records = await held[1]
            assert [r.body for r in records] == [b"two"]
            assert len(reads) == 4  # the pop it served, and the next one finding nothing
            del broker.pop._pop

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


def test_a_batch_ack_naming_more_than_pops_can_take_is_refused_with_a_remark(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)

            async def batch_ack(*acks: BatchAck) -> RemotingCommand:
                body = encode_batch_ack_body(broker.config.broker_name, list(acks))
                return await client.invoke(
                    addr, RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=body)
                )

            def ack(offsets: tuple[int, ...]) -> BatchAck:
                return BatchAck("CG", "Orders", RetryMark.TOPIC, 0, 0, 0, 1, 60_000, offsets)

            wide = await batch_ack(ack((MAX_BITSET_BYTES * 8,)))
            assert wide.code == ResponseCode.INVALID_PARAMETER
            assert f"above {MAX_BITSET_BYTES}" in (wide.remark or "")
            per_ack = MAX_BATCH_ACK_OFFSETS // MAX_BATCH_ACKS + 1
            many = await batch_ack(*[ack(tuple(range(per_ack)))] * MAX_BATCH_ACKS)
            assert many.code == ResponseCode.INVALID_PARAMETER
            assert f"more than {MAX_BATCH_ACK_OFFSETS} offsets" in (many.remark or "")
            fine = await batch_ack(*[ack(tuple(range(per_ack - 1)))] * MAX_BATCH_ACKS)
            assert fine.code == ResponseCode.SUCCESS, fine.remark

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
            _, first = await pop(client, broker, "Fifo", order=True, max_nums=2)
            assert [(r.body, r.reconsume_times) for r in first] == [(b"0", 0), (b"1", 0)]
            # Message 0 is acked, 1 is not: after its invisible time only 1 comes back, before 2.
            assert (await client.invoke(addr, ack_request(first[0]))).code == ResponseCode.SUCCESS
            assert (await client.invoke(addr, change_request(first[1], 0))).code == ResponseCode.SUCCESS
            _, second = await pop(client, broker, "Fifo", order=True, poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in second] == [(b"1", 1), (b"2", 0)]
            # Neither acked: 1 has had its one redelivery and goes to the DLQ; 2 comes back.
            for record in second:
                assert (await client.invoke(addr, change_request(record, 0))).code == ResponseCode.SUCCESS
            _, third = await pop(client, broker, "Fifo", order=True, poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in third] == [(b"2", 1)]
            assert broker.store.max_offset("%DLQ%CG", 0) == 1

    run(scenario())


def test_a_plain_pop_takes_what_an_order_pop_left_to_deliver_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Fifo", 1)
            for n in range(2):
                await send(client, addr, "Fifo", b"%d" % n, 0)
            _, first = await pop(client, broker, "Fifo", order=True, max_nums=2)
            for record in first:  # their invisible time ends now: both to be delivered again
                assert (await client.invoke(addr, change_request(record, 0))).code == ResponseCode.SUCCESS
            state = broker.pop.journal.states[("CG", "Fifo", 0)]
            await wait_until(lambda: state.redeliver == [0, 1], message="both left to deliver again")
            _, plain = await pop(client, broker, "Fifo", poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in plain] == [(b"0", 1), (b"1", 1)]
            for record in plain:
                assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            assert broker.offsets.query("CG", "Fifo", 0) == 2

    run(scenario())


def test_an_order_pop_takes_what_a_plain_pop_left_in_the_retry_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Fifo", 1)
            await send(client, addr, "Fifo", b"revived", 0)
            _, (plain,) = await pop(client, broker, "Fifo")
            assert (await client.invoke(addr, change_request(plain, 0))).code == ResponseCode.SUCCESS
            await wait_until(
                lambda: broker.store.max_offset("%RETRY%CG_Fifo", 0) == 1,
                message="the copy in the retry topic",
            )
            _, ordered = await pop(client, broker, "Fifo", order=True, poll_ms=20_000)
            assert [(r.body, r.reconsume_times) for r in ordered] == [(b"revived", 1)]
            assert real_topic(ordered[0]) == "%RETRY%CG_Fifo"
            assert (await client.invoke(addr, ack_request(ordered[0]))).code == ResponseCode.SUCCESS

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


def test_a_master_made_slave_drops_its_pop_state_and_pops_from_the_committed_offset_as_master_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, brokerId=1) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            for n in range(2):
                await send(client, addr, "Orders", b"%d" % n, 0)
            _, first = await pop(client, broker, "Orders", max_nums=1)
            assert (await client.invoke(addr, ack_request(first[0]))).code == ResponseCode.SUCCESS
            _, in_flight = await pop(client, broker, "Orders")
            assert [r.body for r in in_flight] == [b"1"]
            held = asyncio.ensure_future(pop(client, broker, "Orders", poll_ms=60_000))
            await wait_until(lambda: broker.pop._held_total, message="a pop held")
            await broker.become_slave(None, None, 0)
            refused, _ = await held
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (refused.remark or "")
            assert broker.pop.journal.states == {} and broker.pop._revive_heap == []
            # As its master would have: the group consumed message 0 only.
            broker.offsets.commit("CG", "Orders", 0, 1)
            await broker.become_master(broker.epoch + 2)
            stale = await client.invoke(addr, ack_request(in_flight[0]))
            assert stale.code == ResponseCode.NO_MESSAGE
            _, again = await pop(client, broker, "Orders")
            assert [r.body for r in again] == [b"1"]
            pop_time = handle_of(again[0]).pop_time
        # Nor does a restart bring the state dropped back: only the pop since.
        async with running_broker(tmp_path, brokerId=1) as broker:
            inflight = broker.pop.journal.states[("CG", "Orders", 0)].inflight
            assert [(offset, entry.pop_time) for offset, entry in inflight.items()] == [(1, pop_time)]

    run(scenario())


def test_under_sync_flush_pops_and_acks_are_answered_once_a_sync_off_the_loop_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            journal = broker.pop.journal
            loop_thread = threading.current_thread()
            syncs: list[tuple[int, bool]] = []  # (bytes appended by then, on the loop's thread)
            fsync = os.fsync

            def recorded(fd: int) -> None:
                fsync(fd)
                if os.readlink(f"/proc/self/fd/{fd}").endswith(JOURNAL_NAME):
                    syncs.append((journal.appended, threading.current_thread() is loop_thread))

            monkeypatch.setattr(os, "fsync", recorded)
            await create_topic(client, addr, "Orders", 1)
            await send(client, addr, "Orders", b"kept", 0)
            _, (record,) = await pop(client, broker, "Orders")
            assert syncs[-1][0] == journal.appended
            assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS
            assert syncs[-1][0] == journal.appended
            assert not any(on_loop for _, on_loop in syncs)

    run(scenario())


def test_under_sync_flush_a_message_whose_copy_is_being_revived_cannot_be_acked(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            await send(client, addr, "Orders", b"late", 0)
            _, (record,) = await pop(client, broker, "Orders")
            on_disk: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            broker.store.when_flushed = lambda end: on_disk  # type: ignore[method-assign]
            expired = await client.invoke(addr, change_request(record, 0))
            assert expired.code == ResponseCode.SUCCESS
            answer = ChangeInvisibleTimeResponseHeader.decode(expired.ext_fields)
            handle = str(dataclasses.replace(handle_of(record), pop_time=answer.pop_time, invisible_time=0))
            await wait_until(
                lambda: broker.store.max_offset("%RETRY%CG_Orders", 0) == 1, message="the copy stored"
            )
            late = await client.invoke(addr, ack_request(record, handle=handle))
            on_disk.set_result(True)  # first: a stop would wait for it
            assert late.code == ResponseCode.NO_MESSAGE
            state = broker.pop.journal.states[("CG", "Orders", 0)]
            await wait_until(lambda: not state.inflight, message="the original settled")
            _, (copy,) = await pop(client, broker, "Orders")
            assert copy.body == b"late" and copy.reconsume_times == 1

    run(scenario())


def test_the_every_second_journal_sync_goes_on_after_a_failure(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            journal = broker.pop.journal
            calls = []
            sync = journal.sync

            def failing_once() -> None:
                calls.append(None)
                if len(calls) == 1:
                    raise OSError(errno.EIO, "Input/output error")
                sync()

            journal.sync = failing_once  # type: ignore[method-assign]
            await wait_until(lambda: len(calls) >= 2, message="a sync after the failed one")

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


def test_pops_beyond_the_brokers_held_limit_are_answered_polling_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pop, "MAX_HELD", 2)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            held = [
                asyncio.ensure_future(pop(client, broker, "Orders", group=group, poll_ms=60_000))
                for group in ("G1", "G2")
            ]
            await wait_until(lambda: len(broker.pop._held_count) == 2, message="two pops held")
            full = await client.invoke(addr, pop_request("Orders", group="G3", poll_ms=60_000))
            assert full.code == ResponseCode.POLLING_FULL
            noticed = await client.invoke(addr, notification_request("Orders", group="G3", poll_ms=60_000))
            assert NotificationResponseHeader.decode(noticed.ext_fields).polling_full
            await send(client, addr, "Orders", b"for both", 0)
            for each in held:
                assert [r.body for r in (await each)[1]] == [b"for both"]

    run(scenario())


def test_a_queue_with_too_many_messages_in_flight_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pop, "MAX_IN_FLIGHT_PER_QUEUE", 2)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Orders", 1)
            for n in range(3):
                await send(client, addr, "Orders", b"%d" % n, 0)
            _, first = await pop(client, broker, "Orders", max_nums=2)
            skipped, none = await pop(client, broker, "Orders")
            assert skipped.code == ResponseCode.POLLING_TIMEOUT and none == []
            assert PopMessageResponseHeader.decode(skipped.ext_fields).rest_num == 1
            assert (await client.invoke(addr, ack_request(first[0]))).code == ResponseCode.SUCCESS
            _, rest = await pop(client, broker, "Orders")
            assert [r.body for r in rest] == [b"2"]

    run(scenario())


def test_an_attempt_id_longer_than_128_characters_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Fifo", 1)
            long = await client.invoke(addr, pop_request("Fifo", order=True, attempt_id="a" * 129))
            assert long.code == ResponseCode.INVALID_PARAMETER
            assert "attemptId" in (long.remark or "")
            fine = await client.invoke(addr, pop_request("Fifo", order=True, attempt_id="a" * 128))
            assert fine.code == ResponseCode.POLLING_TIMEOUT

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


def test_an_order_pop_repeated_over_several_queues_gives_every_handle_the_answers_pop_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = _pop._now_ms()
    monkeypatch.setattr(_pop, "_now_ms", lambda: frozen)  # every pop in the same ms
    monkeypatch.setattr(_pop.random, "randrange", lambda n: 0)  # queue 0 taken first

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Fifo", 2)
            for queue_id in (0, 1):
                await send(client, addr, "Fifo", b"q%d" % queue_id, queue_id)
            _, first = await pop(client, broker, "Fifo", order=True, attempt_id="a1")
            assert sorted(r.body for r in first) == [b"q0", b"q1"]
            # Queue 1's message gets a later pop time than queue 0's.
            (on_queue_1,) = [r for r in first if r.queue_id == 1]
            assert (await client.invoke(addr, change_request(on_queue_1, 60_000))).code == 0
            response, again = await pop(client, broker, "Fifo", order=True, attempt_id="a1")
            pop_time = PopMessageResponseHeader.decode(response.ext_fields).pop_time
            assert [handle_of(r).pop_time for r in again] == [pop_time, pop_time]
            for record in again:
                assert (await client.invoke(addr, ack_request(record))).code == ResponseCode.SUCCESS

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


def test_a_pop_arriving_too_late_is_refused_and_the_simple_consumer_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with (
            name_server() as (_, ns_addr),
            running_broker(tmp_path, namesrvAddr=ns_addr) as broker,
        ):
            client = RemotingClient()
            try:
                await create_topic(client, address(broker), "Late", 1)
                await send(client, address(broker), "Late", b"waiting", 0)
                await broker.register_all()
                born = int(time.time() * 1000) - 10_000
                late = await client.invoke(address(broker), pop_request("Late", born_time=born))
                assert late.code == ResponseCode.POLLING_TIMEOUT
                assert "timeout too much" in (late.remark or "") and "ms" in (late.remark or "")
            finally:
                await client.close()
            # A consumer whose clock is 10 s behind the broker's.
            behind = types.SimpleNamespace(time=lambda: time.time() - 10)
            monkeypatch.setattr(_popapi, "time", behind)
            async with SimpleConsumer("CG", ns_addr, subscriptions={"Late": "*"}) as consumer:
                with pytest.raises(BrokerError) as raised:
                    await consumer.receive(8, 30, await_duration=0)
                assert raised.value.code == ResponseCode.POLLING_TIMEOUT
                assert "timeout too much" in str(raised.value)

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
            staying = asyncio.ensure_future(pop(client, broker, "Orders", group="Other", poll_ms=60_000))
            await wait_until(lambda: broker.pop._held_total == 2, message="the other pop held")
            scans = []

            class Watched(dict[str, dict[object, None]]):
                def values(self) -> Any:
                    scans.append(None)
                    return super().values()

            broker.pop._held = Watched(broker.pop._held)  # type: ignore[assignment]
            await leaving.close()
            await wait_until(lambda: broker.pop._held_total == 1, message="the held pop forgotten")
            assert scans == []  # found by its connection, not among every held pop
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            await send(client, addr, "Orders", b"for whoever asks next", 0)
            _, records = await pop(client, broker, "Orders")
            assert [r.body for r in records] == [b"for whoever asks next"]
            assert [r.body for r in (await staying)[1]] == [b"for whoever asks next"]

    run(scenario())
