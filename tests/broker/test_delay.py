"""Delayed messages through a real broker: parked in SCHEDULE_TOPIC_XXXX, delivered when due, and
delivery resumed from delayOffset.json after a restart.

Timing is judged by the store's own timestamps (parked copy vs delivered copy), not by the test's
sleeps: delivered no earlier than the delay, and within 1 s after it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from _support import address, broker_and_client, create_topic, pull, run, running_broker, send_request

from cometmq.broker._schedule import from_schedule, to_schedule
from cometmq.protocol import ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id
from cometmq.remoting import RemotingClient
from cometmq.store import MessageToStore
from waiting import wait_until

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
FAST_LEVELS = {"messageDelayLevel": "1s 2s 3s"}  # for tests about mechanics, not the default table


async def delivered(
    client: RemotingClient, addr: str, topic: str, queue_id: int, offset: int
) -> list[DecodedRecord]:
    """What *topic*/*queue_id* holds from *offset* on, once it holds something (long-polled)."""

    async def pulled() -> list[DecodedRecord]:
        _, records = await pull(client, addr, topic, queue_id, offset, suspend_ms=1000)
        return records

    return await wait_until(pulled, message=f"a message in {topic}/{queue_id} from offset {offset}")


def props(record: DecodedRecord) -> dict[str, str]:
    return decode_properties(record.properties)


def test_levels_1_to_3_are_delivered_not_before_their_delay_with_everything_intact(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Later")).code == 0
            sent = {}
            for level in (1, 2, 3):
                user = {
                    "TAGS": f"T{level}",
                    "KEYS": f"k{level} other",
                    "UNIQ_KEY": f"U{level}",
                    "color": "red",
                }
                response = await client.invoke(
                    addr, send_request("Later", b"body-%d" % level, level, {**user, "DELAY": str(level)})
                )
                assert response.code == ResponseCode.SUCCESS, response.remark
                # RocketMQ answers with the real queue and the offset in the schedule queue.
                assert response.ext_fields["queueId"] == str(level)
                assert response.ext_fields["queueOffset"] == "0"
                sent[level] = decode_offset_msg_id(response.ext_fields["msgId"])[2]

            # Parked: in SCHEDULE_TOPIC_XXXX queue level-1, nothing in the real topic yet.
            parked = {}
            for level in (1, 2, 3):
                _, records = await pull(client, addr, "Later", level, 0)
                assert records == []
                _, (record,) = await pull(client, addr, SCHEDULE, level - 1, 0)
                assert record.commitlog_offset == sent[level]
                stored = props(record)
                assert (stored["REAL_TOPIC"], stored["REAL_QID"], stored["DELAY"]) == (
                    "Later",
                    str(level),
                    str(level),
                )
                unit = broker.store.queue_unit(SCHEDULE, level - 1, 0)
                assert unit is not None
                assert unit[2] == record.store_timestamp + broker.schedule.delays_ms[level - 1]
                parked[level] = record

            for level, delay_ms in ((1, 1000), (2, 5000), (3, 10_000)):
                (record,) = await delivered(client, addr, "Later", level, 0)
                late = record.store_timestamp - parked[level].store_timestamp - delay_ms
                assert late >= 0, f"level {level} delivered {-late} ms before its delay"
                assert record.body == b"body-%d" % level
                assert record.topic == "Later" and record.queue_id == level
                assert record.born_timestamp == parked[level].born_timestamp
                stored = props(record)
                assert "DELAY" not in stored
                assert stored["TAGS"] == f"T{level}" and stored["KEYS"] == f"k{level} other"
                assert stored["UNIQ_KEY"] == f"U{level}" and stored["color"] == "red"
                assert stored["REAL_TOPIC"] == "Later"  # kept, as RocketMQ keeps it
                # The tags code is the tag's hash again: a tag-filtered pull finds it.
                _, filtered = await pull(client, addr, "Later", level, 0, subscription=f"T{level}")
                assert [r.body for r in filtered] == [record.body]
            assert broker.schedule.offsets == {1: 1, 2: 1, 3: 1}

    run(scenario())


def test_parked_messages_survive_a_restart_and_are_delivered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with running_broker(tmp_path, **FAST_LEVELS) as broker:
            addr = address(broker)
            assert (await create_topic(client, addr, "Durable", 1)).code == 0
            first = await client.invoke(addr, send_request("Durable", b"early", 0, {"DELAY": "1"}))
            assert first.code == ResponseCode.SUCCESS, first.remark
            assert [r.body for r in await delivered(client, addr, "Durable", 0, 0)] == [b"early"]
            for i, level in enumerate((2, 3, 3)):
                body = b"parked-%d" % i
                response = await client.invoke(addr, send_request("Durable", body, 0, {"DELAY": str(level)}))
                assert response.code == ResponseCode.SUCCESS, response.remark
        # Stopped with three messages parked: the file says where each level stands.
        offset_file = tmp_path / "config" / "delayOffset.json"
        assert json.loads(offset_file.read_text()) == {"offsetTable": {"1": 1}}

        async with running_broker(tmp_path, **FAST_LEVELS) as broker:
            addr = address(broker)
            await wait_until(
                lambda: broker.store.max_offset("Durable", 0) >= 4, message="the parked messages delivered"
            )
            await asyncio.sleep(0.5)  # nothing more may come
            _, everything = await pull(client, addr, "Durable", 0, 0)
            assert sorted(r.body for r in everything) == [b"early", b"parked-0", b"parked-1", b"parked-2"]
        assert json.loads(offset_file.read_text()) == {"offsetTable": {"1": 1, "2": 1, "3": 2}}

        # A clean restart after delivery delivers nothing again.
        async with running_broker(tmp_path, **FAST_LEVELS) as broker:
            addr = address(broker)
            await asyncio.sleep(1.5)
            assert broker.store.max_offset("Durable", 0) == 4
        await client.close()

    run(scenario())


def test_offsets_are_written_right_after_a_delivery(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_LEVELS) as (_, addr, client):
            offset_file = tmp_path / "config" / "delayOffset.json"
            response = await client.invoke(addr, send_request("Quick", b"x", 0, {"DELAY": "1"}))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert await delivered(client, addr, "Quick", 0, 0)
            await wait_until(offset_file.exists, message="delayOffset.json written")
            # Written while the broker runs, so a crash now would not deliver it again.
            assert json.loads(offset_file.read_text()) == {"offsetTable": {"1": 1}}

    run(scenario())


def test_a_delayed_message_counts_once_parked_and_once_delivered_each_under_the_topic_it_is_stored_in(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_LEVELS) as (broker, addr, client):
            assert (await create_topic(client, addr, "Counted", 1)).code == ResponseCode.SUCCESS
            response = await client.invoke(addr, send_request("Counted", b"x", 0, {"DELAY": "1"}))
            assert response.code == ResponseCode.SUCCESS, response.remark
            stats = broker.stats
            assert stats.put_by_topic[SCHEDULE][0] == 1  # the parked copy
            assert "Counted" not in stats.put_by_topic
            assert await delivered(client, addr, "Counted", 0, 0)
            assert (stats.put_by_topic["Counted"][0], stats.put_by_topic[SCHEDULE][0]) == (1, 1)
            assert stats.put_messages == 2  # two records stored

    run(scenario())


def test_a_level_above_the_table_is_capped_and_a_missing_real_topic_does_not_block_its_level(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, messageDelayLevel="1s 2s") as (broker, addr, client):
            for topic in ("Doomed", "Kept"):
                assert (await create_topic(client, addr, topic, 1)).code == 0
            capped = await client.invoke(addr, send_request("Kept", b"capped", 0, {"DELAY": "7"}))
            assert capped.code == ResponseCode.SUCCESS, capped.remark
            _, (parked,) = await pull(client, addr, SCHEDULE, 1, 0)  # level 2: the last one
            assert props(parked)["DELAY"] == "2"
            for topic in ("Doomed", "Kept"):
                response = await client.invoke(addr, send_request(topic, topic.encode(), 0, {"DELAY": "1"}))
                assert response.code == ResponseCode.SUCCESS, response.remark
            assert broker.topics.delete("Doomed")
            got = await delivered(client, addr, "Kept", 0, 0)
            assert [r.body for r in got] == [b"Kept"]
            assert broker.schedule.offsets[1] == 2  # the dropped message moved the level on too
            got += await delivered(client, addr, "Kept", 0, 1)
            assert [r.body for r in got] == [b"Kept", b"capped"]
            assert broker.store.max_offset("Doomed", 0) == 0

    run(scenario())


def test_delayed_batches_bad_levels_and_no_delay_levels(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_LEVELS) as (_, addr, client):
            assert (await create_topic(client, addr, "Plain", 1)).code == 0
            entries = [BatchEntry(0, b"b", encode_properties({"DELAY": "1"}))]
            batch = send_request("Plain", encode_batch_body(entries), 0, v2=False, batch="1")
            response = await client.invoke(addr, batch)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL
            assert "batches cannot be delayed" in (response.remark or "")
            # DELAY 0 or below is no delay at all (RocketMQ tests > 0).
            for level in ("0", "-1"):
                response = await client.invoke(
                    addr, send_request("Plain", level.encode(), 0, {"DELAY": level})
                )
                assert response.code == ResponseCode.SUCCESS, response.remark
            _, records = await pull(client, addr, "Plain", 0, 0)
            assert [r.body for r in records] == [b"0", b"-1"]

    run(scenario())


def test_to_schedule_and_back_keeps_the_message() -> None:
    props_text = encode_properties({"TAGS": "A", "KEYS": "k", "UNIQ_KEY": "U", "x": "y"})
    msg = MessageToStore(
        topic="Real", queue_id=3, flag=7, body=b"payload", properties=props_text, sys_flag=0,
        born_timestamp=123, born_host=bytes(8), store_host=bytes(8), reconsume_times=2, tags_code=65,
        keys="k", uniq_key="U",
    )  # fmt: skip
    parked = to_schedule(msg, 30, max_level=18)
    assert (parked.topic, parked.queue_id) == (SCHEDULE, 17)
    assert decode_properties(parked.properties) == {
        "TAGS": "A", "KEYS": "k", "UNIQ_KEY": "U", "x": "y",
        "DELAY": "18", "REAL_TOPIC": "Real", "REAL_QID": "3",
    }  # fmt: skip
    record = DecodedRecord(
        0, 0, 0, parked.queue_id, parked.flag, 0, 0, parked.sys_flag, parked.born_timestamp,
        parked.born_host, 456, parked.store_host, parked.reconsume_times, 0, parked.body,
        parked.topic, parked.properties,
    )  # fmt: skip
    back = from_schedule(record, store_host=b"\x7f\x00\x00\x01\x00\x00\x2a\x9f")
    assert (back.topic, back.queue_id, back.body, back.flag) == ("Real", 3, b"payload", 7)
    assert (back.born_timestamp, back.reconsume_times, back.tags_code) == (123, 2, 65)
    assert (back.keys, back.uniq_key) == ("k", "U")
    assert "DELAY" not in decode_properties(back.properties)
    assert decode_properties(back.properties)["REAL_QID"] == "3"


def test_a_unit_that_raises_keeps_the_progress_made_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        # An hour's delay: only the direct deliver_due calls below, with a later "now", deliver.
        async with broker_and_client(tmp_path, messageDelayLevel="1h") as (broker, addr, client):
            assert (await create_topic(client, addr, "Later", 1)).code == 0
            for i in range(3):
                reply = await client.invoke(addr, send_request("Later", b"m%d" % i, 0, {"DELAY": "1"}))
                assert reply.code == ResponseCode.SUCCESS, reply.remark
            service = broker.schedule
            real = service._deliver_one
            failed: list[int] = []

            def fails_once_at_offset_1(level: int, offset: int, *rest: Any) -> object:
                if offset == 1 and not failed:
                    failed.append(offset)
                    raise OSError("injected failure")
                return real(level, offset, *rest)

            monkeypatch.setattr(service, "_deliver_one", fails_once_at_offset_1)
            later = int(time.time() * 1000) + 2 * 3_600_000
            with pytest.raises(OSError):
                service.deliver_due(later)
            assert service.offsets[1] == 1  # m0 was delivered: it is not delivered again
            service.deliver_due(later)
            assert service.offsets[1] == 3
            _, records = await pull(client, addr, "Later", 0, 0)
            assert [r.body for r in records] == [b"m0", b"m1", b"m2"]

    run(scenario())
