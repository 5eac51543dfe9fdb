"""The GET_BROKER_HA_STATUS body: round trips, RocketMQ's own JSON, and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.protocol.ha_status import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo

longs = st.integers(min_value=0, max_value=2**63 - 1)
connections = st.builds(
    HAConnectionRuntimeInfo,
    addr=st.text(max_size=30),
    slave_ack_offset=longs,
    diff=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    in_sync=st.booleans(),
    transferred_byte_in_second=longs,
    transfer_from_where=longs,
)
clients = st.builds(
    HAClientRuntimeInfo,
    master_addr=st.text(max_size=30),
    transferred_byte_in_second=longs,
    max_offset=longs,
    last_read_timestamp=longs,
    last_write_timestamp=longs,
    master_flush_offset=longs,
    is_activated=st.booleans(),
)


@given(
    st.builds(
        HARuntimeInfo,
        master=st.booleans(),
        master_commit_log_max_offset=longs,
        in_sync_slave_nums=st.integers(min_value=0, max_value=2**31 - 1),
        ha_connection_info=st.lists(connections, max_size=4),
        ha_client_runtime_info=clients,
        epoch=longs,
        in_sync_replicas=st.lists(longs, max_size=5),
        failover=st.booleans(),
    )
)
def test_ha_runtime_info_round_trips(info: HARuntimeInfo) -> None:
    assert HARuntimeInfo.decode(info.encode()) == info


def test_ha_runtime_info_reads_rocketmq_json() -> None:
    body = (
        b'{"haClientRuntimeInfo":{"activated":true,"lastReadTimestamp":1700000000000,'
        b'"lastWriteTimestamp":1700000000001,"masterAddr":"10.0.0.1:10912","masterFlushOffset":0,'
        b'"maxOffset":4096,"transferredByteInSecond":0},"haConnectionInfo":[],"inSyncSlaveNums":0,'
        b'"master":false,"masterCommitLogMaxOffset":8192}'
    )
    info = HARuntimeInfo.decode(body)
    assert not info.master
    assert info.master_commit_log_max_offset == 8192
    assert info.ha_client_runtime_info.is_activated
    assert info.ha_client_runtime_info.master_addr == "10.0.0.1:10912"
    assert info.ha_client_runtime_info.max_offset == 4096
    # CometMQ's own fields, absent from a Java broker's answer.
    assert (info.epoch, info.in_sync_replicas, info.failover) == (0, [], False)


def test_ha_runtime_info_carries_cometmq_failover_fields() -> None:
    body = b'{"master":true,"epoch":4,"inSyncReplicas":[1,3],"failover":true}'
    info = HARuntimeInfo.decode(body)
    assert (info.epoch, info.in_sync_replicas, info.failover) == (4, [1, 3], True)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"master":"maybe"}',
        b'{"haConnectionInfo":{}}',
        b'{"masterCommitLogMaxOffset":1.5}',
        b'{"inSyncReplicas":[-1]}',
        b'{"inSyncReplicas":["a"]}',
    ],
)
def test_malformed_ha_runtime_info_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="HARuntimeInfo"):
        HARuntimeInfo.decode(body)
