"""POP consumption against a real broker: pop, ack, change invisible time, revive, DLQ, order pops,
long polling, and the refusals."""

from __future__ import annotations

from pathlib import Path

from _pop_support import ack_request, handle_of, pop
from _support import address, broker_and_client, create_topic, run, send

from cometmq.protocol import ResponseCode


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
