"""A name the broker cannot keep (a lone UTF-16 surrogate, illegal characters) is refused where it is
decoded, with SYSTEM_ERROR and a readable remark, and never reaches the broker's tables; a metadata
file holding such a name loads everything else and keeps the file as it was."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from _support import (
    address,
    commit_request,
    create_topic,
    heartbeat,
    is_routed,
    pull_request,
    run,
    running_broker,
)

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting import RemotingClient
from processes import start_standalone
from waiting import wait_until

LONE_SURROGATE = "\ud800"


def _heartbeat(client_id: str = "client-1", group: str = "G", producer_group: str = "P") -> RemotingCommand:
    request = heartbeat(client_id, group, "T")
    body = json.loads(request.body)
    body["producerDataSet"] = [{"groupName": producer_group}]
    # json.dumps writes a lone surrogate as the escape "\ud800", as a client's JSON would carry it.
    request.body = json.dumps(body).encode()
    return request


def _assert_refused(response: RemotingCommand, field: str, reason: str) -> None:
    assert response.code == ResponseCode.SYSTEM_ERROR
    remark = response.remark or ""
    assert remark.startswith(f"{field}[\\ud800]: "), remark
    assert reason in remark
    remark.encode()  # readable: holds no surrogate itself


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"group": LONE_SURROGATE}, "ConsumerData.groupName", "illegal characters"),
        ({"client_id": LONE_SURROGATE}, "HeartbeatData.clientID", "not valid text"),
        ({"producer_group": LONE_SURROGATE}, "ProducerData.groupName", "illegal characters"),
    ],
)
def test_a_heartbeat_with_a_name_that_is_not_text_is_refused_and_the_broker_keeps_registering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fields: dict[str, str], field: str, reason: str
) -> None:
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        namesrv_addr = f"127.0.0.1:{namesrv.port}"
        try:
            async with running_broker(tmp_path, namesrvAddr=namesrv_addr) as broker:
                client = RemotingClient()
                addr = address(broker)
                _assert_refused(await client.invoke(addr, _heartbeat(**fields)), field, reason)
                assert broker.groups.get(LONE_SURROGATE) is None
                assert broker.topics.get("%RETRY%" + LONE_SURROGATE) is None
                assert LONE_SURROGATE not in broker.consumers.groups
                assert (await client.invoke(addr, _heartbeat())).code == ResponseCode.SUCCESS

                table = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
                assert table.code == ResponseCode.SUCCESS
                assert "%RETRY%G" in json.loads(table.body)["topicConfigTable"]
                # Creating a topic registers the whole table at once: it reaches the name server.
                assert (await create_topic(client, addr, "AfterTheBadName")).code == ResponseCode.SUCCESS
                await wait_until(
                    lambda: is_routed(namesrv_addr, "AfterTheBadName"), message="the topic routed"
                )
                await client.close()
        finally:
            await namesrv.stop()

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert not [record for record in caplog.records if record.exc_info], (
        "a client's mistake logged a traceback"
    )


def test_a_header_name_that_is_not_text_is_refused_before_it_is_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            addr = address(broker)
            await create_topic(client, addr, "T", 1)
            commit = await client.invoke(addr, commit_request(LONE_SURROGATE, "T", 0, 5))
            _assert_refused(commit, "consumerGroup", "illegal characters")
            pull = await client.invoke(addr, pull_request("T", 0, 0, group=LONE_SURROGATE))
            _assert_refused(pull, "consumerGroup", "illegal characters")
            bad_topic = await client.invoke(addr, commit_request("G", LONE_SURROGATE, 0, 5))
            _assert_refused(bad_topic, "topic", "illegal characters")
            assert broker.offsets.offsets == {}
            await client.close()

    run(scenario())


def _write_json(path: Path, obj: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj).encode()  # the surrogate as an escape, as the broker's own files wrote it
    path.write_bytes(data)
    return data


def _topic(name: str) -> dict[str, object]:
    return {"topicName": name, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}


def _group(name: str) -> dict[str, object]:
    return {"groupName": name, "retryQueueNums": 1}


def _poisoned_config(config_dir: Path) -> dict[str, bytes]:
    """Metadata files each holding good entries and entries the broker must skip, by file name."""
    bad_group = LONE_SURROGATE
    bad_retry = "%RETRY%" + LONE_SURROGATE
    return {
        "topics.json": _write_json(
            config_dir / "topics.json",
            {
                "topicConfigTable": {
                    "Good": _topic("Good"),
                    "%RETRY%GoodGroup": _topic("%RETRY%GoodGroup"),
                    bad_retry: _topic(bad_retry),
                    "bad topic": _topic("bad topic"),
                    "NoQueues": {"topicName": "NoQueues", "readQueueNums": "many"},
                    "TooManyQueues": {**_topic("TooManyQueues"), "readQueueNums": 5000},
                    "BadPerm": {**_topic("BadPerm"), "perm": 99},
                },
                "dataVersion": {"counter": 3, "timestamp": 1},
            },
        ),
        "subscriptionGroup.json": _write_json(
            config_dir / "subscriptionGroup.json",
            {
                "subscriptionGroupTable": {
                    "GoodGroup": _group("GoodGroup"),
                    bad_group: _group(bad_group),
                    "HugeRetry": {**_group("HugeRetry"), "retryQueueNums": 1_000_000},
                }
            },
        ),
        "consumerOffset.json": _write_json(
            config_dir / "consumerOffset.json",
            {"offsetTable": {"Good@GoodGroup": {"0": 7}, f"Good@{bad_group}": {"0": 1}, "no-at": {"0": 1}}},
        ),
        "delayOffset.json": _write_json(
            config_dir / "delayOffset.json", {"offsetTable": {"1": 4, "x": 2, "2": "not a number"}}
        ),
    }


def test_metadata_with_bad_entries_loads_the_good_ones_and_keeps_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    originals = _poisoned_config(tmp_path / "config")

    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            assert broker.topics.get("Good") is not None
            assert broker.topics.get("%RETRY%GoodGroup") is not None
            for skipped in ("%RETRY%" + LONE_SURROGATE, "bad topic", "NoQueues", "TooManyQueues", "BadPerm"):
                assert broker.topics.get(skipped) is None
            assert broker.groups.get("GoodGroup") is not None
            assert broker.groups.get(LONE_SURROGATE) is None
            assert broker.groups.get("HugeRetry") is None
            assert broker.offsets.offsets == {"Good@GoodGroup": {0: 7}}
            assert broker.schedule.offsets == {1: 4}
            client = RemotingClient()
            table = await client.invoke(
                address(broker), RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG)
            )
            assert table.code == ResponseCode.SUCCESS
            await client.close()

    with caplog.at_level(logging.WARNING, logger="cometmq.broker"):
        run(scenario())
    skipped = [record.getMessage() for record in caplog.records if record.getMessage().startswith("skipping")]
    assert len(skipped) == 11, skipped  # one line per bad entry
    assert any("TooManyQueues" in line and "5000 queues, above 1024" in line for line in skipped), skipped
    assert any("retryQueueNums=1000000 is above 1024" in line for line in skipped), skipped
    assert any("'%RETRY%\\ud800'" in line and "topics.json" in line for line in skipped), skipped
    for name, original in originals.items():
        assert (tmp_path / "config" / f"{name}.skipped.bak").read_bytes() == original


def test_standalone_starts_with_a_bad_name_in_its_topics_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _poisoned_config(data_dir / "config")
    server, namesrv = start_standalone(data_dir)
    try:
        assert asyncio.run(is_routed(namesrv, "Good"))
        assert "skipping topic '%RETRY%\\ud800'" in server.log()
    finally:
        assert server.terminate() == 0
