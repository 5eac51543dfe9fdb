"""The one table of needs: each request, built with its real typed header (or body), needs what
RocketMQ 5 authorizes it by."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from cometmq.auth import Action, AuthError, Need, Resource, ResourceType, needs_of
from cometmq.auth._needs import TABLE
from cometmq.errors import RequestRefused
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.auth_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from cometmq.protocol.broker_headers import (
    CloneGroupOffsetRequestHeader,
    ConsumerGroupRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    EndTransactionRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetTopicConfigRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    ProducerGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueueRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
)
from cometmq.protocol.codec import decode_frame
from cometmq.protocol.headers import Header
from cometmq.protocol.jsonbody import MAX_HEARTBEAT_GROUPS, MAX_HEARTBEAT_SUBSCRIPTIONS, MAX_LOCK_BATCH
from cometmq.protocol.namesrv_headers import (
    BrokerNameRequestHeader,
    BrokerRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVConfigKeyRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
)
from cometmq.protocol.pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
)
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from header_requests import command, create_topic_header, pull_header, send_header

CLUSTER = "DefaultCluster"
C = RequestCode
PUB, SUB, GET, LIST = Action.PUB, Action.SUB, Action.GET, Action.LIST
CREATE, UPDATE, DELETE = Action.CREATE, Action.UPDATE, Action.DELETE


def topic(name: str | None, *actions: Action) -> Need:
    return Need.of(Resource.of(ResourceType.TOPIC, name), actions)


def group(name: str | None, *actions: Action) -> Need:
    return Need.of(Resource.of(ResourceType.GROUP, name), actions)


def cluster(*actions: Action) -> Need:
    return Need.of(Resource.of(ResourceType.CLUSTER, CLUSTER), actions)


HEARTBEAT = {
    "clientID": "c1",
    "producerDataSet": [{"groupName": "pg"}],
    "consumerDataSet": [
        {
            "groupName": "cg",
            "subscriptionDataSet": [{"topic": "t1"}, {"topic": "%RETRY%cg"}],
        },
        {"groupName": "cg2", "subscriptionDataSet": [{"topic": "t2"}]},
    ],
}
LOCK_BODY = {
    "consumerGroup": "cg",
    "clientId": "c1",
    "mqSet": [
        {"topic": "t1", "brokerName": "b", "queueId": 0},
        {"topic": "t1", "brokerName": "b", "queueId": 1},
        {"topic": "%RETRY%cg", "brokerName": "b", "queueId": 0},
    ],
}
REGISTER = RegisterBrokerRequestHeader(
    broker_name="b",
    broker_addr="127.0.0.1:10911",
    cluster_name=CLUSTER,
    ha_server_addr="127.0.0.1:10912",
    broker_id=0,
)
BROKER = BrokerRequestHeader(
    broker_name="b", broker_addr="127.0.0.1:10911", cluster_name=CLUSTER, broker_id=0
)
QUEUE = QueueRequestHeader(topic="t", queue_id=0)
END = EndTransactionRequestHeader(
    producer_group="pg",
    tran_state_table_offset=0,
    commit_log_offset=0,
    commit_or_rollback=8,
    msg_id="K",
)

# (code, header, compact, body, needs)
_HANDLE = "0 1700000000000 30000 0 0 broker-a 0 0"
POP = PopMessageRequestHeader(
    consumer_group="cg",
    topic="t",
    queue_id=-1,
    max_msg_nums=32,
    invisible_time=30_000,
    poll_time=0,
    born_time=0,
    init_mode=0,
)
ACK = AckMessageRequestHeader(consumer_group="cg", topic="t", queue_id=0, extra_info=_HANDLE, offset=0)
RETRY_ACK = dataclasses.replace(ACK, topic="%RETRY%cg_t")
CHANGE = ChangeInvisibleTimeRequestHeader(
    consumer_group="cg", topic="t", queue_id=0, extra_info=_HANDLE, offset=0, invisible_time=1000
)
PEEK = PeekMessageRequestHeader(topic="t", queue_id=0, max_msg_nums=1, consumer_group="cg")
NOTIFY = NotificationRequestHeader(consumer_group="cg", topic="t", queue_id=-1, poll_time=0, born_time=0)
POLLING = PollingInfoRequestHeader(consumer_group="cg", topic="t", queue_id=0)

CASES: list[tuple[int, Header | None, bool, Any, list[Need]]] = [
    (C.SEND_MESSAGE, send_header("t"), False, None, [topic("t", PUB)]),
    # To a retry topic: Sub on its group, and on the producer group named (RocketMQ's need).
    (C.SEND_MESSAGE, send_header("%RETRY%cg"), False, None, [group("cg", SUB), group("pg", SUB)]),
    (C.SEND_MESSAGE_V2, send_header("t"), True, None, [topic("t", PUB)]),
    (C.SEND_MESSAGE_V2, send_header("%RETRY%cg", ""), True, None, [group("cg", SUB)]),
    (C.SEND_BATCH_MESSAGE, send_header("t"), True, None, [topic("t", PUB)]),
    (
        C.CONSUMER_SEND_MSG_BACK,
        ConsumerSendMsgBackRequestHeader(offset=0, group="cg", delay_level=0),
        False,
        None,
        [group("cg", SUB)],
    ),
    (C.PULL_MESSAGE, pull_header("t"), False, None, [topic("t", SUB), group("cg", SUB)]),
    # POP consumption: a redelivered message's POP retry topic stands for its topic.
    (C.POP_MESSAGE, POP, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.ACK_MESSAGE, ACK, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.ACK_MESSAGE, RETRY_ACK, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.CHANGE_MESSAGE_INVISIBLETIME, CHANGE, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.PEEK_MESSAGE, PEEK, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.NOTIFICATION, NOTIFY, False, None, [topic("t", SUB), group("cg", SUB)]),
    (C.POLLING_INFO, POLLING, False, None, [topic("t", GET), group("cg", GET)]),
    (
        C.BATCH_ACK_MESSAGE,
        None,
        False,
        {"acks": [{"c": "cg", "t": "t", "r": "1", "so": 0, "q": 0, "pt": 1, "it": 1, "b": "AQ=="}]},
        [topic("t", SUB), group("cg", SUB)],
    ),
    (C.PULL_MESSAGE, pull_header("%RETRY%cg"), False, None, [group("cg", SUB)]),
    # Another group's retry topic is that group's, whatever group the header names.
    (C.PULL_MESSAGE, pull_header("%RETRY%other"), False, None, [group("other", SUB), group("cg", SUB)]),
    # A dead-letter topic holds its group's messages.
    (
        C.PULL_MESSAGE,
        pull_header("%DLQ%other"),
        False,
        None,
        [topic("%DLQ%other", SUB), group("other", SUB), group("cg", SUB)],
    ),
    (C.SEND_MESSAGE, send_header("%RETRY%other", "cg"), False, None, [group("other", SUB), group("cg", SUB)]),
    (
        C.CONSUMER_SEND_MSG_BACK,
        ConsumerSendMsgBackRequestHeader(offset=0, group="cg", delay_level=0, origin_topic="t"),
        False,
        None,
        [group("cg", SUB), topic("t", SUB)],
    ),
    (
        C.CONSUMER_SEND_MSG_BACK,
        ConsumerSendMsgBackRequestHeader(offset=0, group="cg", delay_level=0, origin_topic="%RETRY%other"),
        False,
        None,
        [group("cg", SUB), group("other", SUB)],
    ),
    (
        C.QUERY_CONSUMER_OFFSET,
        QueryConsumerOffsetRequestHeader(consumer_group="cg", topic="%RETRY%other", queue_id=0),
        False,
        None,
        [group("other", SUB, GET), group("cg", SUB, GET)],
    ),
    (
        C.UPDATE_CONSUMER_OFFSET,
        UpdateConsumerOffsetRequestHeader(
            consumer_group="cg", topic="%RETRY%other", queue_id=0, commit_offset=1
        ),
        False,
        None,
        [group("other", SUB, UPDATE), group("cg", SUB, UPDATE)],
    ),
    (
        C.QUERY_MESSAGE,
        QueryMessageRequestHeader(topic="%RETRY%cg", key="k", max_num=1, begin_timestamp=0, end_timestamp=1),
        False,
        None,
        [group("cg", SUB, GET)],
    ),
    (
        C.HEART_BEAT,
        None,
        False,
        {
            "consumerDataSet": [
                {
                    "groupName": "cg",
                    "subscriptionDataSet": [{"topic": "%RETRY%other"}, {"topic": "%RETRY%cg"}],
                },
                {"groupName": "cg", "subscriptionDataSet": [{"topic": "t1"}]},
            ]
        },
        [group("cg", SUB), group("other", SUB), topic("t1", SUB)],
    ),
    (
        C.LOCK_BATCH_MQ,
        None,
        False,
        {"consumerGroup": "cg", "mqSet": [{"topic": "%RETRY%other", "brokerName": "b", "queueId": 0}]},
        [group("cg", SUB), group("other", SUB)],
    ),
    (
        C.QUERY_MESSAGE,
        QueryMessageRequestHeader(topic="t", key="k", max_num=1, begin_timestamp=0, end_timestamp=1),
        False,
        None,
        [topic("t", SUB, GET)],
    ),
    (C.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=0), False, None, [cluster(GET)]),
    (
        C.HEART_BEAT,
        None,
        False,
        HEARTBEAT,
        [group("cg", SUB), topic("t1", SUB), group("cg2", SUB), topic("t2", SUB)],
    ),
    (
        C.UNREGISTER_CLIENT,
        UnregisterClientRequestHeader(client_id="c", consumer_group="cg"),
        False,
        None,
        [group("cg", SUB)],
    ),
    (
        C.UNREGISTER_CLIENT,
        UnregisterClientRequestHeader(client_id="c", producer_group="pg"),
        False,
        None,
        [group("pg", PUB)],
    ),
    (
        C.UNREGISTER_CLIENT,
        UnregisterClientRequestHeader(client_id="c", producer_group="pg", consumer_group="cg"),
        False,
        None,
        [group("pg", PUB), group("cg", SUB)],
    ),
    (C.UNREGISTER_CLIENT, UnregisterClientRequestHeader(client_id="c"), False, None, [cluster(UPDATE)]),
    (
        C.GET_CONSUMER_LIST_BY_GROUP,
        ConsumerGroupRequestHeader(consumer_group="cg"),
        False,
        None,
        [group("cg", SUB, GET)],
    ),
    (
        C.QUERY_CONSUMER_OFFSET,
        QueryConsumerOffsetRequestHeader(consumer_group="cg", topic="t", queue_id=0),
        False,
        None,
        [topic("t", SUB, GET), group("cg", SUB, GET)],
    ),
    (
        C.QUERY_CONSUMER_OFFSET,
        QueryConsumerOffsetRequestHeader(consumer_group="cg", topic="%RETRY%cg", queue_id=0),
        False,
        None,
        [group("cg", SUB, GET)],
    ),
    (
        C.UPDATE_CONSUMER_OFFSET,
        UpdateConsumerOffsetRequestHeader(consumer_group="cg", topic="t", queue_id=0, commit_offset=1),
        False,
        None,
        [topic("t", SUB, UPDATE), group("cg", SUB, UPDATE)],
    ),
    (C.LOCK_BATCH_MQ, None, False, LOCK_BODY, [group("cg", SUB), topic("t1", SUB)]),
    (C.UNLOCK_BATCH_MQ, None, False, LOCK_BODY, [group("cg", SUB), topic("t1", SUB)]),
    (C.CHECK_CLIENT_CONFIG, None, False, {"clientId": "c", "group": "cg"}, [group("cg", SUB)]),
    (
        C.GET_ROUTEINFO_BY_TOPIC,
        GetRouteInfoRequestHeader(topic="t"),
        False,
        None,
        [topic("t", PUB, SUB, GET)],
    ),
    (
        C.GET_ROUTEINFO_BY_TOPIC,
        GetRouteInfoRequestHeader(topic="%RETRY%cg"),
        False,
        None,
        [group("cg", SUB, GET)],
    ),
    (
        C.UPDATE_AND_CREATE_TOPIC,
        create_topic_header("t", 4),
        False,
        None,
        [topic("t", CREATE)],
    ),
    (C.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(topic="t"), False, None, [topic("t", DELETE)]),
    (
        C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        None,
        False,
        SubscriptionGroupConfig(group_name="cg").to_json(),
        [group("cg", CREATE)],
    ),
    (
        C.DELETE_SUBSCRIPTIONGROUP,
        DeleteSubscriptionGroupRequestHeader(group_name="cg"),
        False,
        None,
        [group("cg", DELETE)],
    ),
    (C.GET_MAX_OFFSET, QUEUE, False, None, [topic("t", GET)]),
    (C.GET_MIN_OFFSET, QUEUE, False, None, [topic("t", GET)]),
    (C.GET_EARLIEST_MSG_STORETIME, QUEUE, False, None, [topic("t", GET)]),
    (
        C.SEARCH_OFFSET_BY_TIMESTAMP,
        SearchOffsetRequestHeader(topic="t", queue_id=0, timestamp=0),
        False,
        None,
        [topic("t", GET)],
    ),
    (C.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic="t"), False, None, [topic("t", GET)]),
    (C.GET_TOPIC_CONFIG, GetTopicConfigRequestHeader(topic="t"), False, None, [topic("t", GET)]),
    (C.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(consumer_group="cg"), False, None, [group("cg", GET)]),
    (
        C.GET_CONSUME_STATS,
        GetConsumeStatsRequestHeader(consumer_group="cg", topic="t"),
        False,
        None,
        [group("cg", GET), topic("t", GET)],
    ),
    (
        C.GET_CONSUMER_CONNECTION_LIST,
        ConsumerGroupRequestHeader(consumer_group="cg"),
        False,
        None,
        [group("cg", GET)],
    ),
    (
        C.INVOKE_BROKER_TO_RESET_OFFSET,
        ResetOffsetRequestHeader(topic="t", group="cg", timestamp=0, is_force=True),
        False,
        None,
        [group("cg", UPDATE), topic("t", UPDATE)],
    ),
    (C.END_TRANSACTION, END, False, None, []),  # a 4.x client's: only signed
    (C.END_TRANSACTION, dataclasses.replace(END, topic="t"), False, None, [topic("t", PUB)]),
    (C.GET_ALL_TOPIC_CONFIG, None, False, None, [topic(None, LIST)]),
    (
        C.GET_TOPICS_BY_CLUSTER,
        GetTopicsByClusterRequestHeader(cluster=CLUSTER),
        False,
        None,
        [topic(None, LIST)],
    ),
    (C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, False, None, [topic(None, LIST)]),
    (C.GET_SYSTEM_TOPIC_LIST_FROM_NS, None, False, None, [topic(None, LIST)]),
    (C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None, False, None, [group(None, LIST)]),
    (C.GET_ALL_CONSUMER_OFFSET, None, False, None, [cluster(GET)]),
    (C.GET_ALL_DELAY_OFFSET, None, False, None, [cluster(GET)]),
    (C.GET_BROKER_RUNTIME_INFO, None, False, None, [cluster(GET)]),
    (C.GET_BROKER_CONFIG, None, False, None, [cluster(GET)]),
    (
        C.GET_PRODUCER_CONNECTION_LIST,
        ProducerGroupRequestHeader(producer_group="pg"),
        False,
        None,
        [cluster(GET)],
    ),
    (C.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(is_order=False), False, None, [cluster(GET)]),
    (
        C.VIEW_BROKER_STATS_DATA,
        ViewBrokerStatsDataRequestHeader(stats_name="TOPIC_PUT_NUMS", stats_key="t"),
        False,
        None,
        [cluster(GET)],
    ),
    (
        C.CLONE_GROUP_OFFSET,
        CloneGroupOffsetRequestHeader(src_group="a", dest_group="b"),
        False,
        None,
        [group("b", UPDATE)],
    ),
    (
        C.CLONE_GROUP_OFFSET,
        CloneGroupOffsetRequestHeader(src_group="a", dest_group="b", topic="t"),
        False,
        None,
        [group("b", UPDATE), topic("t", UPDATE)],
    ),
    (C.GET_BROKER_HA_STATUS, None, False, None, [cluster(GET)]),
    (C.GET_BROKER_CLUSTER_INFO, None, False, None, [cluster(GET)]),
    (C.QUERY_DATA_VERSION, BROKER, False, None, [cluster(GET)]),
    (C.GET_KV_CONFIG, KVConfigKeyRequestHeader(namespace="n", key="k"), False, None, [cluster(GET)]),
    (
        C.GET_KVLIST_BY_NAMESPACE,
        GetKVListByNamespaceRequestHeader(namespace="n"),
        False,
        None,
        [cluster(GET)],
    ),
    (C.UPDATE_BROKER_CONFIG, None, False, None, [cluster(UPDATE)]),
    (C.REGISTER_BROKER, REGISTER, False, None, [cluster(UPDATE)]),
    (C.UNREGISTER_BROKER, BROKER, False, None, [cluster(UPDATE)]),
    (
        C.PUT_KV_CONFIG,
        PutKVConfigRequestHeader(namespace="n", key="k", value="v"),
        False,
        None,
        [cluster(UPDATE)],
    ),
    (C.DELETE_KV_CONFIG, KVConfigKeyRequestHeader(namespace="n", key="k"), False, None, [cluster(UPDATE)]),
    (C.WIPE_WRITE_PERM_OF_BROKER, BrokerNameRequestHeader(broker_name="b"), False, None, [cluster(UPDATE)]),
    (C.ADD_WRITE_PERM_OF_BROKER, BrokerNameRequestHeader(broker_name="b"), False, None, [cluster(UPDATE)]),
    (
        C.DELETE_TOPIC_IN_NAMESRV,
        DeleteTopicFromNamesrvRequestHeader(topic="t"),
        False,
        None,
        [cluster(UPDATE)],
    ),
    (C.NOTIFY_BROKER_ROLE_CHANGED, NotifyBrokerRoleChangedRequestHeader(), False, None, [cluster(UPDATE)]),
    (C.AUTH_CREATE_USER, UserRequestHeader(username="u"), False, {"password": "p"}, [cluster(UPDATE)]),
    (C.AUTH_UPDATE_USER, UserRequestHeader(username="u"), False, {"password": "p"}, [cluster(UPDATE)]),
    (C.AUTH_DELETE_USER, UserRequestHeader(username="u"), False, None, [cluster(UPDATE)]),
    (C.AUTH_GET_USER, UserRequestHeader(username="u"), False, None, [cluster(GET)]),
    (C.AUTH_LIST_USER, ListUsersRequestHeader(), False, None, [cluster(GET)]),
    (C.AUTH_CREATE_ACL, AclRequestHeader(subject="User:u"), False, None, [cluster(UPDATE)]),
    (C.AUTH_UPDATE_ACL, AclRequestHeader(subject="User:u"), False, None, [cluster(UPDATE)]),
    (C.AUTH_DELETE_ACL, DeleteAclRequestHeader(subject="User:u"), False, None, [cluster(UPDATE)]),
    (C.AUTH_GET_ACL, AclRequestHeader(subject="User:u"), False, None, [cluster(GET)]),
    (C.AUTH_LIST_ACL, ListAclsRequestHeader(), False, None, [cluster(GET)]),
]


@pytest.mark.parametrize(
    ("code", "header", "compact", "body", "expected"),
    CASES,
    ids=[f"{RequestCode(case[0]).name}-{i}" for i, case in enumerate(CASES)],
)
def test_what_a_request_needs(
    code: int, header: Header | None, compact: bool, body: Any, expected: list[Need]
) -> None:
    assert needs_of(command(code, header, body, compact=compact), CLUSTER) == expected


def test_every_table_entry_has_a_case() -> None:
    assert {case[0] for case in CASES} == set(TABLE)


def test_a_name_server_needs_a_cluster_with_no_name() -> None:
    needs = needs_of(command(C.REGISTER_BROKER, REGISTER), None)

    assert needs == [Need.of(Resource.of(ResourceType.CLUSTER, None), [UPDATE])]
    assert Resource.parse("Cluster:*").matches(needs[0].resource)
    assert not Resource.parse(f"Cluster:{CLUSTER}").matches(needs[0].resource)


def test_a_missing_field_needs_the_type_with_no_name() -> None:
    assert needs_of(RemotingCommand(C.GET_MAX_OFFSET), CLUSTER) == [topic(None, GET)]


def test_codes_not_in_the_table_have_no_needs() -> None:
    assert needs_of(RemotingCommand(C.NOTIFY_CONSUMER_IDS_CHANGED), CLUSTER) is None
    assert needs_of(RemotingCommand(99999), CLUSTER) is None


@pytest.mark.parametrize(
    "body", [b"not json", b"[]", b'{"consumerDataSet": {}}', b'{"consumerDataSet": [1]}']
)
def test_a_heartbeat_body_that_is_not_heartbeat_data_is_refused(body: bytes) -> None:
    with pytest.raises(RequestRefused):
        needs_of(RemotingCommand(C.HEART_BEAT, body=body), CLUSTER)


@pytest.mark.parametrize(
    ("code", "body"),
    [
        (
            C.HEART_BEAT,
            {"consumerDataSet": [{"groupName": f"g{i}"} for i in range(MAX_HEARTBEAT_GROUPS + 1)]},
        ),
        (
            C.HEART_BEAT,
            {
                "consumerDataSet": [
                    {
                        "groupName": "g",
                        "subscriptionDataSet": [
                            {"topic": f"t{i}"} for i in range(MAX_HEARTBEAT_SUBSCRIPTIONS + 1)
                        ],
                    }
                ]
            },
        ),
        (C.LOCK_BATCH_MQ, {"consumerGroup": "g", "mqSet": [{"topic": "t"}] * (MAX_LOCK_BATCH + 1)}),
    ],
    ids=["groups", "subscriptions", "queues"],
)
def test_a_body_listing_more_than_the_broker_takes_is_refused(code: int, body: Any) -> None:
    # The broker's handlers read the same bounds: the check costs no more than serving would.
    with pytest.raises(RequestRefused, match="above"):
        needs_of(RemotingCommand(code, body=json.dumps(body).encode()), CLUSTER)


def test_table_refusals_are_not_auth_errors() -> None:
    # A malformed body is the request's fault as the server would find it: not an access refusal.
    with pytest.raises(RequestRefused) as caught:
        needs_of(RemotingCommand(C.LOCK_BATCH_MQ, body=b"{"), CLUSTER)

    assert not isinstance(caught.value, AuthError)


GOLDEN = Path(__file__).parent.parent / "golden" / "frames"
GOLDEN_GROUP = "GID_cpp_golden"
# What each request the C++ client sent needs (its consumers' offsets and pulls of the retry topic
# need the group only).
GOLDEN_NEEDS = {
    "cpp_consumer_send_msg_back": [group(f"{GOLDEN_GROUP}_retry", SUB)],
    "cpp_get_consumer_list": [group(GOLDEN_GROUP, SUB, GET)],
    "cpp_get_max_offset": [topic("TopicTest", GET)],
    "cpp_get_route": [topic("TopicTest", PUB, SUB, GET)],
    "cpp_get_route_retry": [group(GOLDEN_GROUP, SUB, GET)],
    "cpp_heartbeat_consumer": [group(GOLDEN_GROUP, SUB), topic("TopicTest", SUB)],
    "cpp_heartbeat_producer": [],
    "cpp_heartbeat_pullconsumer": [group(f"{GOLDEN_GROUP}_pull", SUB)],
    "cpp_lock_batch_mq": [group(f"{GOLDEN_GROUP}_orderly", SUB)],
    "cpp_pull_message": [topic("TopicTest", SUB), group(GOLDEN_GROUP, SUB)],
    "cpp_pull_message_pullconsumer": [topic("TopicTest", SUB), group(f"{GOLDEN_GROUP}_pull", SUB)],
    "cpp_query_consumer_offset": [group(GOLDEN_GROUP, SUB, GET)],
    "cpp_send_batch": [topic("TopicTest", PUB)],
    "cpp_send_compressed": [topic("TopicTest", PUB)],
    "cpp_send_message": [topic("TopicTest", PUB)],
    "cpp_send_oneway": [topic("TopicTest", PUB)],
    "cpp_unlock_batch_mq": [group(f"{GOLDEN_GROUP}_orderly", SUB), topic("TopicTest", SUB)],
    "cpp_unregister_client": [group("PID_cpp_golden", PUB)],
    "cpp_unregister_client_consumer": [group(GOLDEN_GROUP, SUB)],
    "cpp_update_consumer_offset": [group(GOLDEN_GROUP, SUB, UPDATE)],
}


def test_every_golden_frame_has_expected_needs() -> None:
    assert {path.stem for path in GOLDEN.glob("*.bin")} == set(GOLDEN_NEEDS)


@pytest.mark.parametrize(("name", "expected"), GOLDEN_NEEDS.items(), ids=list(GOLDEN_NEEDS))
def test_what_the_cpp_clients_requests_need(name: str, expected: list[Need]) -> None:
    request = decode_frame((GOLDEN / f"{name}.bin").read_bytes()[4:])

    assert needs_of(request, CLUSTER) == expected
