"""Deduplication on a real broker over real sockets: a send repeated with the same UNIQ_KEY is stored
once and answered with the first copy; the window, the bound on keys, the per-topic attribute over the
broker's default, and the attribute's round trip through topics.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.broker_headers import NotifyBrokerRoleChangedRequestHeader
from cometmq.protocol.naming import TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.remoting import RemotingClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import (
    address,
    broker_and_client,
    create_topic,
    name_server,
    pull,
    run,
    running_broker,
    send_request,
)

from waiting import wait_until


def _answer(response: RemotingCommand) -> tuple[str, int, int]:
    assert response.code == ResponseCode.SUCCESS, response.remark
    fields = response.ext_fields
    return fields["msgId"], int(fields["queueId"]), int(fields["queueOffset"])


async def _send(
    client: RemotingClient, addr: str, topic: str, key: str, queue_id: int = 0, *, v2: bool = True
) -> tuple[str, int, int]:
    request = send_request(topic, f"body of {key}".encode(), queue_id, {"UNIQ_KEY": key}, v2=v2)
    return _answer(await client.invoke(addr, request))


async def _send_batch(
    client: RemotingClient, addr: str, topic: str, keys: list[str], queue_id: int = 0, **extra: str
) -> tuple[str, int, int]:
    entries = [
        BatchEntry(0, f"body of {key}".encode(), encode_properties({"UNIQ_KEY": key, **extra}))
        for key in keys
    ]
    request = send_request(topic, encode_batch_body(entries), queue_id, m="true")
    return _answer(await client.invoke(addr, request))


async def _keys_in(client: RemotingClient, addr: str, topic: str, queue_id: int) -> list[str]:
    response, records = await pull(client, addr, topic, queue_id, 0)
    assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), response.remark
    return [decode_properties(record.properties)["UNIQ_KEY"] for record in records]


@pytest.mark.parametrize("v2", [True, False], ids=["SEND_MESSAGE_V2", "SEND_MESSAGE"])
def test_a_repeated_send_is_stored_once_and_answered_with_the_first_copy(tmp_path: Path, v2: bool) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (_, addr, client):
            await create_topic(client, addr, "Once")
            first = await _send(client, addr, "Once", "K1", 0, v2=v2)
            # The retry picked another queue, as a producer's retry does: the answer names the first.
            assert await _send(client, addr, "Once", "K1", 1, v2=v2) == first
            assert await _send(client, addr, "Once", "K1", 0, v2=v2) == first
            other = await _send(client, addr, "Once", "K2", 0, v2=v2)
            assert other[0] != first[0] and other[2] == first[2] + 1
            assert await _keys_in(client, addr, "Once", 0) == ["K1", "K2"]
            assert await _keys_in(client, addr, "Once", 1) == []

    run(main())


@pytest.mark.parametrize("extra", [{}, {"WAIT": "true"}], ids=["columns", "general"])
def test_batches_store_only_the_messages_not_stored_yet(tmp_path: Path, extra: dict[str, str]) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (_, addr, client):
            await create_topic(client, addr, "Batches")
            ids, queue_id, offset = await _send_batch(client, addr, "Batches", ["A", "B"], **extra)
            first_ids = ids.split(",")
            assert (queue_id, offset) == (0, 0)
            # All repeats: the first copies' answer.
            assert await _send_batch(client, addr, "Batches", ["A", "B"], 1, **extra) == (ids, 0, 0)
            # A mix, with a key twice in the batch: only C is stored; the ids in the batch's order.
            mixed, queue_id, offset = await _send_batch(
                client, addr, "Batches", ["B", "C", "A", "C"], **extra
            )
            mixed_ids = mixed.split(",")
            assert mixed_ids[0] == first_ids[1] and mixed_ids[2] == first_ids[0]
            assert mixed_ids[1] == mixed_ids[3] not in first_ids
            assert (queue_id, offset) == (0, 1)  # the first message's: B's
            # A repeat of a single message a batch stored.
            assert (await _send(client, addr, "Batches", "C", 1))[0] == mixed_ids[1]
            assert await _keys_in(client, addr, "Batches", 0) == ["A", "B", "C"]
            assert await _keys_in(client, addr, "Batches", 1) == []

    run(main())


def test_a_key_outside_the_window_is_stored_again(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(
            tmp_path, deduplicationEnable="true", deduplicationWindowSeconds="1"
        ) as (_, addr, client):
            first = await _send(client, addr, "Window", "K")

            async def stored_again() -> bool:
                return (await _send(client, addr, "Window", "K"))[0] != first[0]

            await wait_until(stored_again, message="a repeat stored once the window has passed")
            assert await _keys_in(client, addr, "Window", 0) == ["K", "K"]

    run(main())


def test_at_most_max_keys_are_remembered_the_oldest_forgotten_first(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path, deduplicationEnable="true", deduplicationMaxKeys="3") as (
            broker,
            addr,
            client,
        ):
            answers = [await _send(client, addr, "Bounded", key) for key in ["K1", "K2", "K3", "K4"]]
            assert len(broker.deduplicator) == 3
            assert await _send(client, addr, "Bounded", "K4") == answers[3]  # remembered
            assert await _send(client, addr, "Bounded", "K1") != answers[0]  # forgotten: stored again
            assert await _keys_in(client, addr, "Bounded", 0) == ["K1", "K2", "K3", "K4", "K1"]

    run(main())


def test_the_topic_attribute_overrides_the_broker_default(tmp_path: Path) -> None:
    async def stored_twice(client: RemotingClient, addr: str, topic: str) -> bool:
        await _send(client, addr, topic, "K")
        await _send(client, addr, topic, "K")
        return len(await _keys_in(client, addr, topic, 0)) == 2

    async def main() -> None:
        async with broker_and_client(tmp_path / "off") as (_, addr, client):
            assert (
                await create_topic(client, addr, "On", attributes="+deduplication=true")
            ).code == ResponseCode.SUCCESS
            await create_topic(client, addr, "Plain")
            assert not await stored_twice(client, addr, "On")
            assert await stored_twice(client, addr, "Plain")
        async with broker_and_client(tmp_path / "on", deduplicationEnable="true") as (_, addr, client):
            await create_topic(client, addr, "Off", attributes="+deduplication=false")
            await create_topic(client, addr, "Default")
            assert await stored_twice(client, addr, "Off")
            assert not await stored_twice(client, addr, "Default")

    run(main())


def test_attributes_round_trip_through_topics_json_and_updates(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            created = await create_topic(
                client, addr, "Attributed", 2, attributes="+deduplication=true,+message.type=NORMAL"
            )
            assert created.code == ResponseCode.SUCCESS, created.remark
            # An update without attributes keeps them.
            assert (await create_topic(client, addr, "Attributed", queues=4)).code == ResponseCode.SUCCESS
            refused = await create_topic(client, addr, "Attributed", attributes="+dedup=true")
            assert refused.code == ResponseCode.INVALID_PARAMETER
            assert "unknown topic attribute 'dedup'" in (refused.remark or "")
            refused = await create_topic(client, addr, "Attributed", attributes="+deduplication=yes")
            assert refused.code == ResponseCode.INVALID_PARAMETER and "takes false or true" in (
                refused.remark or ""
            )
            assert broker.topics.topics["Attributed"].attributes == {
                "deduplication": "true",
                "message.type": "NORMAL",
            }
        stored = json.loads((tmp_path / "config" / "topics.json").read_text())
        assert stored["topicConfigTable"]["Attributed"]["attributes"] == {
            "deduplication": "true",
            "message.type": "NORMAL",
        }
        async with running_broker(tmp_path) as broker:
            assert broker.topics.topics["Attributed"].attributes["deduplication"] == "true"
            client = RemotingClient()
            try:
                removed = await create_topic(
                    client, address(broker), "Attributed", attributes="-message.type"
                )
                assert removed.code == ResponseCode.SUCCESS, removed.remark
                assert broker.topics.topics["Attributed"].attributes == {"deduplication": "true"}
            finally:
                await client.close()

    run(main())


def test_the_keys_of_the_window_are_rebuilt_at_start(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (_, addr, client):
            await create_topic(client, addr, "Rebuilt")
            single = await _send(client, addr, "Rebuilt", "S", 1)
            batch = await _send_batch(client, addr, "Rebuilt", ["B1", "B2"])
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (broker, addr, client):
            assert len(broker.deduplicator) == 3
            assert await _send(client, addr, "Rebuilt", "S", 0) == single
            assert await _send_batch(client, addr, "Rebuilt", ["B1", "B2"], 1) == batch
            assert await _keys_in(client, addr, "Rebuilt", 0) == ["B1", "B2"]
            assert await _keys_in(client, addr, "Rebuilt", 1) == ["S"]

    run(main())


def test_the_rebuild_takes_a_batchcq_topics_single_messages_and_passes_over_its_inner_batches(
    tmp_path: Path,
) -> None:
    """An inner batch is not deduplicated: its record's UNIQ_KEY (the batch's) is no key, and the rebuild
    reads its record once, not once per message."""

    async def main() -> None:
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (_, addr, client):
            await create_topic(client, addr, "Batched", 1, attributes="+queue.type=BatchCQ")
            first = await _send(client, addr, "Batched", "S1")
            entries = [BatchEntry(0, b"m%d" % i, "") for i in range(50)]
            request = send_request(
                "Batched", encode_batch_body(entries), 0, {"UNIQ_KEY": "BATCHKEY"}, m="true"
            )
            assert _answer(await client.invoke(addr, request))[2] == 1
            last = await _send(client, addr, "Batched", "S2")
            assert last[2] == 51
        async with broker_and_client(tmp_path, deduplicationEnable="true") as (broker, addr, client):
            assert len(broker.deduplicator) == 2
            assert await _send(client, addr, "Batched", "S1") == first
            assert await _send(client, addr, "Batched", "S2") == last
            assert (await _send(client, addr, "Batched", "BATCHKEY"))[2] == 52  # a key of its own: stored

    run(main())


def test_a_promoted_slave_answers_a_repeat_of_what_its_old_master_stored(tmp_path: Path) -> None:
    def role_changed(master_address: str, epoch: int) -> RemotingCommand:
        header = NotifyBrokerRoleChangedRequestHeader(master_address=master_address, master_epoch=epoch)
        return RemotingCommand(code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=header.encode())

    async def main() -> None:
        client = RemotingClient()
        async with (
            name_server() as (_, ns_addr),
            running_broker(
                tmp_path / "a", namesrvAddr=ns_addr, brokerId=2, deduplicationEnable="true"
            ) as master,
            running_broker(
                tmp_path / "b",
                slave_sync_period_s=0.1,
                namesrvAddr=ns_addr,
                brokerRole="SLAVE",
                brokerId=1,
                deduplicationEnable="true",
            ) as slave,
        ):
            master_addr, slave_addr = address(master), address(slave)
            await create_topic(client, master_addr, "Promoted")
            first = await _send(client, master_addr, "Promoted", "K")
            await wait_until(
                lambda: (
                    slave.store.replica_end() == master.store.replica_end()
                    and "Promoted" in slave.topics.topics
                ),
                message="the slave holds the master's log and topic",
            )
            assert len(slave.deduplicator) == 0  # a slave serves no sends
            assert (
                await client.invoke(master_addr, role_changed(slave_addr, 2))
            ).code == ResponseCode.SUCCESS
            assert len(master.deduplicator) == 0
            assert (await client.invoke(slave_addr, role_changed(slave_addr, 2))).code == ResponseCode.SUCCESS
            assert await _send(client, slave_addr, "Promoted", "K", 1) == first
            assert await _keys_in(client, slave_addr, "Promoted", 0) == ["K"]
            assert await _keys_in(client, slave_addr, "Promoted", 1) == []
        await client.close()

    run(main())


def test_a_repeated_half_message_is_stored_once_when_its_real_topic_is_deduplicated(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Transactional", attributes="+deduplication=true")
            properties = {"UNIQ_KEY": "H1", "TRAN_MSG": "true", "PGROUP": "PG"}

            async def send_half(queue_id: int) -> tuple[str, int, int]:
                request = send_request("Transactional", b"half", queue_id, properties, sysFlag="4")
                return _answer(await client.invoke(addr, request))

            first = await send_half(1)
            assert first[1] == 1  # the answer names the real queue
            assert await send_half(0) == first
            assert broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 1
            assert await _keys_in(client, addr, "Transactional", 0) == []

    run(main())
