"""The access-control table covers every request code a broker (in either role) or a name server
serves: a code it did not cover would be served to anyone once aclEnable is on."""

from __future__ import annotations

from pathlib import Path

import pytest
from acl_support import served_codes

from cometmq.auth import needs_of
from cometmq.errors import RequestRefused
from cometmq.protocol import RemotingCommand, RequestCode


def _has_entry(code: int, cluster: str | None) -> bool:
    try:
        return needs_of(RemotingCommand(code), cluster) is not None
    except RequestRefused:  # its entry reads the body, and an empty one is refused: it has one
        return True


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SLAVE"])
def test_every_code_a_broker_serves_has_an_entry(tmp_path: Path, role: str) -> None:
    broker_codes, _ = served_codes(tmp_path, role)
    assert [RequestCode(code).name for code in sorted(broker_codes) if not _has_entry(code, "c")] == []


def test_every_code_a_name_server_serves_has_an_entry(tmp_path: Path) -> None:
    _, namesrv_codes = served_codes(tmp_path)
    assert [RequestCode(code).name for code in sorted(namesrv_codes) if not _has_entry(code, None)] == []
