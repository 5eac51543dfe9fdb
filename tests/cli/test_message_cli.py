"""``cometmq message query|get`` against a real ``cometmq standalone`` process."""

from __future__ import annotations

import base64
import datetime
import json
import re
import socket
import time

import pytest

from cometmq.client import blocking
from cometmq.client.message import Message
from cometmq.protocol.record import decode_offset_msg_id
from processes import ServerProcess, broker_address, cometmq

from .cli_support import assert_one_line_error, send


@pytest.fixture(scope="module")
def shop(standalone: tuple[ServerProcess, str]) -> dict[str, str]:
    """Topic Shop with three messages: their offset message ids by name, plus the addresses."""
    server, namesrv = standalone
    created = cometmq("topic", "create", "Shop", "--queues", "2", "-n", namesrv)
    assert created.returncode == 0, created.stderr
    addr = broker_address(server)
    ids = {
        "first": send(
            addr, "Shop", b'{"order": 1}', 0, KEYS="order-1 alice", UNIQ_KEY="UNIQ0001", TAGS="new"
        ),
        "other": send(addr, "Shop", b"other", 1, KEYS="order-2 bob", UNIQ_KEY="UNIQ0002", TAGS="new"),
        "second": send(
            addr, "Shop", b"paid!", 1, KEYS="order-1", UNIQ_KEY="UNIQ0003", TAGS="paid", color="red"
        ),
    }
    return {**ids, "namesrv": namesrv, "addr": addr}


def test_query_prints_a_table_newest_first(shop: dict[str, str]) -> None:
    result = cometmq("message", "query", "--topic", "Shop", "--key", "order-1", "-n", shop["namesrv"])
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["MSG_ID", "QUEUE", "QUEUE_OFFSET", "STORE_TIME", "KEYS", "TAGS", "BODY_SIZE"]
    assert len(rows) == 2
    second, first = (row.split() for row in rows)
    # MSG_ID QUEUE QUEUE_OFFSET DATE TIME KEYS... TAGS BODY_SIZE
    assert second[:3] == ["UNIQ0003", "1", "1"] and second[-3:] == ["order-1", "paid", "5"]
    assert first[:3] == ["UNIQ0001", "0", "0"] and first[-4:] == ["order-1", "alice", "new", "12"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", " ".join(first[3:5]))

    only_newest = cometmq(
        "message", "query", "-t", "Shop", "-k", "order-1", "--max", "1", "-n", shop["namesrv"]
    )
    assert [row.split()[0] for row in only_newest.stdout.strip().splitlines()[1:]] == ["UNIQ0003"]


def test_query_json_and_unique_key(shop: dict[str, str]) -> None:
    result = cometmq("message", "query", "-t", "Shop", "-k", "alice", "--json", "-n", shop["namesrv"])
    assert result.returncode == 0, result.stderr
    [message] = json.loads(result.stdout)
    assert message["msgId"] == "UNIQ0001"
    assert message["offsetMsgId"] == shop["first"]
    assert message["keys"] == "order-1 alice" and message["tags"] == "new"
    assert base64.b64decode(message["body"]) == b'{"order": 1}'
    assert (message["queueId"], message["queueOffset"]) == (0, 0)
    assert message["commitLogOffset"] == decode_offset_msg_id(shop["first"])[2]

    by_uniq = cometmq("message", "query", "-t", "Shop", "-k", "UNIQ0002", "--unique", "-n", shop["namesrv"])
    assert by_uniq.returncode == 0, by_uniq.stderr
    assert [row.split()[0] for row in by_uniq.stdout.strip().splitlines()[1:]] == ["UNIQ0002"]
    # A unique key is no key.
    assert_one_line_error(
        cometmq("message", "query", "-t", "Shop", "-k", "UNIQ0002", "-n", shop["namesrv"]),
        "no message of topic Shop has the key 'UNIQ0002'",
    )


def test_query_time_range(shop: dict[str, str]) -> None:
    namesrv = shop["namesrv"]
    tomorrow = (datetime.datetime.now() + datetime.timedelta(days=1)).isoformat(timespec="seconds")
    assert_one_line_error(
        cometmq("message", "query", "-t", "Shop", "-k", "order-1", "--begin", tomorrow, "-n", namesrv)
    )
    assert_one_line_error(
        cometmq("message", "query", "-t", "Shop", "-k", "order-1", "--end", "1000", "-n", namesrv)
    )
    hour_ago = str(int(time.time() * 1000) - 3_600_000)
    found = cometmq(
        "message", "query", "-t", "Shop", "-k", "bob", "--begin", hour_ago, "--end", tomorrow, "-n", namesrv
    )
    assert found.returncode == 0, found.stderr
    assert len(found.stdout.strip().splitlines()) == 2
    bad = cometmq("message", "query", "-t", "Shop", "-k", "bob", "--begin", "last tuesday", "-n", namesrv)
    assert bad.returncode == 2 and "neither epoch milliseconds nor an ISO-8601 time" in bad.stderr


def test_get_by_offset_id(shop: dict[str, str]) -> None:
    result = cometmq("message", "get", shop["second"], "-n", shop["namesrv"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    fields = dict(
        (name.strip(), value.strip())
        for name, _, value in (line.partition(":") for line in out.splitlines()[:14])
    )
    assert fields["Topic"] == "Shop"
    assert fields["Msg ID"] == "UNIQ0003"
    assert fields["Offset Msg ID"] == shop["second"]
    assert fields["Queue ID"] == "1" and fields["Queue Offset"] == "1"
    assert fields["Commit-log Offset"] == str(decode_offset_msg_id(shop["second"])[2])
    assert fields["Tags"] == "paid" and fields["Keys"] == "order-1"
    assert fields["Store Host"] == shop["addr"]
    assert fields["Born Host"].startswith("127.0.0.1:")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", out.split("Store Time:")[1].splitlines()[0].strip()
    )
    assert fields["Reconsume Times"] == "0"
    assert "\n  color=red\n" in out and "\n  CLUSTER=DefaultCluster\n" in out
    assert out.endswith("Body (5 bytes, text):\npaid!\n")


def test_get_by_unique_key_with_and_without_topic(shop: dict[str, str]) -> None:
    with_topic = cometmq("message", "get", "UNIQ0001", "--topic", "Shop", "--json", "-n", shop["namesrv"])
    assert with_topic.returncode == 0, with_topic.stderr
    [message] = json.loads(with_topic.stdout)
    assert message["offsetMsgId"] == shop["first"] and message["properties"]["KEYS"] == "order-1 alice"

    anywhere = cometmq("message", "get", "UNIQ0001", "-n", shop["namesrv"])
    assert anywhere.returncode == 0, anywhere.stderr
    assert "Offset Msg ID:" in anywhere.stdout and shop["first"] in anywhere.stdout
    assert anywhere.stdout.endswith('Body (12 bytes, text):\n{"order": 1}\n')

    assert_one_line_error(
        cometmq("message", "get", "UNIQ0001", "--topic", "TBW102", "-n", shop["namesrv"]),
        "no message with the id UNIQ0001 in topic TBW102",
    )


def test_an_id_that_looks_like_an_offset_id_falls_back_to_the_unique_key(shop: dict[str, str]) -> None:
    host, port = shop["addr"].split(":")
    # The broker's own address and port, but an offset where no record starts.
    lookalike = (
        "".join(f"{int(part):02X}" for part in host.split(".")) + f"{int(port):08X}" + "00000000000FFFFF"
    )
    assert decode_offset_msg_id(lookalike)[2] == 0xFFFFF
    send(shop["addr"], "Shop", b"lookalike", 0, UNIQ_KEY=lookalike)
    result = cometmq("message", "get", lookalike, "-n", shop["namesrv"], "--json")
    assert result.returncode == 0, result.stderr
    [message] = json.loads(result.stdout)
    assert message["msgId"] == lookalike and base64.b64decode(message["body"]) == b"lookalike"


def test_get_by_the_id_the_python_producer_printed(shop: dict[str, str]) -> None:
    with blocking.Producer("PID_msg_get", shop["namesrv"]) as producer:
        sent = producer.send(Message("Shop", b"from python", keys="python"))
    result = cometmq("message", "get", sent.msg_id, "-n", shop["namesrv"], "--json")
    assert result.returncode == 0, result.stderr
    [message] = json.loads(result.stdout)
    assert (message["msgId"], message["offsetMsgId"]) == (sent.msg_id, sent.offset_msg_id)
    assert base64.b64decode(message["body"]) == b"from python"


def test_a_unique_key_that_decodes_to_an_address_of_no_broker_is_never_connected_to(
    shop: dict[str, str],
) -> None:
    with socket.socket() as listener:  # an address a unique key could name, but no broker's
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        key = f"7F000001{port:08X}0000000000000000"  # 127.0.0.1:port, commit-log offset 0
        send(shop["addr"], "Shop", b"keyed like an offset id", 0, UNIQ_KEY=key)
        result = cometmq("message", "get", key, "-n", shop["namesrv"], "--json")
        assert result.returncode == 0, result.stderr
        [message] = json.loads(result.stdout)
        assert message["msgId"] == key and base64.b64decode(message["body"]) == b"keyed like an offset id"
        assert result.stderr == (
            f"{key} is not an offset message id of this cluster (127.0.0.1:{port} is none of its"
            " brokers): looking it up as a unique key\n"
        )
        with pytest.raises(BlockingIOError):  # nobody knocked
            listener.accept()


def test_body_preview_of_long_and_binary_bodies(shop: dict[str, str]) -> None:
    addr, namesrv = shop["addr"], shop["namesrv"]
    binary_id = send(addr, "Shop", bytes(range(256)) * 2, 0, KEYS="binary")
    text_id = send(addr, "Shop", "é".encode() * 200, 0, KEYS="long text")

    binary = cometmq("message", "get", binary_id, "-n", namesrv)
    assert binary.returncode == 0, binary.stderr
    title, preview = binary.stdout.splitlines()[-2:]
    assert title == "Body (first 256 of 512 bytes, binary, as hex escapes):"
    assert preview.startswith("\\x00\\x01\\x02") and "!\"#$%&'()*+,-./0123" in preview
    assert "\\x5c" in preview and preview.endswith("\\xfe\\xff")

    text = cometmq("message", "get", text_id, "-n", namesrv)
    title, preview = text.stdout.splitlines()[-2:]
    assert title == "Body (first 256 of 400 bytes, text):"
    assert preview == "é" * 128


def test_not_found_is_one_line_and_status_1(shop: dict[str, str]) -> None:
    namesrv = shop["namesrv"]
    assert_one_line_error(
        cometmq("message", "get", "NO-SUCH-ID", "-n", namesrv),
        "no message with the id NO-SUCH-ID in any topic",
    )
    assert_one_line_error(
        cometmq("message", "query", "-t", "Shop", "-k", "nobody", "-n", namesrv),
        "no message of topic Shop has the key 'nobody'",
    )
    missing_topic = cometmq("message", "query", "-t", "NoSuchTopic", "-k", "x", "-n", namesrv)
    assert_one_line_error(missing_topic, "No topic route info in name server for the topic: NoSuchTopic")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["message"], "query"),
        (["message", "query"], "--unique"),
        (["message", "get"], "every topic of the cluster"),
    ],
)
def test_help(args: list[str], words: str) -> None:
    result = cometmq(*args, "--help")
    assert result.returncode == 0
    assert words in " ".join(result.stdout.split())
