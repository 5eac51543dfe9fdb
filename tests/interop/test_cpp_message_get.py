"""``cometmq message get`` with the message ids the C++ client prints, against a real `cometmq standalone`."""

from __future__ import annotations

import base64
import json

import pytest
from test_cpp_client import cpp

from cometmq.client.admin import offset_msg_id_address
from processes import StandaloneServer, broker_address, cometmq

pytestmark = pytest.mark.interop


def test_get_finds_the_message_by_the_id_the_cpp_producer_printed(standalone: StandaloneServer) -> None:
    sent = cpp(standalone, "produce", "CppIds", "--count", "2", "--mode", "sync")["sent"]
    assert standalone.process is not None
    broker = broker_address(standalone.process)
    for index, entry in enumerate(sent):
        msg_id = entry["msg_id"]
        # The C++ client's unique key decodes as an offset message id of some address, not the broker's.
        named = offset_msg_id_address(msg_id)
        assert named != broker
        result = cometmq("message", "get", msg_id, "--json", "-n", standalone.namesrv)
        assert result.returncode == 0, result.stderr
        [message] = json.loads(result.stdout)
        assert message["msgId"] == msg_id and message["topic"] == "CppIds"
        assert base64.b64decode(message["body"]) == f"msg-{index}".encode()
        if named is not None:
            assert f"({named} is none of its brokers): looking it up as a unique key" in result.stderr
