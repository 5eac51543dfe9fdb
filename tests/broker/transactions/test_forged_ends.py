"""END_TRANSACTION trusts the half queue, not the request: a half record planted inside another
message's body cannot be committed (nor settle the half whose queue offset it names), and an op
record naming a half offset the half queue does not hold settles nothing and does not pin the
progress."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from _tx_support import (
    COMMIT,
    GROUP,
    Half,
    broker_and_client,
    create_topic,
    end_request,
    pull,
    run,
    send,
    send_half,
)

from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import decode_record_at, encode_record_into, record_size
from cometmq.protocol.transaction import TRANSACTION_CHECK_GROUP, Settlement
from cometmq.store import PutStatus

TOPIC = "TxVictim"
CARRIER = "TxCarrier"
SECRET = "TxSecret"
FORGER = "PG_FORGER"
_HOST = bytes([127, 0, 0, 1, 0, 0, 0x27, 0x10])


def planted_half(commitlog_offset: int, queue_offset: int) -> bytes:
    """A record in the commit-log layout that claims to be a half message of group FORGER for
    SECRET, at *commitlog_offset* with half-queue offset *queue_offset*."""
    topic = TRANS_HALF_TOPIC.encode()
    properties = encode_properties(
        {"PGROUP": FORGER, "REAL_TOPIC": SECRET, "REAL_QID": "0", "UNIQ_KEY": "FORGED"}
    ).encode()
    body = b"forged"
    buf = bytearray(record_size(len(body), len(topic), len(properties)))
    encode_record_into(
        buf, 0, 0, 0, queue_offset, commitlog_offset, 0, 0, _HOST, 0, _HOST, 0, 0, body, topic, properties
    )
    return bytes(buf)


def test_a_half_record_planted_in_a_message_body_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            for topic in (TOPIC, CARRIER, SECRET):
                await create_topic(client, addr, topic, queues=1)
            victim = await send_half(client, addr, TOPIC, b"victim's order")
            # A first carrier of the same size tells where the second one's body starts.
            first_at, _ = await send(client, addr, CARRIER, planted_half(0, victim.queue_offset))
            _, (first,) = await pull(client, addr, CARRIER, 0, 0)
            second_at = first_at + first.total_size
            # The record ends with BODY, TOPICLENGTH (1 byte), TOPIC, PROPERTIESLENGTH (2), PROPERTIES.
            tail = len(first.body) + 1 + len(CARRIER) + 2 + len(first.properties.encode())
            body_at = second_at + first.total_size - tail
            got, _ = await send(client, addr, CARRIER, planted_half(body_at, victim.queue_offset))
            assert got == second_at
            view = broker.store.message_at(body_at)  # the plant decodes as a half message
            assert view is not None
            seen = decode_record_at(view, 0, len(view))
            del view
            assert (seen.topic, seen.queue_offset) == (TRANS_HALF_TOPIC, victim.queue_offset)

            forged = Half(0, victim.queue_offset, "", body_at, "FORGED")
            response = await client.invoke(addr, end_request(forged, COMMIT, group=FORGER), timeout=10)
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert f"not commitLogOffset {body_at}" in (response.remark or "")

            response = await client.invoke(addr, end_request(victim, COMMIT, group=GROUP), timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            _, delivered = await pull(client, addr, TOPIC, 0, 0)
            assert [r.body for r in delivered] == [b"victim's order"]
            response, leaked = await pull(client, addr, SECRET, 0, 0)
            assert leaked == [], response.remark

    run(scenario())


def test_an_op_record_naming_no_stored_half_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cometmq.broker")

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            service = broker.transactions
            far = 1_000_000
            assert broker.store.put(service.op_record(far, Settlement.ROLLBACK)).status is PutStatus.PUT_OK
            await service.stop()
            service.start()  # reads the op records from O on
            assert far not in service.settled
            warnings = [r for r in caplog.records if "name half offsets at or past" in r.getMessage()]
            assert len(warnings) == 1

            half = await send_half(client, addr, TOPIC, b"after")
            response = await client.invoke(addr, end_request(half, COMMIT), timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            await service.check_round()
            # O moves past the bogus op record with the real one: it pins nothing.
            assert broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == 2
            assert broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1

    run(scenario())
