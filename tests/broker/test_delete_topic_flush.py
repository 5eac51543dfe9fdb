"""Deleting a topic while the flush thread syncs its consume queues loses nothing and refuses nothing."""

from __future__ import annotations

from pathlib import Path

from _support import broker_and_client, create_topic, run, send_request

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode


def test_topics_created_written_and_deleted_in_a_loop_leave_the_broker_taking_messages(
    tmp_path: Path,
) -> None:
    # Each deletion wakes the flush thread for a checkpoint, which syncs every consume queue it lists;
    # the next topic's queue, created and deleted meanwhile, loses its directory under that sync.
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            for i in range(300):
                topic = f"Doomed{i % 4}"
                assert (await create_topic(client, addr, topic, 1)).code == ResponseCode.SUCCESS
                sent = await client.invoke(addr, send_request(topic, b"x"))
                assert sent.code == ResponseCode.SUCCESS, f"send {i}: {sent.code} {sent.remark}"
                delete = RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": topic})
                assert (await client.invoke(addr, delete)).code == ResponseCode.SUCCESS
            # A failed checkpoint refuses every later write: each send above came after the previous
            # deletions' checkpoints, this one after the last.
            assert broker.store.flush_failure is None
            await create_topic(client, addr, "Kept", 1)
            assert (await client.invoke(addr, send_request("Kept", b"kept"))).code == ResponseCode.SUCCESS

    run(scenario())
