"""``cometmq dlq list|resend`` against a real ``cometmq standalone`` process."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id
from cometmq.remoting import RemotingClient
from processes import ServerProcess, broker_address, cometmq
from waiting import wait_until_blocking

from .cli_support import error_line, invoke, send

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import pull

GROUP = "GID_dlq_cli"


def send_back_to_dlq(addr: str, offset_msg_id: str) -> None:
    """What a consumer sends for a message it gives up on (delay level -1: straight to the DLQ)."""

    fields = {"offset": str(decode_offset_msg_id(offset_msg_id)[2]), "group": GROUP, "delayLevel": "-1"}
    response = invoke(addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=fields))
    assert response.code == 0, response.remark


def pull_all(addr: str, topic: str) -> list[DecodedRecord]:
    async def go() -> list[DecodedRecord]:
        client = RemotingClient()
        try:
            _, records = await pull(client, addr, topic, 0, 0, group="GID_dlq_reader")
            return records
        finally:
            await client.close()

    return asyncio.run(go())


def dlq(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cometmq("dlq", *args, "-n", namesrv)


@pytest.fixture(scope="module")
def dead(standalone: tuple[ServerProcess, str]) -> dict[str, str]:
    """Topic Pay with two messages, both dead letters of GROUP."""
    server, namesrv = standalone
    created = cometmq("topic", "create", "Pay", "--queues", "1", "-n", namesrv)
    assert created.returncode == 0, created.stderr
    addr = broker_address(server)
    send_back_to_dlq(addr, send(addr, "Pay", b"charge 10 EUR", KEYS="inv-1", TAGS="card", UNIQ_KEY="UNIQ_A"))
    send_back_to_dlq(addr, send(addr, "Pay", b"\x00\x01binary", KEYS="inv-2", UNIQ_KEY="UNIQ_B", note="x"))
    # The broker registers the new %DLQ% topic with the NameServer just after creating it.
    wait_until_blocking(
        lambda: not dlq(namesrv, "list", GROUP).stdout.startswith("group "), message="the %DLQ% topic routed"
    )
    return {"namesrv": namesrv, "addr": addr}


def test_list_shows_the_dead_letters(dead: dict[str, str]) -> None:
    result = dlq(dead["namesrv"], "list", GROUP)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["MSG_ID", "ORIGINAL_TOPIC", "FAILURES", "STORE_TIME", "BODY"]
    assert len(rows) == 2
    first, second = (row.split() for row in rows)
    assert first[:3] == ["UNIQ_A", "Pay", "1"] and " ".join(first[5:]) == "charge 10 EUR"
    assert second[:3] == ["UNIQ_B", "Pay", "1"] and second[5] == "..binary"

    limited = dlq(dead["namesrv"], "list", GROUP, "--max", "1")
    assert limited.stdout.strip().splitlines()[1].startswith("UNIQ_A")
    assert "more than 1 dead letters" in limited.stdout

    as_json = json.loads(dlq(dead["namesrv"], "list", GROUP, "--json").stdout)
    assert [m["msgId"] for m in as_json] == ["UNIQ_A", "UNIQ_B"]
    assert as_json[0]["originalTopic"] == "Pay" and as_json[0]["failures"] == 1
    assert as_json[0]["topic"] == f"%DLQ%{GROUP}"
    assert base64.b64decode(as_json[1]["body"]) == b"\x00\x01binary"
    assert as_json[1]["properties"]["note"] == "x"

    nobody = dlq(dead["namesrv"], "list", "GID_nobody")
    assert (nobody.returncode, nobody.stdout.strip()) == (0, "group GID_nobody has no dead letters")


def test_resend_puts_the_message_back_once_unless_forced(dead: dict[str, str]) -> None:
    namesrv = dead["namesrv"]
    result = dlq(namesrv, "resend", GROUP, "--msg-id", "UNIQ_A")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("resent UNIQ_A to Pay (new offset msg id ")
    assert lines[-1] == f"resent 1 of 1 dead letter of group {GROUP}"

    # Consumable from the original topic: a fresh message, the same content, no retry bookkeeping.
    copies = [r for r in pull_all(dead["addr"], "Pay") if "RESENT_FROM_DLQ" in r.properties]
    [copy] = copies
    props = decode_properties(copy.properties)
    assert copy.body == b"charge 10 EUR" and copy.reconsume_times == 0
    assert (props["UNIQ_KEY"], props["KEYS"], props["TAGS"]) == ("UNIQ_A", "inv-1", "card")
    assert "RETRY_TOPIC" not in props and "ORIGIN_MESSAGE_ID" not in props

    again = dlq(namesrv, "resend", GROUP, "--msg-id", "UNIQ_A")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("skipped UNIQ_A: already resent to Pay at ")
    assert "(--force resends it again)" in again.stdout

    everything = dlq(namesrv, "resend", GROUP, "--all", "--json")
    assert everything.returncode == 0, everything.stderr
    assert [(o["msgId"], o["status"]) for o in json.loads(everything.stdout)] == [
        ("UNIQ_A", "skipped"),
        ("UNIQ_B", "resent"),
    ]
    forced = dlq(namesrv, "resend", GROUP, "--all", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.strip().splitlines()[-1] == f"resent 2 of 2 dead letters of group {GROUP}"
    resent = [r for r in pull_all(dead["addr"], "Pay") if "RESENT_FROM_DLQ" in r.properties]
    assert sorted(r.body for r in resent) == [b"\x00\x01binary"] * 2 + [b"charge 10 EUR"] * 2


def test_resend_errors_are_one_line(dead: dict[str, str]) -> None:
    missing = dlq(dead["namesrv"], "resend", GROUP, "--msg-id", "NOPE")
    assert error_line(missing) == f"group {GROUP} has no dead letter with the id NOPE"
    both = dlq(dead["namesrv"], "resend", GROUP, "--msg-id", "UNIQ_A", "--all")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    neither = dlq(dead["namesrv"], "resend", GROUP)
    assert neither.returncode == 2
