"""The C++ push consumer's RECONSUME_LATER against a real `cometmq standalone`: retries, DLQ, resend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cpp_client import cpp

from processes import StandaloneServer, cometmq

pytestmark = pytest.mark.interop

GROUP = "GID_cpp_retry"


@pytest.fixture
def quick_retries(tmp_path: Path) -> Iterator[StandaloneServer]:
    """A standalone server whose delay levels are all 1 s and whose GROUP gives up after 2 retries.

    The group's retryMaxTimes is set in subscriptionGroup.json before the start (the broker has no
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP yet)."""
    data_dir = tmp_path / "data"
    (data_dir / "config").mkdir(parents=True)
    table = {GROUP: {"groupName": GROUP, "retryMaxTimes": 2, "retryQueueNums": 1}}
    (data_dir / "config" / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": table}))
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s\n")
    server = StandaloneServer(data_dir, "-c", str(conf))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_message_that_always_fails_is_retried_then_dead_and_can_be_resent(
    quick_retries: StandaloneServer,
) -> None:
    sent = cpp(quick_retries, "produce", "RetryTopic", "--count", "1", "--tags", "T", "--keys-prefix", "k-")[
        "sent"
    ]
    [msg_id] = [s["msg_id"] for s in sent]
    # Fails every delivery: the first and two retries, then the broker makes it a dead letter.
    run = cpp(quick_retries, "push-consume", "RetryTopic", "--group", GROUP, "--fail-times", "99",
              "--timeout", "15", "--allow-fewer", "--prop-names", "RETRY_TOPIC")  # fmt: skip
    failed = run["failed_deliveries"]
    assert [f["reconsume_times"] for f in failed] == [0, 1, 2]
    assert {f["id"] for f in failed} == {msg_id}
    assert {f["topic"] for f in failed} == {"RetryTopic"}  # the client restores it from RETRY_TOPIC
    assert all(f["tags"] == "T" and f["keys"] == "k-0" for f in failed)

    listed = cometmq("dlq", "list", GROUP, "--json", "-n", quick_retries.namesrv)
    assert listed.returncode == 0, listed.stderr
    [dead] = json.loads(listed.stdout)
    assert (dead["msgId"], dead["originalTopic"], dead["failures"]) == (msg_id, "RetryTopic", 3)

    resent = cometmq("dlq", "resend", GROUP, "--all", "-n", quick_retries.namesrv)
    assert resent.returncode == 0, resent.stderr
    # The group gets it once more, as a fresh message.
    again = cpp(
        quick_retries, "push-consume", "RetryTopic", "--group", GROUP, "--expect", "1", "--timeout", "20"
    )
    [message] = again["messages"]
    assert (message["id"], message["reconsume_times"], bytes.fromhex(message["body_hex"])) == (
        msg_id,
        0,
        b"msg-0",
    )
