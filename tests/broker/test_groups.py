"""Subscription groups (200/201/207) and what their settings enforce, consumption progress (208),
consumer connections (203), offset resets (222 → 220) and GET_ALL_DELAY_OFFSET (45), against a real
broker on a real socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _support import (
    broker_and_client,
    commit_request,
    create_topic,
    heartbeat,
    pull,
    query_offset_request,
    queue_table,
    run,
    running_broker,
    send,
    send_request,
)

from cometmq.broker import _json_config, _offsets
from cometmq.broker._offsets import ConsumerOffsetManager
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.remoting import Connection, RemotingClient
from waiting import next_millisecond, wait_until


def put_group(group: str, **settings: Any) -> RemotingCommand:
    body = {"groupName": group, **settings}
    return RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(body).encode()
    )


def all_groups() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)


def reset(group: str, topic: str, timestamp: int, **extra: str) -> RemotingCommand:
    fields = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true", **extra}
    return RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext_fields=fields)


async def send_many(client: RemotingClient, addr: str, topic: str, queue_id: int, count: int) -> None:
    for i in range(count):
        await send(client, addr, topic, b"m%d" % i, queue_id)


def test_groups_are_created_listed_updated_deleted_and_persisted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert (
                await client.invoke(addr, put_group("GID_orders", retryMaxTimes=3, retryQueueNums=2))
            ).code == 0
            wrapper = json.loads((await client.invoke(addr, all_groups())).body)
            first_version = wrapper["dataVersion"]["counter"]
            config = wrapper["subscriptionGroupTable"]["GID_orders"]
            assert (config["retryMaxTimes"], config["retryQueueNums"], config["consumeEnable"]) == (
                3,
                2,
                True,
            )
            # Updating replaces the settings and bumps the data version.
            update = put_group("GID_orders", retryMaxTimes="5", consumeBroadcastEnable="false")
            assert (await client.invoke(addr, update)).code == 0
            wrapper = json.loads((await client.invoke(addr, all_groups())).body)
            config = wrapper["subscriptionGroupTable"]["GID_orders"]
            assert (config["retryMaxTimes"], config["consumeBroadcastEnable"]) == (5, False)
            assert wrapper["dataVersion"]["counter"] > first_version
            # Bad requests: one clear line each.
            bad = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"{nope")
            answer = await client.invoke(addr, bad)
            assert answer.code == ResponseCode.SYSTEM_ERROR and "SubscriptionGroupConfig" in (
                answer.remark or ""
            )
            answer = await client.invoke(addr, put_group("bad group!"))
            assert answer.code == ResponseCode.SYSTEM_ERROR and "illegal" in (answer.remark or "")
        saved = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
        assert saved["subscriptionGroupTable"]["GID_orders"]["retryMaxTimes"] == 5

        async with broker_and_client(tmp_path) as (broker, addr, client):  # back after a restart
            table = json.loads((await client.invoke(addr, all_groups())).body)["subscriptionGroupTable"]
            assert table["GID_orders"]["retryMaxTimes"] == 5
            await create_topic(client, addr, "T", 1)
            await client.invoke(addr, commit_request("GID_orders", "T", 0, 0))
            delete = RemotingCommand(
                code=RequestCode.DELETE_SUBSCRIPTIONGROUP,
                ext_fields={"groupName": "GID_orders", "removeOffset": "true"},
            )
            assert (await client.invoke(addr, delete)).code == 0
            table = json.loads((await client.invoke(addr, all_groups())).body)["subscriptionGroupTable"]
            assert "GID_orders" not in table
            assert broker.offsets.query("GID_orders", "T", 0) == -1

    run(scenario())


def test_a_group_with_consume_disabled_cannot_pull(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "T", 1)
            await send_many(client, addr, "T", 0, 1)
            await client.invoke(addr, put_group("CG", consumeEnable=False))
            response, records = await pull(client, addr, "T", 0, 0, group="CG")
            assert (response.code, response.remark) == (
                ResponseCode.NO_PERMISSION,
                "subscription group no permission, CG",
            )
            assert records == []
            await client.invoke(addr, put_group("CG", consumeEnable=True))
            response, records = await pull(client, addr, "T", 0, 0, group="CG")
            assert response.code == 0 and [r.body for r in records] == [b"m0"]

    run(scenario())


def test_broadcasting_consumers_are_refused_when_the_group_forbids_broadcast(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "T", 1)
            await send_many(client, addr, "T", 0, 1)
            for group in ("G_bc", "G_cl"):
                await client.invoke(addr, put_group(group, consumeBroadcastEnable=False))
            await client.invoke(addr, heartbeat("1-127.0.0.1@a", "G_bc", "T", model=0))
            await client.invoke(addr, heartbeat("1-127.0.0.1@b", "G_cl", "T", model=1))
            response, _ = await pull(client, addr, "T", 0, 0, group="G_bc")
            assert response.code == ResponseCode.NO_PERMISSION
            assert response.remark == "the consumer group[G_bc] can not consume by broadcast way"
            response, records = await pull(client, addr, "T", 0, 0, group="G_cl")  # clustering: fine
            assert response.code == 0 and len(records) == 1
            await client.invoke(addr, put_group("G_bc", consumeBroadcastEnable=True))
            response, records = await pull(client, addr, "T", 0, 0, group="G_bc")
            assert response.code == 0 and len(records) == 1

    run(scenario())


def test_a_send_to_the_retry_topic_past_the_groups_max_goes_to_the_dlq(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await client.invoke(addr, put_group("CG", retryMaxTimes=2))
            below = send_request("%RETRY%CG", b"again", queue_id=0, reconsumeTimes="1", v2=False)
            response = await client.invoke(addr, below)
            assert response.code == 0
            assert broker.store.max_offset("%RETRY%CG", 0) == 1
            dead = send_request(
                "%RETRY%CG", b"dead", queue_id=0, reconsumeTimes="2", properties={"DELAY": "3"}, v2=False
            )
            response = await client.invoke(addr, dead)
            assert (response.code, response.ext_fields["queueId"]) == (0, "0")
            assert broker.store.max_offset("%RETRY%CG", 0) == 1  # nothing more in the retry topic
            dlq = broker.topics.get("%DLQ%CG")
            assert dlq is not None and dlq.read_queue_nums == 1
            response, records = await pull(client, addr, "%DLQ%CG", 0, 0, group="CG")
            assert [(r.body, r.reconsume_times) for r in records] == [(b"dead", 2)]
            assert "DELAY" not in records[0].properties  # a dead letter waits for nobody
            # A client of version ≥ 121 may ask for more retries (V2 header field l).
            more = send_request("%RETRY%CG", b"more", queue_id=0, j="2", l="5")
            more.version = 121
            assert (await client.invoke(addr, more)).code == 0
            assert broker.store.max_offset("%RETRY%CG", 0) == 2

    run(scenario())


def test_consume_stats_report_offsets_lag_and_last_consume_time_keyed_by_queue(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "T", 2)
            await send_many(client, addr, "T", 0, 5)
            await send_many(client, addr, "T", 1, 2)
            await client.invoke(addr, commit_request("CG", "T", 0, 1))
            await client.invoke(addr, commit_request("CG", "T", 0, 3))
            stats_request = RemotingCommand(
                code=RequestCode.GET_CONSUME_STATS, ext_fields={"consumerGroup": "CG"}
            )
            response = await client.invoke(addr, stats_request)
            assert response.code == 0
            # fastjson's Map<MessageQueue, OffsetWrapper>: JSON objects as keys.
            assert b'"offsetTable":{{"brokerName":"' + broker.config.broker_name.encode() in response.body
            stats = fastjson.loads(response.body)
            table = queue_table(stats["offsetTable"])
            store_time = broker.store.store_time_at("T", 0, 2)
            assert table[("T", 0)] == {"brokerOffset": 5, "consumerOffset": 3, "lastTimestamp": store_time}
            assert table[("T", 1)] == {"brokerOffset": 2, "consumerOffset": 0, "lastTimestamp": 0}
            # It committed 2 messages of progress within the minute.
            assert stats["consumeTps"] == round(2 / 60, 3)  # reported to 3 decimals
            # A topic named in the header; one the group never touched reports its queues too.
            await create_topic(client, addr, "Other", 1)
            stats_request.ext_fields["topic"] = "Other"
            other = fastjson.loads((await client.invoke(addr, stats_request)).body)
            assert list(queue_table(other["offsetTable"])) == [("Other", 0)]

    run(scenario())


def test_consumer_connection_list(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            request = RemotingCommand(
                code=RequestCode.GET_CONSUMER_CONNECTION_LIST, ext_fields={"consumerGroup": "CG"}
            )
            offline = await client.invoke(addr, request)
            assert (offline.code, offline.remark) == (
                ResponseCode.CONSUMER_NOT_ONLINE,
                "the consumer group[CG] not online",
            )
            await client.invoke(addr, heartbeat("42-127.0.0.1@DEFAULT", "CG", "T"))
            body = json.loads((await client.invoke(addr, request)).body)
            [conn] = body["connectionSet"]
            assert (conn["clientId"], conn["language"]) == ("42-127.0.0.1@DEFAULT", "CPP")
            assert conn["clientAddr"].startswith("127.0.0.1:")
            assert (body["messageModel"], body["consumeType"]) == ("CLUSTERING", "CONSUME_PASSIVELY")
            assert body["subscriptionTable"]["T"]["subString"] == "*"

    run(scenario())


def _received(requests: list[RemotingCommand]) -> RemotingClient:
    def on_request(conn: Connection, request: RemotingCommand) -> None:
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            requests.append(request)

    return RemotingClient(on_request)


def test_reset_by_timestamp_stores_offsets_and_tells_each_consumer_in_its_language(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, admin):
            await create_topic(admin, addr, "T", 2)
            await send_many(admin, addr, "T", 0, 3)
            await send_many(admin, addr, "T", 1, 1)
            cut = next_millisecond()
            await send_many(admin, addr, "T", 0, 2)  # offsets 3 and 4: stored after the cut
            for qid, offset in ((0, 5), (1, 1)):
                await admin.invoke(addr, commit_request("CG", "T", qid, offset))
            cpp_got: list[RemotingCommand] = []
            java_got: list[RemotingCommand] = []
            cpp, java = _received(cpp_got), _received(java_got)
            await cpp.invoke(addr, heartbeat("1-127.0.0.1@cpp", "CG", "T", language="CPP"))
            await java.invoke(addr, heartbeat("127.0.0.1@java", "CG", "T", language="JAVA"))

            response = await admin.invoke(addr, reset("CG", "T", cut))
            assert response.code == 0, response.remark
            assert response.ext_fields["consumersNotified"] == "2"
            body = fastjson.loads(response.body)
            # Queue 0 replays from its first message stored after the cut; queue 1 has none: its end.
            assert queue_table(body["offsetTable"]) == {("T", 0): 3, ("T", 1): 1}
            assert queue_table(body["previousOffsetTable"]) == {("T", 0): 5, ("T", 1): 1}
            stored = await admin.invoke(addr, query_offset_request("CG", "T", 0))
            assert int(stored.ext_fields["offset"]) == 3
            saved = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
            assert saved["offsetTable"]["T@CG"]["0"] == 3  # on disk before the reply

            await wait_until(lambda: cpp_got and java_got, message="both consumers told")
            [to_cpp], [to_java] = cpp_got, java_got
            for told in (to_cpp, to_java):
                assert told.ext_fields == {
                    "topic": "T",
                    "group": "CG",
                    "timestamp": str(cut),
                    "isForce": "false",
                    "queueId": "-1",
                }
            # C++ reads only the array form; Java only the object-keyed map.
            c_style = json.loads(to_cpp.body)["offsetTable"]
            assert sorted((e["queueId"], e["offset"], e["topic"]) for e in c_style) == [
                (0, 3, "T"),
                (1, 1, "T"),
            ]
            assert all(e["brokerName"] == broker.config.broker_name for e in c_style)
            assert queue_table(fastjson.loads(to_java.body)["offsetTable"]) == {("T", 0): 3, ("T", 1): 1}
            for client in (cpp, java):
                await client.close()

    run(scenario())


def test_reset_to_latest_earliest_an_offset_and_its_refusals(tmp_path: Path) -> None:
    async def offsets(
        client: RemotingClient, addr: str, request: RemotingCommand
    ) -> dict[tuple[str, int], int]:
        response = await client.invoke(addr, request)
        assert response.code == 0, response.remark
        assert response.ext_fields["consumersNotified"] == "0"  # nobody online: stored all the same
        return queue_table(fastjson.loads(response.body)["offsetTable"])

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "T", 2)
            await send_many(client, addr, "T", 0, 4)
            await client.invoke(addr, put_group("CG"))
            assert await offsets(client, addr, reset("CG", "T", -1)) == {("T", 0): 4, ("T", 1): 0}
            assert await offsets(client, addr, reset("CG", "T", 0)) == {("T", 0): 0, ("T", 1): 0}
            explicit = reset("CG", "T", -1, queueId="0", offset="2")
            assert await offsets(client, addr, explicit) == {("T", 0): 2}
            assert broker.offsets.query("CG", "T", 0) == 2
            # Without isForce a reset only ever moves back (RocketMQ): 2 stays, not 4.
            assert await offsets(client, addr, reset("CG", "T", -1, isForce="false")) == {
                ("T", 0): 2,
                ("T", 1): 0,
            }

            out_of_range = await client.invoke(addr, reset("CG", "T", -1, queueId="0", offset="9"))
            assert out_of_range.code == ResponseCode.SYSTEM_ERROR
            assert out_of_range.remark == "Target offset 9 not in consume queue range [0-4]"
            no_topic = await client.invoke(addr, reset("CG", "Nope", -1))
            assert no_topic.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in (
                no_topic.remark or ""
            )
            no_group = await client.invoke(addr, reset("GID_typo", "T", -1))
            assert no_group.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST

    run(scenario())


def test_get_all_delay_offset_answers_the_delivery_progress(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "T", 1)
            delayed = send_request("T", b"later", properties={"DELAY": "1"})  # level 1: 1 s
            assert (await client.invoke(addr, delayed)).code == 0
            await wait_until(
                lambda: broker.store.max_offset("T", 0) >= 1, message="the delayed message delivered"
            )
            response = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_DELAY_OFFSET))
            assert response.code == 0
            # fastjson: level keys unquoted; a CometMQ master's timer progress beside (no unit yet), and
            # where the delivered copy ends.
            end = broker.store.commitlog_max_offset
            assert response.body == (
                b'{"offsetTable":{1:1},"timerProgress":{"base":0,"settled":""},"deliveredEnd":%d}' % end
            )

    run(scenario())


def test_consume_tps_keeps_one_entry_a_second_and_forgets_what_is_a_minute_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.2]
    monkeypatch.setattr(_offsets.time, "monotonic", lambda: clock[0])
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("CG", "T", 0, 0)
    offsets.commit("CG", "T", 0, 6)
    clock[0] = 1000.7
    offsets.commit("CG", "T", 0, 12)  # the same second: added to its entry
    assert list(offsets._progress["T@CG"]) == [[1000, 12]]
    clock[0] = 1030.0
    offsets.commit("CG", "T", 0, 15)
    clock[0] = 1059.9
    assert offsets.consume_tps("CG", "T") == pytest.approx(15 / 60)
    clock[0] = 1060.0  # second 1000 is now a minute old
    assert offsets.consume_tps("CG", "T") == pytest.approx(3 / 60)
    assert list(offsets._progress["T@CG"]) == [[1030, 3]]


def test_consume_tps_counts_committed_progress_over_a_minute_but_not_resets(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("CG", "T", 0, 10)  # a first commit is no progress: nothing was before it
    offsets.commit("CG", "T", 0, 15)
    offsets.commit("CG", "T", 1, 3)
    offsets.commit("CG", "T", 1, 4)
    offsets.reset("CG", "T", 0, 100)  # an administrator's move is no consumption
    offsets.commit("CG", "T", 0, 101)
    offsets.commit("CG", "T", 0, 90)  # going back is no progress either
    assert offsets.consume_tps("CG", "T") == pytest.approx((5 + 1 + 1) / 60)
    assert offsets.consume_tps("CG", "Other") == 0.0
    assert offsets.query("CG", "T", 0) == 90


def test_deleting_a_group_or_a_topic_forgets_what_it_pulled(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    for group, topic in (("CG", "T"), ("CG", "U"), ("Other", "T"), ("Other", "U")):
        offsets.commit(group, topic, 0, 1)
        offsets.pulled[(group, topic, 0)] = 5
    offsets.delete_group("CG")
    assert set(offsets.pulled) == {("Other", "T", 0), ("Other", "U", 0)}
    offsets.delete_topic("T")
    assert set(offsets.pulled) == {("Other", "U", 0)}


def test_an_older_offsets_snapshot_written_late_never_replaces_a_newer_one(tmp_path: Path) -> None:
    # The periodic write runs on an executor thread; at shutdown the broker writes the table again
    # on its own. Whichever write runs last, the file ends with the newest offsets.
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("CG", "T", 0, 10)
    periodic = offsets.persist_later()  # snapshot taken, its write not yet run
    assert periodic is not None
    offsets.commit("CG", "T", 0, 20)
    offsets.persist(force=True)  # the shutdown's write
    periodic()  # the periodic write's thread gets there last
    reloaded = ConsumerOffsetManager(tmp_path)
    reloaded.load()
    assert reloaded.query("CG", "T", 0) == 20


def injected_full_disk(path: Path, obj: object) -> None:
    """A fake save_json_config: the disk error a full disk gives."""
    raise OSError(28, "No space left on device")


def test_an_offsets_write_that_fails_is_made_again_by_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("CG", "T", 0, 7)

    monkeypatch.setattr(_json_config, "save_json_config", injected_full_disk)
    write = offsets.persist_later()
    assert write is not None
    write()  # logged, not raised: the table in memory stays the truth
    assert offsets.write_pending
    monkeypatch.undo()
    again = offsets.persist_later()  # not forced: the table is still dirty
    assert again is not None
    again()
    assert not offsets.write_pending
    reloaded = ConsumerOffsetManager(tmp_path)
    reloaded.load()
    assert reloaded.query("CG", "T", 0) == 7


def test_a_broker_that_cannot_write_its_offsets_at_stop_still_writes_the_rest_and_shuts_down_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "data" / "config"

    async def scenario() -> None:
        async with running_broker(tmp_path / "data"):
            real_save = _json_config.save_json_config

            def offsets_fail(path: Path, obj: object) -> None:
                if path.name in ("consumerOffset.json", "delayOffset.json"):
                    injected_full_disk(path, obj)
                real_save(path, obj)

            monkeypatch.setattr(_json_config, "save_json_config", offsets_fail)
            for name in ("topics.json", "subscriptionGroup.json"):
                (config / name).unlink(missing_ok=True)  # so that only the stop can write them again

    run(scenario())
    assert "cannot write the consumer offsets at shutdown" in caplog.text
    assert "cannot write the delay offsets at shutdown" in caplog.text
    assert (config / "topics.json").exists() and (config / "subscriptionGroup.json").exists()
    assert not (tmp_path / "data" / "abort").exists()  # the store shut down cleanly
