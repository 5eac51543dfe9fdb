"""4.x and 5.x clients on one topic: the C++ 4.x client (rocketmq==0.4.4, over remoting to the broker) and the
official 5.x Python client (over gRPC to the proxy) each receive what the other sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from client5 import Scenarios
from proxied import ProxiedStandalone, admin

from processes import read_cpp_result

pytestmark = pytest.mark.interop

CPP_SCENARIOS = Path(__file__).parents[1] / "interop" / "_cpp_scenarios.py"


def cpp(server: ProxiedStandalone, scenario: str, topic: str, *args: str) -> dict[str, Any]:
    command = [
        sys.executable,
        str(CPP_SCENARIOS),
        scenario,
        "--namesrv",
        server.namesrv,
        "--topic",
        topic,
        *args,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    assert result["ok"], f"{scenario} failed: {result['errors']}\nstderr:\n{proc.stderr[-3000:]}"
    return result


def test_what_the_cpp_client_sends_a_5x_simple_consumer_receives(
    standalone5: ProxiedStandalone, tmp_path: Path
) -> None:
    topic = "FromCpp5"
    admin(standalone5.namesrv, "topic", "create", topic, "-a", "+message.type=NORMAL")
    admin(standalone5.namesrv, "group", "create", "GID_from_cpp5")
    produced = cpp(
        standalone5, "produce", topic, "--count", "5", "--tags", "FromCpp", "--keys-prefix", "key-"
    )
    sent = produced["sent"]
    consumer = Scenarios(standalone5.endpoints, tmp_path).simple_consume(
        topic, "GID_from_cpp5", "--until-acked", "5"
    )
    received = {e["message_id"]: e for e in consumer.named("received")}
    assert sorted(received) == sorted(s["msg_id"] for s in sent)
    for s in sent:
        event = received[s["msg_id"]]
        index = s["index"]
        assert (event["body"], event["tag"], event["keys"]) == (f"msg-{index}", "FromCpp", [f"key-{index}"])


def test_what_a_5x_producer_sends_the_cpp_client_receives(
    standalone5: ProxiedStandalone, tmp_path: Path
) -> None:
    topic = "From5x"
    admin(standalone5.namesrv, "topic", "create", topic, "-a", "+message.type=NORMAL")
    producer = Scenarios(standalone5.endpoints, tmp_path).produce(
        topic, "--count", "5", "--tag", "From5x", "--keys-prefix", "key-"
    )
    got = cpp(standalone5, "push-consume", topic, "--group", "GID_from_5x", "--expect", "5")["messages"]
    sent = {e["message_id"]: e["index"] for e in producer.named("sent")}
    assert sorted(m["id"] for m in got) == sorted(sent)
    for m in got:
        index = sent[m["id"]]
        assert (bytes.fromhex(m["body_hex"]), m["tags"], m["keys"]) == (
            f"msg-{index}".encode(),
            "From5x",
            f"key-{index}",
        )
