"""Every request code a broker or a name server serves, sent with missing fields, fields of the wrong
type, numbers out of range, names no server could keep and bodies that are not what their Java class
declares: each is refused with a RocketMQ error code and a remark a person can read, nothing is
logged with a traceback, and the server keeps serving.

The codes come from the servers' dispatch tables: a handler added without a row here fails
``test_every_served_code_has_a_row``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _support import broker_and_client, create_topic, pull, run, send_request

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol import auth_headers as ah
from cometmq.protocol import broker_headers as bh
from cometmq.protocol import namesrv_headers as nh
from cometmq.protocol import pop as ph
from cometmq.protocol.headers import Header, wire_fields
from cometmq.remoting import RemotingClient, transport
from cometmq.remoting.transport import Dispatcher

LONE_SURROGATE = "\ud800"  # no name rule keeps it: refused by topic, group and text rules alike
# What a remark must never show: Python's own words for a failure.
PYTHON_WORDS = (
    "Error(",
    "Traceback",
    "invalid literal",
    "object has no attribute",
    "NoneType",
    "not subscriptable",
    "unhashable",
    "KeyError",
    "ValueError",
    "TypeError",
    "Exception",
    "internal error",
)


@dataclass(frozen=True, slots=True)
class Row:
    """How requests of one code take their input: a header declaration (*compact*: its one-letter
    names), and bodies that must be refused. A row with neither takes no input. The topic "Good"
    exists, with one queue."""

    header: type[Header] | None = None
    compact: bool = False
    # Header fields that decode but mean nothing here (a queue the topic lacks, a perm bit RocketMQ
    # does not have), each set on a header otherwise valid.
    bad_fields: tuple[dict[str, str], ...] = ()
    bad_bodies: tuple[bytes, ...] = ()
    good_body: bytes = b""


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _heartbeat(**changes: object) -> bytes:
    consumer = {"groupName": "G", "subscriptionDataSet": [{"topic": "Good", "subString": "*"}]}
    return _json({"clientID": "c1", "consumerDataSet": [consumer], "producerDataSet": [], **changes})


def _consumer(**changes: object) -> bytes:
    return _heartbeat(consumerDataSet=[{"groupName": "G", **changes}])


def _subscription(**changes: object) -> bytes:
    return _consumer(subscriptionDataSet=[{"topic": "Good", "subString": "*", **changes}])


def _lock(**changes: object) -> bytes:
    queue = {"topic": "Good", "brokerName": "broker-a", "queueId": 0}
    return _json({"consumerGroup": "G", "clientId": "c1", "mqSet": [queue], **changes})


def _queue(**changes: object) -> bytes:
    return _lock(mqSet=[{"topic": "Good", "brokerName": "broker-a", "queueId": 0, **changes}])


def _group(**changes: object) -> bytes:
    return _json({"groupName": "G", **changes})


def _topic_table(**changes: object) -> bytes:
    config = {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, **changes}
    wrapper = {"dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": {"T": config}}
    return _json({"topicConfigSerializeWrapper": wrapper, "filterServerList": []})


NOT_JSON = (b"{", b"\xff\xfe", b"[]", b"null", b"12")

_LOCK_BODIES = (
    *NOT_JSON,
    _json({"clientId": "c1", "mqSet": []}),
    _lock(consumerGroup=None),
    _lock(consumerGroup=LONE_SURROGATE),
    _lock(clientId={"a": 1}),
    _lock(mqSet="all"),
    _lock(mqSet=[1]),
    _lock(mqSet=[{"topic": "Good", "brokerName": "broker-a", "queueId": i} for i in range(8193)]),
    _queue(queueId="x"),
    _queue(queueId=-1),
    _queue(queueId=2**40),
    _queue(queueId=1.5),
    _queue(topic=None),
    _queue(topic="a b"),
)

_USER_BODIES = (
    *NOT_JSON,
    _json({"username": "Good", "password": "p", "userType": "Emperor"}),
    _json({"username": "Good", "password": 5}),
)


def _acl(entry: dict[str, object]) -> bytes:
    return _json({"subject": "User:Good", "policies": [{"policyType": "Custom", "entries": [entry]}]})


_ACL_BODIES = (
    *NOT_JSON,
    _acl({"resource": "Topic:a*b", "actions": ["Pub"]}),
    _acl({"resource": "Queue:a", "actions": ["Pub"]}),
    _acl({"resource": "Topic:a", "actions": ["Fly"]}),
    _acl({"resource": "Topic:a", "actions": []}),
    _acl({"resource": "Topic:a", "actions": ["Pub"], "decision": "Maybe"}),
)

BROKER_ROWS: dict[int, Row] = {
    # sysFlag 4 and 12: a prepared or rolled-back transaction message, which would never be delivered.
    RequestCode.SEND_MESSAGE: Row(
        bh.SendMessageRequestHeader, bad_fields=({"queueId": "1"}, {"sysFlag": "4"}, {"sysFlag": "12"})
    ),
    RequestCode.SEND_MESSAGE_V2: Row(
        bh.SendMessageRequestHeader, compact=True, bad_fields=({"e": "1"}, {"f": "4"}, {"f": "12"})
    ),
    RequestCode.SEND_BATCH_MESSAGE: Row(
        bh.SendMessageRequestHeader, compact=True, bad_fields=({"e": "1", "m": "true"}, {"m": "true"})
    ),
    RequestCode.PULL_MESSAGE: Row(bh.PullMessageRequestHeader, bad_fields=({"queueId": "1"},)),
    # Naming no half message, or with a commitOrRollback that is none of 0, 8 and 12.
    # POP consumption: the valid header's invisibleTime 0 is refused too, so nothing is held or popped.
    RequestCode.POP_MESSAGE: Row(
        ph.PopMessageRequestHeader,
        bad_fields=({"queueId": "1"}, {"maxMsgNums": "33"}, {"invisibleTime": "60000", "initMode": "2"}),
    ),
    RequestCode.ACK_MESSAGE: Row(ph.AckMessageRequestHeader, bad_fields=({"extraInfo": "0 0 0 0 0 b 0 0"},)),
    RequestCode.BATCH_ACK_MESSAGE: Row(
        bad_bodies=(
            b"{",
            b"[]",
            b'{"acks":[]}',
            _json({"acks": "x"}),
            _json({"acks": [{"c": "G"}]}),
            _json({"acks": [{"c": "G", "t": "Good", "so": 0, "q": 0, "pt": 0, "it": 0, "b": "!"}]}),
        )
    ),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: Row(
        ph.ChangeInvisibleTimeRequestHeader, bad_fields=({"invisibleTime": "-1"},)
    ),
    RequestCode.PEEK_MESSAGE: Row(ph.PeekMessageRequestHeader, bad_fields=({"queueId": "1"},)),
    RequestCode.NOTIFICATION: Row(ph.NotificationRequestHeader, bad_fields=({"queueId": "1"},)),
    RequestCode.POLLING_INFO: Row(ph.PollingInfoRequestHeader, bad_fields=({"queueId": "1"},)),
    RequestCode.END_TRANSACTION: Row(
        bh.EndTransactionRequestHeader,
        bad_fields=({"commitOrRollback": "8"}, {"commitOrRollback": "12"}, {"commitOrRollback": "5"}),
    ),
    RequestCode.CONSUMER_SEND_MSG_BACK: Row(
        bh.ConsumerSendMsgBackRequestHeader, bad_fields=({"offset": "-1"}, {"offset": str(2**62)})
    ),
    RequestCode.UNREGISTER_CLIENT: Row(bh.UnregisterClientRequestHeader),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: Row(bh.ConsumerGroupRequestHeader),
    RequestCode.QUERY_CONSUMER_OFFSET: Row(bh.QueryConsumerOffsetRequestHeader),
    RequestCode.UPDATE_CONSUMER_OFFSET: Row(
        bh.UpdateConsumerOffsetRequestHeader,
        bad_fields=({"queueId": "1"}, {"topic": "Missing"}, {"commitOffset": str(10**30)}),
    ),
    RequestCode.UPDATE_AND_CREATE_TOPIC: Row(
        bh.CreateTopicRequestHeader,
        bad_fields=({"topic": "Other", "perm": "8"}, {"topic": "Other", "perm": str(2**63)}),
    ),
    RequestCode.DELETE_TOPIC_IN_BROKER: Row(bh.TopicRequestHeader),
    RequestCode.GET_TOPIC_STATS_INFO: Row(bh.TopicRequestHeader),
    RequestCode.GET_TOPIC_CONFIG: Row(bh.GetTopicConfigRequestHeader),
    RequestCode.GET_MAX_OFFSET: Row(bh.QueueRequestHeader),
    RequestCode.GET_MIN_OFFSET: Row(bh.QueueRequestHeader),
    RequestCode.GET_EARLIEST_MSG_STORETIME: Row(bh.QueueRequestHeader),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: Row(bh.SearchOffsetRequestHeader),
    RequestCode.VIEW_MESSAGE_BY_ID: Row(
        bh.ViewMessageRequestHeader, bad_fields=({"offset": "-1"}, {"offset": str(2**62)})
    ),
    RequestCode.QUERY_MESSAGE: Row(bh.QueryMessageRequestHeader),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: Row(bh.DeleteSubscriptionGroupRequestHeader),
    RequestCode.GET_CONSUME_STATS: Row(bh.GetConsumeStatsRequestHeader),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: Row(bh.ConsumerGroupRequestHeader),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: Row(
        bh.ResetOffsetRequestHeader, bad_fields=({"queueId": "1"}, {"queueId": "0", "offset": "5"})
    ),
    RequestCode.HEART_BEAT: Row(
        bad_bodies=(
            *NOT_JSON,
            b"",
            _json({}),
            _heartbeat(clientID=None),
            _heartbeat(clientID=LONE_SURROGATE),
            _heartbeat(clientID=["c1"]),
            _heartbeat(consumerDataSet="G"),
            _heartbeat(consumerDataSet=[1]),
            _heartbeat(consumerDataSet=[{"groupName": f"G{i}"} for i in range(1025)]),
            _heartbeat(producerDataSet=[{"groupName": f"P{i}"} for i in range(1025)]),
            _heartbeat(producerDataSet=[{"groupName": None}]),
            _heartbeat(producerDataSet=[{}]),
            _heartbeat(producerDataSet=["P"]),
            _consumer(groupName=None),
            _consumer(groupName="a b"),
            _consumer(groupName={"name": "G"}),
            _consumer(subscriptionDataSet=[{"topic": f"T{i}"} for i in range(1025)]),
            _consumer(subscriptionDataSet={"topic": "Good"}),
            _subscription(topic=None),
            _subscription(topic=["Good"]),
            _subscription(subVersion="abc"),
            _subscription(subVersion=2**64),
            _subscription(subString={"tag": "a"}),
            _subscription(expressionType="SQL92", subString="a >"),
        ),
        good_body=_heartbeat(),
    ),
    RequestCode.LOCK_BATCH_MQ: Row(bad_bodies=_LOCK_BODIES, good_body=_lock()),
    RequestCode.UNLOCK_BATCH_MQ: Row(bad_bodies=_LOCK_BODIES, good_body=_lock()),
    RequestCode.CHECK_CLIENT_CONFIG: Row(
        bad_bodies=(
            *NOT_JSON,
            _json({"group": "G", "subscriptionData": "x"}),
            _json({"group": "G", "subscriptionData": {"subString": {"a": 1}, "expressionType": "SQL92"}}),
            _json({"group": "G", "subscriptionData": {"subString": "a >", "expressionType": "SQL92"}}),
        ),
    ),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Row(
        bad_bodies=(
            *NOT_JSON,
            b"",
            _json({}),
            _group(groupName=None),
            _group(groupName="a b"),
            _group(groupName=LONE_SURROGATE),
            _group(retryQueueNums=1_000_000),
            _group(retryQueueNums=-1),
            _group(retryQueueNums="many"),
            _group(retryQueueNums=2**31),
            _group(retryMaxTimes=-2),
            _group(retryMaxTimes=1.5),
            _group(brokerId=-1),
            _group(brokerId=2**63),
            _group(whichBrokerWhenConsumeSlowly="x"),
            _group(consumeEnable="maybe"),
            _group(consumeEnable=[True]),
        ),
        good_body=_group(),
    ),
    RequestCode.GET_ALL_TOPIC_CONFIG: Row(),
    RequestCode.GET_ALL_CONSUMER_OFFSET: Row(),
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: Row(),
    RequestCode.GET_ALL_DELAY_OFFSET: Row(),
    RequestCode.GET_BROKER_RUNTIME_INFO: Row(),
    RequestCode.GET_BROKER_HA_STATUS: Row(),
    RequestCode.GET_BROKER_CONFIG: Row(),
    RequestCode.UPDATE_BROKER_CONFIG: Row(
        bad_bodies=(b"\xff", b"{", b"storePathRootDir=/tmp", b"listenPort=1", b"brokerPermission=x")
    ),
    RequestCode.VIEW_BROKER_STATS_DATA: Row(bh.ViewBrokerStatsDataRequestHeader),
    RequestCode.GET_PRODUCER_CONNECTION_LIST: Row(bh.ProducerGroupRequestHeader),
    RequestCode.CLONE_GROUP_OFFSET: Row(bh.CloneGroupOffsetRequestHeader),
    RequestCode.GET_BROKER_CONSUME_STATS: Row(bh.GetConsumeStatsInBrokerHeader),
    # The broker under test has brokerId 0: a valid request (naming another master) is refused too.
    RequestCode.NOTIFY_BROKER_ROLE_CHANGED: Row(bh.NotifyBrokerRoleChangedRequestHeader),
    # Users and ACLs (served with access control on or off; a name server serves them too).
    RequestCode.AUTH_CREATE_USER: Row(ah.UserRequestHeader, bad_bodies=_USER_BODIES),
    RequestCode.AUTH_UPDATE_USER: Row(ah.UserRequestHeader, bad_bodies=_USER_BODIES),
    RequestCode.AUTH_DELETE_USER: Row(ah.UserRequestHeader),
    RequestCode.AUTH_GET_USER: Row(ah.UserRequestHeader),
    RequestCode.AUTH_LIST_USER: Row(ah.ListUsersRequestHeader),
    RequestCode.AUTH_CREATE_ACL: Row(ah.AclRequestHeader, bad_bodies=_ACL_BODIES),
    RequestCode.AUTH_UPDATE_ACL: Row(ah.AclRequestHeader, bad_bodies=_ACL_BODIES),
    RequestCode.AUTH_DELETE_ACL: Row(ah.DeleteAclRequestHeader),
    RequestCode.AUTH_GET_ACL: Row(ah.AclRequestHeader),
    RequestCode.AUTH_LIST_ACL: Row(ah.ListAclsRequestHeader),
}

_REGISTER_BODIES = (
    b"{",
    b"\xff",
    b"[]",
    _json({"topicConfigSerializeWrapper": []}),
    _topic_table(perm=99),
    _topic_table(perm=-1),
    _topic_table(perm=2**63),
    _topic_table(readQueueNums="x"),
    _topic_table(readQueueNums=2**31),
    _topic_table(writeQueueNums=-4),
    _topic_table(topicName=None, order="maybe"),
    _topic_table(topicSysFlag=2**40),
    _json({"topicConfigSerializeWrapper": {"dataVersion": {"counter": "x"}}}),
    _json({"topicConfigSerializeWrapper": {"dataVersion": {"timestamp": 2**70}}}),
)

NAMESRV_ROWS: dict[int, Row] = {
    RequestCode.REGISTER_BROKER: Row(nh.RegisterBrokerRequestHeader, bad_bodies=_REGISTER_BODIES),
    RequestCode.UNREGISTER_BROKER: Row(nh.BrokerRequestHeader),
    RequestCode.QUERY_DATA_VERSION: Row(
        nh.BrokerRequestHeader,
        bad_bodies=(
            b"{",
            b"[]",
            _json({"counter": "x"}),
            _json({"counter": -1}),
            _json({"timestamp": 2**64}),
            _json({"counter": {"value": "x"}}),
        ),
    ),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: Row(nh.GetRouteInfoRequestHeader),
    RequestCode.GET_TOPICS_BY_CLUSTER: Row(nh.GetTopicsByClusterRequestHeader),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: Row(nh.DeleteTopicFromNamesrvRequestHeader),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: Row(nh.BrokerNameRequestHeader),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: Row(nh.BrokerNameRequestHeader),
    RequestCode.PUT_KV_CONFIG: Row(nh.PutKVConfigRequestHeader),
    RequestCode.GET_KV_CONFIG: Row(nh.KVConfigKeyRequestHeader),
    RequestCode.DELETE_KV_CONFIG: Row(nh.KVConfigKeyRequestHeader),
    RequestCode.GET_KVLIST_BY_NAMESPACE: Row(nh.GetKVListByNamespaceRequestHeader),
    RequestCode.GET_BROKER_CLUSTER_INFO: Row(),
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Row(),
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: Row(),
}


def _valid_fields(row: Row) -> dict[str, str]:
    """A header every field of which decodes: names that every rule keeps, numbers in range."""
    assert row.header is not None
    fields = {}
    for field in wire_fields(row.header):
        key = field.compact if row.compact else field.name
        if field.java == "String":
            fields[key] = "Good"
        elif field.java == "boolean":
            fields[key] = "false"
        else:
            fields[key] = str(max(0, field.minimum or 0))
    return fields


def bad_requests(code: int, row: Row) -> Iterator[tuple[str, RemotingCommand]]:
    """Each malformed request of *code*, with what is wrong with it."""
    if row.header is not None:
        valid = _valid_fields(row)
        body = row.good_body
        for field in wire_fields(row.header):
            key = field.compact if row.compact else field.name
            if field.required:
                missing = {k: v for k, v in valid.items() if k != key}
                yield f"{field.name} missing", RemotingCommand(code=code, ext_fields=missing, body=body)
            wrong: list[str] = []
            if field.java in ("int", "long"):
                wrong = ["x", "1.5", "", str(2**70), str(-(2**70))]
                if field.minimum is not None and field.minimum > -(2**31):
                    wrong.append(str(field.minimum - 1))
                if field.maximum is not None and field.maximum < 2**31 - 1:
                    wrong.append(str(field.maximum + 1))
            elif field.named:
                wrong = [LONE_SURROGATE]
            for text in wrong:
                fields = {**valid, key: text}
                yield f"{field.name}={text!r}", RemotingCommand(code=code, ext_fields=fields, body=body)
        for changes in row.bad_fields:
            yield f"fields {changes}", RemotingCommand(code=code, ext_fields={**valid, **changes}, body=body)
    fields = _valid_fields(row) if row.header is not None else {}
    for body in row.bad_bodies:
        yield f"body {body[:80]!r}", RemotingCommand(code=code, ext_fields=fields, body=body)


# Numbers that decode but may mean nothing to a handler: each is accepted or refused readably.
EDGE_NUMBERS = ("-1", "-5", str(2**31 - 1), str(-(2**31)))
EDGE_LONGS = (*EDGE_NUMBERS, str(2**63 - 1), str(-(2**63)))


def edge_requests(code: int, row: Row) -> Iterator[tuple[str, RemotingCommand]]:
    """Requests of *code* whose header is valid but for one number at an edge of its Java range."""
    if row.header is None:
        return
    valid = _valid_fields(row)
    for field in wire_fields(row.header):
        key = field.compact if row.compact else field.name
        for text in {"int": EDGE_NUMBERS, "long": EDGE_LONGS}.get(field.java, ()):
            number = int(text)
            if (field.minimum is None or number >= field.minimum) and (
                field.maximum is None or number <= field.maximum
            ):
                fields = {**valid, key: text}
                yield (
                    f"{field.name}={text}",
                    RemotingCommand(code=code, ext_fields=fields, body=row.good_body),
                )


async def _check_every_row(
    client: RemotingClient, addr: str, rows: dict[int, Row], *, compressed: frozenset[int] = frozenset()
) -> list[str]:
    """Send every bad request of every row; what went wrong, one line each."""
    problems = []
    for code, row in rows.items():
        if row.header is None and not row.bad_bodies:
            # Takes no input: whatever fields or body come along are ignored.
            junk = RemotingCommand(code=code, ext_fields={"x": "y"}, body=b"{")
            response = await client.invoke(addr, junk, timeout=10)
            if response.code != ResponseCode.SUCCESS:
                problems.append(f"{code} with ignored input: {response.code} {response.remark!r}")
            continue
        for what, request in bad_requests(code, row):
            if code in compressed and what.startswith("body"):
                request.ext_fields["compressed"] = "true"  # none of the bad bodies is zlib data
            response = await client.invoke(addr, request, timeout=10)
            remark = response.remark or ""
            if response.code == ResponseCode.SUCCESS:
                problems.append(f"{code} {what}: accepted")
            elif not remark.strip() or any(word in remark for word in PYTHON_WORDS):
                problems.append(f"{code} {what}: remark {remark!r}")
    return problems


def _assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    tracebacks = [record.getMessage() for record in caplog.records if record.exc_info]
    assert not tracebacks, f"a client's mistake logged a traceback: {tracebacks}"


def _dispatch_codes(dispatcher: object) -> set[int]:
    assert isinstance(dispatcher, Dispatcher)
    return set(dispatcher._table)


def test_every_served_code_has_a_row(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, _, _):
            assert _dispatch_codes(broker._dispatcher()) == set(BROKER_ROWS)
        namesrv = NameServer("127.0.0.1", 0)
        assert _dispatch_codes(namesrv._server._handler) == set(NAMESRV_ROWS)

    run(scenario())


async def _header_refusals(client: RemotingClient, addr: str, rows: dict[int, Row]) -> list[str]:
    problems = []
    for code, row in rows.items():
        if row.header is not None:
            base = RemotingCommand(code=code, ext_fields=_valid_fields(row), body=row.good_body)
            remark = (await client.invoke(addr, base, timeout=10)).remark or ""
            if "request header field" in remark:
                problems.append(f"{code}: {remark!r}")
    return problems


def test_the_header_each_bad_request_changes_one_field_of_decodes(tmp_path: Path) -> None:
    """So that what a bad request gets refused for is the one field it changes."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert not await _header_refusals(client, addr, BROKER_ROWS)
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        client = RemotingClient()
        try:
            assert not await _header_refusals(client, f"127.0.0.1:{namesrv.port}", NAMESRV_ROWS)
        finally:
            await client.close()
            await namesrv.stop()

    run(scenario())


async def _unreadable_answers(client: RemotingClient, addr: str, rows: dict[int, Row]) -> list[str]:
    problems = []
    for code, row in rows.items():
        for what, request in edge_requests(code, row):
            response = await client.invoke(addr, request, timeout=10)
            remark = response.remark or ""
            if response.code != ResponseCode.SUCCESS and any(word in remark for word in PYTHON_WORDS):
                problems.append(f"{code} {what}: remark {remark!r}")
    return problems


def test_numbers_at_the_edges_of_their_java_range_never_fail_a_handler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Good", 1)
            # Something to pop: a NOTIFICATION at the edge of its pollTime is answered at once.
            assert (await client.invoke(addr, send_request("Good", b"m"))).code == ResponseCode.SUCCESS
            problems = await _unreadable_answers(client, addr, BROKER_ROWS)
            info = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
            assert info.code == ResponseCode.SUCCESS
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        client = RemotingClient()
        try:
            problems += await _unreadable_answers(client, f"127.0.0.1:{namesrv.port}", NAMESRV_ROWS)
            info = await client.invoke(
                f"127.0.0.1:{namesrv.port}", RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
            )
            assert info.code == ResponseCode.SUCCESS
        finally:
            await client.close()
            await namesrv.stop()
        assert not problems, "\n".join(problems)

    with caplog.at_level(logging.INFO):
        run(scenario())
    _assert_no_traceback(caplog)


def test_every_malformed_broker_request_is_refused_readably_and_the_broker_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Good", 1)).code == ResponseCode.SUCCESS
            assert (await client.invoke(addr, send_request("Good", b"before"))).code == ResponseCode.SUCCESS
            problems = await _check_every_row(client, addr, BROKER_ROWS)
            assert not problems, "\n".join(problems)
            assert broker.groups.get("None") is None
            assert (await client.invoke(addr, send_request("Good", b"after"))).code == ResponseCode.SUCCESS
            _, records = await pull(client, addr, "Good", 0, 0)
            assert [record.body for record in records] == [b"before", b"after"]

    with caplog.at_level(logging.INFO):
        run(scenario())
    _assert_no_traceback(caplog)


def test_every_malformed_name_server_request_is_refused_readably_and_it_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        client = RemotingClient()
        addr = f"127.0.0.1:{namesrv.port}"
        try:
            problems = await _check_every_row(client, addr, NAMESRV_ROWS)
            # The same bodies again, declared compressed.
            register = {RequestCode.REGISTER_BROKER: NAMESRV_ROWS[RequestCode.REGISTER_BROKER]}
            problems += await _check_every_row(
                client, addr, register, compressed=frozenset({RequestCode.REGISTER_BROKER})
            )
            assert not problems, "\n".join(problems)
            info = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))
            assert info.code == ResponseCode.SUCCESS
            assert json.loads(info.body)["brokerAddrTable"] == {}  # nothing half-registered
        finally:
            await client.close()
            await namesrv.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    _assert_no_traceback(caplog)


def test_a_peer_sending_bad_requests_gets_one_warning_line_per_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    monkeypatch.setattr(transport, "_refusals", transport._RefusalLog(60.0, clock=lambda: now[0]))
    bad = RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "Good", "queueId": "x"})

    def refusal_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused request")]

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            for _ in range(20):
                assert (await client.invoke(addr, bad)).code == ResponseCode.SYSTEM_ERROR
            assert len(refusal_lines()) == 1
            now[0] = 61.0
            assert (await client.invoke(addr, bad)).code == ResponseCode.SYSTEM_ERROR

    with caplog.at_level(logging.WARNING, logger="cometmq.remoting"):
        run(scenario())
    first, second = refusal_lines()
    assert "refused request code 30 from 127.0.0.1:" in first
    assert "queueId='x' is not a Java int" in first
    assert "(19 more refused from 127.0.0.1 not logged)" in second
