"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) through a real broker:
parked in rmq_sys_wheel_timer, delivered to their real queue not before their time, refused beyond
timerMaxDelaySec, and delivered once across restarts (tests/crash/test_timer_kill9.py kills the broker).

"Not before its time" is judged by the store's own timestamp of the delivered copy; how late it comes is
never asserted (the machine may be loaded): the test only waits for it."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest
from _support import address, broker_and_client, create_topic, pull, run, running_broker, send_request
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker import _timer
from cometmq.broker._transaction import SettledHalves
from cometmq.errors import RequestRefused
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import RemotingClient
from waiting import wait_until

TIMER = "rmq_sys_wheel_timer"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def props(record: DecodedRecord) -> dict[str, str]:
    return decode_properties(record.properties)


async def delivered(client: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> list[DecodedRecord]:
    """What *topic*/*queue_id* holds, once it holds something (long-polled)."""

    async def pulled() -> list[DecodedRecord]:
        _, records = await pull(client, addr, topic, queue_id, 0, suspend_ms=1000)
        return records

    return await wait_until(pulled, message=f"a message in {topic}/{queue_id}")


async def send(
    client: RemotingClient, addr: str, topic: str, body: bytes, **properties: str
) -> RemotingCommand:
    return await client.invoke(addr, send_request(topic, body, 0, properties))


def test_each_way_of_asking_delivers_not_before_its_time_with_the_message_intact(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            for topic in ("AtTime", "AfterSec", "AfterMs"):
                assert (await create_topic(client, addr, topic, 1)).code == 0
            asked = now_ms()
            sends = {
                "AtTime": {"TIMER_DELIVER_MS": str(asked + 1500)},
                "AfterSec": {"TIMER_DELAY_SEC": "1"},
                "AfterMs": {"TIMER_DELAY_MS": "1200"},
            }
            earliest = {"AtTime": asked + 1500, "AfterSec": asked + 1000, "AfterMs": asked + 1200}
            for topic, timer in sends.items():
                user = {"TAGS": "T", "KEYS": f"k-{topic}", "UNIQ_KEY": f"U-{topic}", "color": "red"}
                response = await send(client, addr, topic, topic.encode(), **user, **timer)
                assert response.code == ResponseCode.SUCCESS, response.remark
                assert response.ext_fields["queueId"] == "0"  # the real queue, as for DELAY

            # Parked in queue 0 of the timer topic with the real queue and the delivery time.
            _, parked = await pull(client, addr, TIMER, 0, 0)
            assert sorted(props(r)["REAL_TOPIC"] for r in parked) == ["AfterMs", "AfterSec", "AtTime"]
            for record in parked:
                stored = props(record)
                assert stored["REAL_QID"] == "0"
                assert int(stored["TIMER_OUT_MS"]) >= earliest[stored["REAL_TOPIC"]]

            for topic in sends:
                (record,) = await delivered(client, addr, topic)
                assert record.store_timestamp >= earliest[topic], f"{topic} delivered before its time"
                assert record.body == topic.encode()
                stored = props(record)
                assert "REAL_TOPIC" not in stored and "REAL_QID" not in stored
                assert stored["TAGS"] == "T" and stored["KEYS"] == f"k-{topic}" and stored["color"] == "red"
                assert stored["UNIQ_KEY"] == f"U-{topic}"
                # As RocketMQ: the asking property and the delivery time stay, the times are added.
                assert set(sends[topic]) <= set(stored)
                assert int(stored["TIMER_DEQUEUE_MS"]) >= int(stored["TIMER_OUT_MS"])
                assert "TIMER_ENQUEUE_MS" in stored
                _, filtered = await pull(client, addr, topic, 0, 0, subscription="T")
                assert [r.body for r in filtered] == [record.body]
            await wait_until(lambda: broker.timer.waiting == 0, message="nothing left waiting")

    run(scenario())


def test_a_time_not_in_the_future_is_stored_at_once_and_a_delay_level_wins(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, messageDelayLevel="1s 2s") as (broker, addr, client):
            assert (await create_topic(client, addr, "Now", 1)).code == 0
            past = await send(client, addr, "Now", b"past", TIMER_DELIVER_MS=str(now_ms() - 10))
            assert past.code == ResponseCode.SUCCESS, past.remark
            _, (record,) = await pull(client, addr, "Now", 0, 0)
            assert record.body == b"past"
            assert broker.store.max_offset(TIMER, 0) == 0

            level = await send(client, addr, "Now", b"level", DELAY="1", TIMER_DELAY_SEC="3600")
            assert level.code == ResponseCode.SUCCESS, level.remark
            _, (scheduled,) = await pull(client, addr, "SCHEDULE_TOPIC_XXXX", 0, 0)
            assert scheduled.body == b"level"
            assert "TIMER_DELAY_SEC" not in props(scheduled)  # RocketMQ's checkIfTimerMessage drops it
            assert broker.store.max_offset(TIMER, 0) == 0

    run(scenario())


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, timerMaxDelaySec="10") as (broker, addr, client):
            assert (await create_topic(client, addr, "Refused", 1)).code == 0
            beyond = await send(client, addr, "Refused", b"x", TIMER_DELAY_SEC="11")
            assert beyond.code == ResponseCode.MESSAGE_ILLEGAL
            assert "beyond the broker's timerMaxDelaySec of 10 s" in str(beyond.remark)
            far = await send(client, addr, "Refused", b"x", TIMER_DELIVER_MS=str(now_ms() + 60_000))
            assert far.code == ResponseCode.MESSAGE_ILLEGAL
            bad = await send(client, addr, "Refused", b"x", TIMER_DELAY_MS="soon")
            assert (bad.code, bad.remark) == (
                ResponseCode.MESSAGE_ILLEGAL,
                "timer message illegal: TIMER_DELAY_MS 'soon' is not a whole number",
            )
            within = await send(client, addr, "Refused", b"x", TIMER_DELAY_SEC="9")
            assert within.code == ResponseCode.SUCCESS, within.remark

            body = encode_batch_body(
                [BatchEntry(0, b"a", ""), BatchEntry(0, b"b", encode_properties({"TIMER_DELAY_SEC": "1"}))]
            )
            refused = await client.invoke(addr, send_request("Refused", body, 0, v2=False, batch="1"))
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL
            assert refused.remark is not None and "batches cannot be timer messages" in refused.remark
            assert broker.store.max_offset("Refused", 0) == 0

            # A direct send to the timer topic is refused as to the other parking topics.
            direct = await send(client, addr, TIMER, b"x")
            assert direct.code == ResponseCode.NO_PERMISSION
        async with broker_and_client(tmp_path, timerWheelEnable="false") as (_, addr, client):
            # Any timer property is refused, whatever its value, as RocketMQ's WHEEL_TIMER_NOT_ENABLE.
            for value in ("1", "0", "soon"):
                off = await send(client, addr, "Refused", b"x", TIMER_DELAY_SEC=value)
                assert (off.code, off.remark) == (
                    ResponseCode.SYSTEM_ERROR,
                    "accurate timer message is not enabled on this broker (timerWheelEnable is false)",
                )

    run(scenario())


def test_parked_messages_survive_a_restart_and_are_delivered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            assert (await create_topic(client, addr, "Durable", 1)).code == 0
            early = await send(client, addr, "Durable", b"early", TIMER_DELAY_MS="100")
            assert early.code == ResponseCode.SUCCESS, early.remark
            assert [r.body for r in await delivered(client, addr, "Durable")] == [b"early"]
            late_ms = now_ms() + 2500
            for i in range(3):
                sent = await send(client, addr, "Durable", b"late-%d" % i, TIMER_DELIVER_MS=str(late_ms))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
        # Stopped with three messages parked: the progress settles the first unit only.
        progress = json.loads((tmp_path / "config" / "timerProgress.json").read_text())
        assert progress["base"] == 0 and base64.b64decode(progress["settled"]) == b"\x01"

        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            await wait_until(
                lambda: broker.store.max_offset("Durable", 0) >= 4, message="the parked messages delivered"
            )
            _, everything = await pull(client, addr, "Durable", 0, 0)
            assert sorted(r.body for r in everything) == [b"early", b"late-0", b"late-1", b"late-2"]
            assert all(r.store_timestamp >= late_ms for r in everything[1:])

        # A clean restart after delivery delivers nothing again: every unit is settled.
        async with running_broker(tmp_path) as broker:
            assert broker.timer.settled.first_unsettled == 4
            broker.timer.deliver_due(now_ms() + 10_000_000)
            assert broker.store.max_offset("Durable", 0) == 4
        await client.close()

    run(scenario())


def test_a_unit_waiting_long_is_rolled_so_the_progress_stays_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_timer, "_ROLL_SLACK", 16)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Rolled", 1)).code == 0
            far = await send(client, addr, "Rolled", b"far", TIMER_DELAY_SEC="3600")
            assert far.code == ResponseCode.SUCCESS, far.remark
            for i in range(40):
                near = await send(client, addr, "Rolled", b"near-%d" % i, TIMER_DELAY_MS="1")
                assert near.code == ResponseCode.SUCCESS, near.remark
            await wait_until(
                lambda: broker.store.max_offset("Rolled", 0) == 40, message="the near messages delivered"
            )
            # The far one was put again at the end of the timer queue, so the settled units behind it
            # are no longer kept: what the progress covers is short again.
            await wait_until(
                lambda: broker.timer.settled.first_unsettled > 0, message="the far message rolled"
            )
            _, parked = await pull(client, addr, TIMER, 0, 0, max_nums=64)
            rolled = [r for r in parked if r.body == b"far" and "TIMER_ROLL_TIMES" in props(r)]
            # Rolled each time enough settled units followed it, counted each time.
            assert rolled and [props(r)["TIMER_ROLL_TIMES"] for r in rolled] == [
                str(times) for times in range(1, len(rolled) + 1)
            ]
            assert props(rolled[0])["TIMER_OUT_MS"] == props(parked[0])["TIMER_OUT_MS"]
            assert broker.timer.waiting == 1
            assert broker.store.max_offset("Rolled", 0) == 40  # the far one is not delivered early

    run(scenario())


def test_nothing_is_delivered_before_its_time_whatever_the_round(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Patient", 1)).code == 0
            due = now_ms() + 3_600_000
            sent = await send(client, addr, "Patient", b"x", TIMER_DELIVER_MS=str(due))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            await wait_until(lambda: broker.timer.waiting == 1, message="the unit read")
            next_due, _ = broker.timer.deliver_due(due - 1)
            assert next_due == due and broker.store.max_offset("Patient", 0) == 0

    run(scenario())


@given(
    name=st.sampled_from(["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"]),
    text=st.one_of(st.integers(-(2**63), 2**63).map(str), st.text(max_size=12)),
)
def test_any_timer_property_value_is_a_time_no_timer_or_one_refusal(name: str, text: str) -> None:
    now = 1_700_000_000_000
    try:
        due = _timer.timer_delivery_ms({name: text}, now, 3 * 86_400)
    except RequestRefused as refused:
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert refused.remark.startswith("timer message illegal: ")
        return
    assert text.lstrip("+-").isascii() and text.lstrip("+-").isdigit()
    value = int(text)
    asked = {"TIMER_DELIVER_MS": value, "TIMER_DELAY_SEC": now + value * 1000, "TIMER_DELAY_MS": now + value}
    assert due == (asked[name] if asked[name] > now else None)
    assert due is None or due - now <= 3 * 86_400_000


@given(st.lists(st.integers(0, 200), max_size=60), st.integers(0, 200))
def test_the_settled_units_survive_their_snapshot(offsets: list[int], below: int) -> None:
    settled = SettledHalves()
    for offset in offsets:
        settled.add(offset)
    settled.advance()
    restored = SettledHalves.restored(*settled.snapshot())
    assert [o in restored for o in range(256)] == [o in settled for o in range(256)]
    restored.settle_below(below)
    assert all(o in restored for o in range(below))
    assert [o in restored for o in range(below, 256)] == [o in settled for o in range(below, 256)]


def test_a_unit_waiting_longer_than_half_the_retention_is_rolled_and_outlives_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = {"fileReservedTime": "48", "deleteWhen": "04", "mappedFileSizeCommitLog": "65536"}
        async with broker_and_client(tmp_path, **settings) as (broker, addr, client):
            for topic in ("Distant", "Filler"):
                assert (await create_topic(client, addr, topic, 1)).code == 0
            sent_ms = now_ms()
            far = await send(client, addr, "Distant", b"far", TIMER_DELAY_SEC=str(3 * 86_400 - 60))
            assert far.code == ResponseCode.SUCCESS, far.remark
            for _ in range(100):  # the segment holding the parked copy fills up
                await send(client, addr, "Filler", b"f" * 1000)
            await wait_until(lambda: broker.timer.waiting == 1, message="the unit read")
            # 25 hours on, the copy is older than half the 48 hours of retention: rolled.
            broker.timer.deliver_due(sent_ms + 25 * 3_600_000)
            assert broker.store.max_offset(TIMER, 0) == 2
            await wait_until(lambda: broker.timer.waiting == 1, message="the rolled copy read")
            _, parked = await pull(client, addr, TIMER, 0, 0)
            assert [r.body for r in parked] == [b"far", b"far"]
            assert props(parked[1])["TIMER_ROLL_TIMES"] == "1"
            assert props(parked[1])["TIMER_OUT_MS"] == props(parked[0])["TIMER_OUT_MS"]
            rolled_at = parked[1].commitlog_offset
            for _ in range(100):
                await send(client, addr, "Filler", b"f" * 1000)
            # A retention pass at the next 04:30 (deleteWhen) deletes the segments before the rolled copy,
            # aged 49 hours; those written since are less than a day old then, within the 48 hours kept.
            today = time.localtime(sent_ms / 1000)[:3]
            clean_s = time.mktime((*today, 4, 30, 0, 0, 0, -1))
            if clean_s <= sent_ms / 1000:
                clean_s = time.mktime((today[0], today[1], today[2] + 1, 4, 30, 0, 0, 0, -1))
            clean_ms = int(clean_s * 1000)
            for segment in broker.store._commitlog.segments:
                if segment.start + segment.size <= rolled_at:
                    old = (clean_ms - 49 * 3_600_000) / 1000
                    os.utime(segment.path, (old, old))
            report = broker.store.clean(clean_ms)
            assert broker.store.commitlog_min_offset > parked[0].commitlog_offset, report
            broker.timer.deliver_due(sent_ms + 3 * 86_400_000)
            assert [r.body for r in await delivered(client, addr, "Distant")] == [b"far"]

    run(scenario())


def test_rolling_re_puts_at_most_one_waiting_unit_per_two_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_timer, "_ROLL_SLACK", 8)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Mixed", 1)).code == 0
            for i in range(20):
                far = await send(client, addr, "Mixed", b"far-%d" % i, TIMER_DELAY_SEC="3600")
                assert far.code == ResponseCode.SUCCESS, far.remark
            for i in range(200):
                near = await send(client, addr, "Mixed", b"near-%d" % i, TIMER_DELAY_MS="1")
                assert near.code == ResponseCode.SUCCESS, near.remark
            await wait_until(
                lambda: broker.store.max_offset("Mixed", 0) == 200, message="the near messages delivered"
            )
            await wait_until(lambda: not broker.timer.deliver_due()[1], message="nothing more to roll")
            rolled = broker.store.max_offset(TIMER, 0) - 220
            assert 0 < rolled <= 200 // 2
            assert broker.timer.waiting == 20
            # Entries of rolled units left in the heap never outnumber the waiting ones.
            assert len(broker.timer._waiting) <= 2 * broker.timer.waiting

    run(scenario())


def test_a_unit_skipped_for_good_holds_the_progress_file_until_its_record_is_flushed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Vanishing", 1)).code == 0
            due = now_ms() + 3_600_000
            sent = await send(client, addr, "Vanishing", b"x", TIMER_DELIVER_MS=str(due))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            await wait_until(lambda: broker.timer.waiting == 1, message="the unit read")
            unit = broker.store.queue_unit(TIMER, 0, 0)
            assert unit is not None
            broker.topics.delete("Vanishing")
            broker.timer.deliver_due(due)  # no real topic: settled without a copy
            assert 0 in broker.timer.settled and broker.store.max_offset("Vanishing", 0) == 0
            # The progress file is written once the log is flushed to at least past the unit.
            assert broker.timer._progress.delivered_end >= unit[0] + unit[1]

    run(scenario())


def test_a_start_rebuilds_the_waiting_units_from_their_consume_queue_units_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        due = now_ms() + 3_600_000
        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            assert (await create_topic(client, addr, "Rebuilt", 1)).code == 0
            for i in range(3):
                sent = await send(client, addr, "Rebuilt", b"%d" % i, TIMER_DELIVER_MS=str(due + i))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            # Each unit's tags code is its delivery time.
            units = [broker.store.queue_unit(TIMER, 0, i) for i in range(3)]
            assert [unit and unit[2] for unit in units] == [due, due + 1, due + 2]

        def no_record_read(self: _timer.TimerMessageService, offset: int, commitlog_offset: int) -> int:
            raise AssertionError(f"the record of unit {offset} was read")

        monkeypatch.setattr(_timer.TimerMessageService, "_due_of", no_record_read)
        async with running_broker(tmp_path) as broker:
            await wait_until(lambda: broker.timer.waiting == 3, message="the units read")
            assert broker.timer.deliver_due(due + 1) == (due + 2, False)
            assert broker.store.max_offset("Rebuilt", 0) == 2
        await client.close()

    run(scenario())
