"""Send and pull against a real broker over real sockets, storing to real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _support import (
    address,
    broker_and_client,
    create_topic,
    held_pulls,
    pull,
    pull_request,
    run,
    running_broker,
    send_request,
)

from cometmq.protocol import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_bytes,
)
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import decode_offset_msg_id, decode_records
from cometmq.remoting import RemotingClient
from cometmq.store._mappedfile import MappedFile
from waiting import wait_until

HOUR_MS = 3_600_000


def test_sent_message_is_pulled_with_everything_intact(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert (await create_topic(client, addr, "Orders")).code == 0
            props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "WAIT": "true", "color": "red"}
            response = await client.invoke(addr, send_request("Orders", b"hello", 2, props))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert response.ext_fields["queueId"] == "2"
            assert response.ext_fields["queueOffset"] == "0"
            assert response.ext_fields["MSG_REGION"] == "DefaultRegion"
            _, _, commitlog_offset = decode_offset_msg_id(response.ext_fields["msgId"])

            pulled, records = await pull(client, addr, "Orders", 2, 0)
            assert pulled.code == ResponseCode.SUCCESS
            assert pulled.ext_fields["nextBeginOffset"] == "1"
            assert pulled.ext_fields["maxOffset"] == "1"
            (record,) = records
            assert record.body == b"hello"
            assert record.topic == "Orders" and record.queue_id == 2 and record.queue_offset == 0
            assert record.commitlog_offset == commitlog_offset
            stored = decode_properties(record.properties)
            assert stored["TAGS"] == "TagA"
            assert stored["KEYS"] == "k1 k2"
            assert stored["color"] == "red"
            assert stored["CLUSTER"] == "DefaultCluster"
            assert "WAIT" not in stored  # the broker drops WAIT from the stored copy

    run(scenario())


def test_v1_send_and_rocketmq_binary_serialization_answered_in_kind(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            request = send_request("AutoMade", b"x", 0, v2=False)
            request.serialize_type = SerializeType.ROCKETMQ
            response = await client.invoke(address(broker), request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert response.serialize_type is SerializeType.ROCKETMQ
            # Auto-created from TBW102 with min(requested 4, TBW102's 8) queues.
            assert broker.topics.get("AutoMade") is not None
            assert broker.topics.get("AutoMade").write_queue_nums == 4  # type: ignore[union-attr]
            await client.close()

    run(scenario())


def test_batches_from_cpp_and_java_get_consecutive_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Batch", 1)
            entries = [
                BatchEntry(0, f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"U{i}", "TAGS": "T"}))
                for i in range(3)
            ]
            body = encode_batch_body(entries)
            cpp = send_request("Batch", body, 0, {"WAIT": "true"}, v2=False, batch="1")  # C++: code 10
            java = send_request("Batch", body, 0, v2=True, m="true")
            java.code = RequestCode.SEND_BATCH_MESSAGE
            first = await client.invoke(addr, cpp)
            second = await client.invoke(addr, java)
            assert first.code == second.code == ResponseCode.SUCCESS
            assert first.ext_fields["queueOffset"] == "0" and second.ext_fields["queueOffset"] == "3"
            assert len(first.ext_fields["msgId"].split(",")) == 3
            _, records = await pull(client, addr, "Batch", 0, 0)
            assert [r.body for r in records] == [b"m0", b"m1", b"m2"] * 2
            assert [r.queue_offset for r in records] == list(range(6))
            assert [decode_properties(r.properties)["UNIQ_KEY"] for r in records] == ["U0", "U1", "U2"] * 2

    run(scenario())


def test_batch_messages_keep_their_properties_and_the_general_path_agrees(tmp_path: Path) -> None:
    """Messages without WAIT/DELAY/TRAN_MSG take the fast path (their text kept, CLUSTER appended);
    the others are decoded and merged. Both must store the same properties, tag codes and keys."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Mixed", 1)
            fast = encode_properties({"KEYS": "k1 k2", "TAGS": "A", "UNIQ_KEY": "U0", "x": "1"}) + "\x02"
            general = encode_properties({"TAGS": "A", "UNIQ_KEY": "U1", "WAIT": "true", "x": "2"})
            body = encode_batch_body([BatchEntry(0, b"fast", fast), BatchEntry(0, b"general", general)])
            request = send_request("Mixed", body, 0, v2=True, m="true")
            request.code = RequestCode.SEND_BATCH_MESSAGE
            assert (await client.invoke(addr, request)).code == ResponseCode.SUCCESS
            _, records = await pull(client, addr, "Mixed", 0, 0)
            stored = [decode_properties(r.properties) for r in records]
            assert stored[0] == {
                "KEYS": "k1 k2", "TAGS": "A", "UNIQ_KEY": "U0", "x": "1", "CLUSTER": "DefaultCluster"
            }  # fmt: skip
            assert stored[1] == {"TAGS": "A", "UNIQ_KEY": "U1", "x": "2", "CLUSTER": "DefaultCluster"}
            # Both are found by their tag's hash code, so the tag code was stored for each.
            _, tagged = await pull(client, addr, "Mixed", 0, 0, subscription="A")
            assert [r.body for r in tagged] == [b"fast", b"general"]
            # And the fast path indexed the keys.
            found = broker.store.query_messages("Mixed", "k2", 10, 0, 2**62)
            assert [r.body for r in decode_records(b"".join(found.buffers))] == [b"fast"]

    run(scenario())


def test_tag_filter_returns_only_matching_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Tagged", 1)
            for i, tag in enumerate(["A", "B", "C", "A", ""]):
                props = {"TAGS": tag} if tag else {}
                await client.invoke(addr, send_request("Tagged", str(i).encode(), 0, props))
            response, records = await pull(client, addr, "Tagged", 0, 0, subscription="A || C")
            assert [r.body for r in records] == [b"0", b"2", b"3"]
            assert response.ext_fields["nextBeginOffset"] == "5"
            _, everything = await pull(client, addr, "Tagged", 0, 0, subscription="*")
            assert len(everything) == 5
            none, _ = await pull(client, addr, "Tagged", 0, 0, subscription="Z")
            assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert none.ext_fields["nextBeginOffset"] == "5"

    run(scenario())


def test_pull_status_codes_and_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Q", 2)
            empty, _ = await pull(client, addr, "Q", 0, 0)
            assert empty.code == ResponseCode.PULL_NOT_FOUND
            moved, _ = await pull(client, addr, "Q", 0, 5)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "0"
            await client.invoke(addr, send_request("Q", b"a", 1))
            at_end, _ = await pull(client, addr, "Q", 1, 1)
            assert at_end.code == ResponseCode.PULL_NOT_FOUND
            past, _ = await pull(client, addr, "Q", 1, 9)
            assert past.code == ResponseCode.PULL_OFFSET_MOVED and past.ext_fields["nextBeginOffset"] == "1"
            for response in (empty, moved, at_end, past):
                assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= set(
                    response.ext_fields
                )
            missing, _ = await pull(client, addr, "NoSuchTopic", 0, 0)
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_long_polling_answers_when_a_message_lands_and_does_not_block_heartbeats(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Poll", 1)
            # Held for an hour unless a message lands: an answer within the client's 30 s is the arrival's.
            held = asyncio.ensure_future(pull(client, addr, "Poll", 0, 0, suspend_ms=HOUR_MS))
            await wait_until(lambda: held_pulls(broker) == 1, message="the pull held")
            # Same connection: a heartbeat must be answered while the pull is held.
            heartbeat = RemotingCommand(code=RequestCode.HEART_BEAT, body=b'{"clientID":"c1"}')
            reply = await client.invoke(addr, heartbeat, timeout=30)
            assert reply.code == ResponseCode.SUCCESS
            assert not held.done() and held_pulls(broker) == 1
            await client.invoke(addr, send_request("Poll", b"wake", 0))
            response, records = await held
            assert response.code == ResponseCode.SUCCESS and [r.body for r in records] == [b"wake"]
            timed_out, _ = await pull(client, addr, "Poll", 0, 1, suspend_ms=300)
            assert timed_out.code == ResponseCode.PULL_NOT_FOUND

    run(scenario())


def test_a_message_sent_in_the_same_read_as_a_held_pull_wakes_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            await create_topic(client, address(broker), "Race", 1)
            await client.close()
            pull_cmd = pull_request("Race", 0, 0, suspend_ms=HOUR_MS)  # only a message can answer it
            pull_cmd.opaque = 1
            send_cmd = send_request("Race", b"raced", 0)
            send_cmd.opaque = 2
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            writer.write(encode_bytes(pull_cmd) + encode_bytes(send_cmd))  # one write, one read
            decoder = FrameDecoder()
            replies: dict[int, RemotingCommand] = {}  # by opaque, in the order they came
            while len(replies) < 2:
                data = await asyncio.wait_for(reader.read(65536), 30)
                replies.update((cmd.opaque, cmd) for cmd in decoder.feed(data))
            # The arrival itself answers the held pull, in the send's loop step: before the send's reply.
            assert list(replies) == [1, 2]
            assert replies[1].code == ResponseCode.SUCCESS
            assert [r.body for r in decode_records(replies[1].body)] == [b"raced"]
            writer.close()

    run(scenario())


def test_pull_with_the_heartbeat_subscription_and_commit_offset_flag(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Sub", 1)
            await client.invoke(addr, send_request("Sub", b"a", 0, {"TAGS": "X"}))
            await client.invoke(addr, send_request("Sub", b"b", 0, {"TAGS": "Y"}))
            request = pull_request("Sub", 0, 0, group="HB")
            request.ext_fields["sysFlag"] = "1"  # commit offset, no subscription in the pull
            request.ext_fields["commitOffset"] = "1"
            request.ext_fields["subVersion"] = "100"
            missing = await client.invoke(addr, request)
            assert missing.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
            body = (
                '{"clientID":"c","consumerDataSet":[{"groupName":"HB","consumeType":1,"messageModel":1,'
                '"consumeFromWhere":0,"subscriptionDataSet":[{"topic":"Sub","subString":"Y","subVersion":"%d"}]}]}'
            )
            await client.invoke(addr, RemotingCommand(code=RequestCode.HEART_BEAT, body=(body % 50).encode()))
            stale = await client.invoke(addr, request)
            assert stale.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
            await client.invoke(
                addr, RemotingCommand(code=RequestCode.HEART_BEAT, body=(body % 100).encode())
            )
            found = await client.invoke(addr, request)
            assert found.code == ResponseCode.SUCCESS
            assert [r.body for r in decode_records(found.body)] == [b"b"]  # the registered filter: Y
            assert broker.offsets.query("HB", "Sub", 0) == 1  # stored by the commit-offset flag

    run(scenario())


def test_sync_flush_send_is_answered_after_its_fsync(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            await create_topic(client, addr, "Durable", 1)
            responses = await asyncio.gather(
                *(client.invoke(addr, send_request("Durable", f"d{i}".encode(), 0)) for i in range(20))
            )
            assert all(r.code == ResponseCode.SUCCESS for r in responses)
            end = max(decode_offset_msg_id(r.ext_fields["msgId"])[2] for r in responses)
            assert broker.store.commitlog_flushed_offset > end

    run(scenario())


def test_a_failed_disk_flush_is_never_answered_send_ok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk error is injected (a fake: the commit log's fdatasync raises EIO)."""

    def failing_sync(self: MappedFile) -> None:
        raise OSError(5, "Input/output error")

    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (_, addr, client):
            await create_topic(client, addr, "Fragile", 1)
            monkeypatch.setattr(MappedFile, "sync", failing_sync)
            first = await client.invoke(addr, send_request("Fragile", b"stored, not flushed", 0))
            assert first.code == ResponseCode.FLUSH_DISK_TIMEOUT
            assert first.remark is not None and "could not write to disk (Input/output error)" in first.remark
            later = await client.invoke(addr, send_request("Fragile", b"refused", 0))
            assert later.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert later.remark == first.remark
            monkeypatch.undo()  # let shutdown flush

    run(scenario())
