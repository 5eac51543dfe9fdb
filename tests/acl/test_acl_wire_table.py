"""Every entry of the access-control table, over the wire: for each request code a broker or a name
server serves, a request built with its typed header is let through for a user granted exactly what
the table says it needs, and refused NO_PERMISSION for a user granted every other action on the same
resources.

The servers are real processes (``cometmq namesrv -c`` and ``cometmq broker -c``, aclEnable on), the
broker registering with the name server under its innerClientAuthenticationCredentials.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from acl_support import GRANTABLE, create_user, entry, grant, invoke_as, served_codes

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
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
from cometmq.protocol.headers import Header
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
from cometmq.remoting import RemotingClient
from header_requests import command, create_topic_request, pull_request, send_request
from secured_servers import ROOT, separate_secured_servers

CLUSTER = "DefaultCluster"
ALLOWED_SECRET = "allowed-secret"


@dataclass(frozen=True)
class Names:
    """Names of one case's own: nothing one case creates or grants touches another's."""

    topic: str
    group: str
    retry: str  # the group's retry topic
    user: str  # the user granted what the case needs


@dataclass(frozen=True)
class Case:
    code: RequestCode
    server: str  # "broker" or "namesrv"
    build: Callable[[Names], RemotingCommand]
    # What the request needs: (resource key, actions of which any one will do) per resource.
    needs: Callable[[Names], list[tuple[str, tuple[str, ...]]]]
    variant: str = ""

    @property
    def id(self) -> str:
        return f"{self.server}-{self.code.name}{'-' + self.variant if self.variant else ''}"


def needs(*items: tuple[str, str]) -> Callable[[Names], list[tuple[str, tuple[str, ...]]]]:
    """Needs given as ("Topic", "Sub|Get"), ("Group", "Sub"), ("Cluster", "Get") (the broker's
    cluster), ("AnyCluster", "Update") (a name server's: only Cluster:* names it), ("Topic:*", "List"),
    with each case's names filled in."""

    def of(names: Names) -> list[tuple[str, tuple[str, ...]]]:
        keys = {
            "Topic": f"Topic:{names.topic}",
            "Group": f"Group:{names.group}",
            "Cluster": f"Cluster:{CLUSTER}",
            "AnyCluster": "Cluster:*",
            "Topic:*": "Topic:*",
            "Group:*": "Group:*",
        }
        return [(keys[kind], tuple(actions.split("|"))) for kind, actions in items]

    return of


def _heartbeat(n: Names) -> RemotingCommand:
    body = {
        "clientID": "acl-test@1",
        "producerDataSet": [{"groupName": "some-producer-group"}],
        "consumerDataSet": [
            {
                "groupName": n.group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": n.topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1},
                    {"topic": n.retry, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1},
                ],
                "unitMode": False,
            }
        ],
    }
    return command(RequestCode.HEART_BEAT, {}, body)


def _pop(code: RequestCode, n: Names) -> RemotingCommand:
    """A POP request of *code* for the case's topic and group, built with its typed header."""
    handle = "0 1700000000000 30000 0 0 broker-a 0 0"
    headers: dict[int, Header] = {
        R.POP_MESSAGE: PopMessageRequestHeader(
            consumer_group=n.group,
            topic=n.topic,
            queue_id=-1,
            max_msg_nums=1,
            invisible_time=30_000,
            poll_time=0,
            born_time=0,
            init_mode=0,
        ),
        R.ACK_MESSAGE: AckMessageRequestHeader(
            consumer_group=n.group, topic=n.topic, queue_id=0, extra_info=handle, offset=0
        ),
        R.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeRequestHeader(
            consumer_group=n.group, topic=n.topic, queue_id=0, extra_info=handle, offset=0, invisible_time=1
        ),
        R.PEEK_MESSAGE: PeekMessageRequestHeader(
            topic=n.topic, queue_id=0, max_msg_nums=1, consumer_group=n.group
        ),
        R.NOTIFICATION: NotificationRequestHeader(
            consumer_group=n.group, topic=n.topic, queue_id=-1, poll_time=0, born_time=0
        ),
        R.POLLING_INFO: PollingInfoRequestHeader(consumer_group=n.group, topic=n.topic, queue_id=0),
    }
    return command(code, headers[code])


def _lock(code: RequestCode) -> Callable[[Names], RemotingCommand]:
    def build(n: Names) -> RemotingCommand:
        body = {
            "consumerGroup": n.group,
            "clientId": "acl-test@1",
            "onlyThisBroker": False,
            "mqSet": [{"topic": n.topic, "brokerName": "broker-a", "queueId": 0}],
        }
        return command(code, {}, body)

    return build


def _user(code: RequestCode, name: str, password: str | None = None) -> RemotingCommand:
    info = None
    if password is not None:
        info = {"username": name, "password": password, "userType": "Normal", "userStatus": "enable"}
    return command(code, UserRequestHeader(username=name), info)


def _acl(code: RequestCode, n: Names) -> RemotingCommand:
    """An ACL request on the case's own user: its ACL exists (the grant made it)."""
    acl = {
        "subject": f"User:{n.user}",
        "policies": [{"policyType": "Custom", "entries": [entry(f"Topic:{n.topic}", ["Get"])]}],
    }
    return command(code, AclRequestHeader(subject=f"User:{n.user}"), acl)


def _auth_cases(server: str, cluster: str) -> list[Case]:
    """The users and ACLs requests, at either server: writes need Update on the cluster, reads Get."""
    return [
        Case(
            RequestCode.AUTH_CREATE_USER,
            server,
            lambda n: _user(RequestCode.AUTH_CREATE_USER, f"made-{n.topic}", "made-secret"),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_UPDATE_USER,
            server,
            lambda n: _user(RequestCode.AUTH_UPDATE_USER, n.user, ALLOWED_SECRET),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_DELETE_USER,
            server,
            lambda n: _user(RequestCode.AUTH_DELETE_USER, f"made-{n.topic}"),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_GET_USER,
            server,
            lambda n: command(RequestCode.AUTH_GET_USER, UserRequestHeader(username=ROOT.access_key)),
            needs((cluster, "Get")),
        ),
        Case(
            RequestCode.AUTH_LIST_USER,
            server,
            lambda n: command(RequestCode.AUTH_LIST_USER, ListUsersRequestHeader(filter="ro")),
            needs((cluster, "Get")),
        ),
        Case(
            RequestCode.AUTH_CREATE_ACL,
            server,
            lambda n: _acl(RequestCode.AUTH_CREATE_ACL, n),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_UPDATE_ACL,
            server,
            lambda n: _acl(RequestCode.AUTH_UPDATE_ACL, n),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_DELETE_ACL,
            server,
            lambda n: command(RequestCode.AUTH_DELETE_ACL, DeleteAclRequestHeader(subject=f"User:{n.user}")),
            needs((cluster, "Update")),
        ),
        Case(
            RequestCode.AUTH_GET_ACL,
            server,
            lambda n: command(RequestCode.AUTH_GET_ACL, AclRequestHeader(subject=f"User:{n.user}")),
            needs((cluster, "Get")),
        ),
        Case(
            RequestCode.AUTH_LIST_ACL,
            server,
            lambda n: command(RequestCode.AUTH_LIST_ACL, ListAclsRequestHeader(subject_filter="root")),
            needs((cluster, "Get")),
        ),
    ]


R = RequestCode

BROKER_CASES = [
    Case(
        R.SEND_MESSAGE,
        "broker",
        lambda n: send_request(n.topic, "pg", code=R.SEND_MESSAGE),
        needs(("Topic", "Pub")),
    ),
    Case(
        R.SEND_MESSAGE_V2,
        "broker",
        lambda n: send_request(n.topic, "pg", code=R.SEND_MESSAGE_V2),
        needs(("Topic", "Pub")),
    ),
    Case(
        R.SEND_MESSAGE_V2,
        "broker",
        lambda n: send_request(n.retry, n.group, code=R.SEND_MESSAGE_V2),
        needs(("Group", "Sub")),
        "retry",
    ),
    Case(
        R.SEND_BATCH_MESSAGE,
        "broker",
        lambda n: send_request(n.topic, "pg", code=R.SEND_BATCH_MESSAGE),
        needs(("Topic", "Pub")),
    ),
    Case(
        R.CONSUMER_SEND_MSG_BACK,
        "broker",
        lambda n: command(
            R.CONSUMER_SEND_MSG_BACK,
            # No message is stored there: let through, it is answered SYSTEM_ERROR.
            ConsumerSendMsgBackRequestHeader(
                offset=2**40, group=n.group, delay_level=0, origin_topic=n.topic
            ),
        ),
        needs(("Group", "Sub"), ("Topic", "Sub")),
    ),
    Case(
        R.END_TRANSACTION,
        "broker",
        lambda n: command(
            R.END_TRANSACTION,
            # No half message is stored there: let through, it is answered SYSTEM_ERROR.
            EndTransactionRequestHeader(
                producer_group="pg",
                tran_state_table_offset=0,
                commit_log_offset=2**40,
                commit_or_rollback=8,
                msg_id="00",
                topic=n.topic,
            ),
        ),
        needs(("Topic", "Pub")),
    ),
    Case(
        R.PULL_MESSAGE,
        "broker",
        lambda n: pull_request(n.topic, n.group),
        needs(("Topic", "Sub"), ("Group", "Sub")),
    ),
    Case(
        R.PULL_MESSAGE, "broker", lambda n: pull_request(n.retry, n.group), needs(("Group", "Sub")), "retry"
    ),
    # POP consumption: the topic does not exist, so the allowed user is answered TOPIC_NOT_EXIST.
    Case(
        R.POP_MESSAGE, "broker", lambda n: _pop(R.POP_MESSAGE, n), needs(("Topic", "Sub"), ("Group", "Sub"))
    ),
    Case(
        R.ACK_MESSAGE, "broker", lambda n: _pop(R.ACK_MESSAGE, n), needs(("Topic", "Sub"), ("Group", "Sub"))
    ),
    Case(
        R.CHANGE_MESSAGE_INVISIBLETIME,
        "broker",
        lambda n: _pop(R.CHANGE_MESSAGE_INVISIBLETIME, n),
        needs(("Topic", "Sub"), ("Group", "Sub")),
    ),
    Case(
        R.PEEK_MESSAGE, "broker", lambda n: _pop(R.PEEK_MESSAGE, n), needs(("Topic", "Sub"), ("Group", "Sub"))
    ),
    Case(
        R.NOTIFICATION, "broker", lambda n: _pop(R.NOTIFICATION, n), needs(("Topic", "Sub"), ("Group", "Sub"))
    ),
    Case(
        R.POLLING_INFO, "broker", lambda n: _pop(R.POLLING_INFO, n), needs(("Topic", "Get"), ("Group", "Get"))
    ),
    Case(
        R.BATCH_ACK_MESSAGE,
        "broker",
        lambda n: command(
            R.BATCH_ACK_MESSAGE,
            {},
            {
                "acks": [
                    {"c": n.group, "t": n.topic, "r": "0", "so": 0, "q": 0, "pt": 1, "it": 1, "b": "AQ=="}
                ]
            },
        ),
        needs(("Topic", "Sub"), ("Group", "Sub")),
    ),
    Case(
        R.QUERY_MESSAGE,
        "broker",
        lambda n: command(
            R.QUERY_MESSAGE,
            QueryMessageRequestHeader(topic=n.topic, key="k", max_num=1, begin_timestamp=0, end_timestamp=1),
        ),
        needs(("Topic", "Sub|Get")),
    ),
    Case(
        R.VIEW_MESSAGE_BY_ID,
        "broker",
        # No message is stored there (the message's own topic is checked by the handler).
        lambda n: command(R.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=2**40)),
        needs(("Cluster", "Get")),
    ),
    Case(R.HEART_BEAT, "broker", _heartbeat, needs(("Group", "Sub"), ("Topic", "Sub"))),
    Case(
        R.UNREGISTER_CLIENT,
        "broker",
        lambda n: command(
            R.UNREGISTER_CLIENT,
            UnregisterClientRequestHeader(client_id="c@1", consumer_group=n.group),
        ),
        needs(("Group", "Sub")),
    ),
    Case(
        R.UNREGISTER_CLIENT,
        "broker",
        lambda n: command(
            R.UNREGISTER_CLIENT,
            UnregisterClientRequestHeader(client_id="c@1", producer_group=n.group),
        ),
        needs(("Group", "Pub")),
        "producer",
    ),
    Case(
        R.UNREGISTER_CLIENT,
        "broker",
        lambda n: command(R.UNREGISTER_CLIENT, UnregisterClientRequestHeader(client_id="c@1")),
        needs(("Cluster", "Update")),
        "no-group",
    ),
    Case(
        R.GET_CONSUMER_LIST_BY_GROUP,
        "broker",
        lambda n: command(R.GET_CONSUMER_LIST_BY_GROUP, ConsumerGroupRequestHeader(consumer_group=n.group)),
        needs(("Group", "Sub|Get")),
    ),
    Case(
        R.QUERY_CONSUMER_OFFSET,
        "broker",
        lambda n: command(
            R.QUERY_CONSUMER_OFFSET,
            QueryConsumerOffsetRequestHeader(consumer_group=n.group, topic=n.topic, queue_id=0),
        ),
        needs(("Topic", "Sub|Get"), ("Group", "Sub|Get")),
    ),
    Case(
        R.UPDATE_CONSUMER_OFFSET,
        "broker",
        lambda n: command(
            R.UPDATE_CONSUMER_OFFSET,
            UpdateConsumerOffsetRequestHeader(
                consumer_group=n.group, topic=n.topic, queue_id=0, commit_offset=0
            ),
        ),
        needs(("Topic", "Sub|Update"), ("Group", "Sub|Update")),
    ),
    Case(R.LOCK_BATCH_MQ, "broker", _lock(R.LOCK_BATCH_MQ), needs(("Group", "Sub"), ("Topic", "Sub"))),
    Case(R.UNLOCK_BATCH_MQ, "broker", _lock(R.UNLOCK_BATCH_MQ), needs(("Group", "Sub"), ("Topic", "Sub"))),
    Case(
        R.CHECK_CLIENT_CONFIG,
        "broker",
        lambda n: command(
            R.CHECK_CLIENT_CONFIG,
            {},
            {
                "clientId": "c@1",
                "group": n.group,
                "subscriptionData": {"topic": n.topic, "subString": "*", "expressionType": "TAG"},
            },
        ),
        needs(("Group", "Sub")),
    ),
    Case(
        R.UPDATE_AND_CREATE_TOPIC,
        "broker",
        lambda n: create_topic_request(n.topic),
        needs(("Topic", "Create")),
    ),
    Case(
        R.DELETE_TOPIC_IN_BROKER,
        "broker",
        lambda n: command(R.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(topic=n.topic)),
        needs(("Topic", "Delete")),
    ),
    Case(
        R.GET_ALL_TOPIC_CONFIG,
        "broker",
        lambda n: command(R.GET_ALL_TOPIC_CONFIG),
        needs(("Topic:*", "List")),
    ),
    Case(
        R.GET_ALL_CONSUMER_OFFSET,
        "broker",
        lambda n: command(R.GET_ALL_CONSUMER_OFFSET),
        needs(("Cluster", "Get")),
    ),
    Case(
        R.GET_TOPIC_STATS_INFO,
        "broker",
        lambda n: command(R.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic=n.topic)),
        needs(("Topic", "Get")),
    ),
    Case(
        R.GET_TOPIC_CONFIG,
        "broker",
        lambda n: command(R.GET_TOPIC_CONFIG, GetTopicConfigRequestHeader(topic=n.topic)),
        needs(("Topic", "Get")),
    ),
    Case(
        R.GET_MAX_OFFSET,
        "broker",
        lambda n: command(R.GET_MAX_OFFSET, QueueRequestHeader(topic=n.topic, queue_id=0)),
        needs(("Topic", "Get")),
    ),
    Case(
        R.GET_MIN_OFFSET,
        "broker",
        lambda n: command(R.GET_MIN_OFFSET, QueueRequestHeader(topic=n.topic, queue_id=0)),
        needs(("Topic", "Get")),
    ),
    Case(
        R.SEARCH_OFFSET_BY_TIMESTAMP,
        "broker",
        lambda n: command(
            R.SEARCH_OFFSET_BY_TIMESTAMP,
            SearchOffsetRequestHeader(topic=n.topic, queue_id=0, timestamp=0),
        ),
        needs(("Topic", "Get")),
    ),
    Case(
        R.GET_EARLIEST_MSG_STORETIME,
        "broker",
        lambda n: command(R.GET_EARLIEST_MSG_STORETIME, QueueRequestHeader(topic=n.topic, queue_id=0)),
        needs(("Topic", "Get")),
    ),
    Case(
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        "broker",
        lambda n: command(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, {"groupName": n.group}),
        needs(("Group", "Create")),
    ),
    Case(
        R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        "broker",
        lambda n: command(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
        needs(("Group:*", "List")),
    ),
    Case(
        R.DELETE_SUBSCRIPTIONGROUP,
        "broker",
        lambda n: command(
            R.DELETE_SUBSCRIPTIONGROUP, DeleteSubscriptionGroupRequestHeader(group_name=n.group)
        ),
        needs(("Group", "Delete")),
    ),
    Case(
        R.GET_CONSUME_STATS,
        "broker",
        lambda n: command(R.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(consumer_group=n.group)),
        needs(("Group", "Get")),
    ),
    Case(
        R.GET_CONSUME_STATS,
        "broker",
        lambda n: command(
            R.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(consumer_group=n.group, topic=n.topic)
        ),
        needs(("Group", "Get"), ("Topic", "Get")),
        "topic",
    ),
    Case(
        R.GET_CONSUMER_CONNECTION_LIST,
        "broker",
        lambda n: command(R.GET_CONSUMER_CONNECTION_LIST, ConsumerGroupRequestHeader(consumer_group=n.group)),
        needs(("Group", "Get")),
    ),
    Case(
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        "broker",
        lambda n: command(
            R.INVOKE_BROKER_TO_RESET_OFFSET,
            ResetOffsetRequestHeader(topic=n.topic, group=n.group, timestamp=0, is_force=False),
        ),
        needs(("Group", "Update"), ("Topic", "Update")),
    ),
    Case(
        R.GET_ALL_DELAY_OFFSET, "broker", lambda n: command(R.GET_ALL_DELAY_OFFSET), needs(("Cluster", "Get"))
    ),
    Case(
        R.GET_BROKER_RUNTIME_INFO,
        "broker",
        lambda n: command(R.GET_BROKER_RUNTIME_INFO),
        needs(("Cluster", "Get")),
    ),
    Case(
        R.GET_BROKER_HA_STATUS, "broker", lambda n: command(R.GET_BROKER_HA_STATUS), needs(("Cluster", "Get"))
    ),
    Case(R.GET_BROKER_CONFIG, "broker", lambda n: command(R.GET_BROKER_CONFIG), needs(("Cluster", "Get"))),
    Case(
        R.UPDATE_BROKER_CONFIG,
        "broker",
        lambda n: RemotingCommand(code=R.UPDATE_BROKER_CONFIG, body=b"longPollingEnable=true\n"),
        needs(("Cluster", "Update")),
    ),
    Case(
        R.VIEW_BROKER_STATS_DATA,
        "broker",
        lambda n: command(
            R.VIEW_BROKER_STATS_DATA,
            ViewBrokerStatsDataRequestHeader(stats_name="TOPIC_PUT_NUMS", stats_key=n.topic),
        ),
        needs(("Cluster", "Get")),
    ),
    Case(
        R.GET_BROKER_CONSUME_STATS,
        "broker",
        lambda n: command(R.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(is_order=False)),
        needs(("Cluster", "Get")),
    ),
    Case(
        R.GET_PRODUCER_CONNECTION_LIST,
        "broker",
        lambda n: command(R.GET_PRODUCER_CONNECTION_LIST, ProducerGroupRequestHeader(producer_group=n.group)),
        needs(("Cluster", "Get")),
    ),
    Case(
        R.CLONE_GROUP_OFFSET,
        "broker",
        lambda n: command(
            R.CLONE_GROUP_OFFSET,
            CloneGroupOffsetRequestHeader(src_group="acl-source", dest_group=n.group, topic=n.topic),
        ),
        needs(("Group", "Update"), ("Topic", "Update")),
    ),
    # Naming another master: the broker (brokerId 0) cannot become a slave and says so; nothing changes.
    Case(
        R.NOTIFY_BROKER_ROLE_CHANGED,
        "broker",
        lambda n: command(
            R.NOTIFY_BROKER_ROLE_CHANGED,
            NotifyBrokerRoleChangedRequestHeader(master_address="127.0.0.1:1", master_epoch=99),
        ),
        needs(("Cluster", "Update")),
    ),
    *_auth_cases("broker", "Cluster"),
]

_FAKE_BROKER = BrokerRequestHeader(
    broker_name="acl-fake", broker_addr="127.0.0.1:1", cluster_name=CLUSTER, broker_id=0
)

NAMESRV_CASES = [
    # A registration whose body is not JSON: refused as malformed (SYSTEM_ERROR) once let through.
    Case(
        R.REGISTER_BROKER,
        "namesrv",
        lambda n: command(
            R.REGISTER_BROKER,
            RegisterBrokerRequestHeader(
                broker_name="acl-fake",
                broker_addr="127.0.0.1:1",
                cluster_name=CLUSTER,
                ha_server_addr="127.0.0.1:2",
                broker_id=0,
            ),
            b"not json",
        ),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.UNREGISTER_BROKER,
        "namesrv",
        lambda n: command(R.UNREGISTER_BROKER, _FAKE_BROKER),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.QUERY_DATA_VERSION,
        "namesrv",
        lambda n: command(
            R.QUERY_DATA_VERSION,
            _FAKE_BROKER,
            {"counter": 1, "timestamp": 1},
        ),
        needs(("AnyCluster", "Get")),
    ),
    Case(
        R.GET_ROUTEINFO_BY_TOPIC,
        "namesrv",
        lambda n: command(R.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=n.topic)),
        needs(("Topic", "Pub|Sub|Get")),
    ),
    Case(
        R.GET_ROUTEINFO_BY_TOPIC,
        "namesrv",
        lambda n: command(R.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=n.retry)),
        needs(("Group", "Sub|Get")),
        "retry",
    ),
    Case(
        R.GET_BROKER_CLUSTER_INFO,
        "namesrv",
        lambda n: command(R.GET_BROKER_CLUSTER_INFO),
        needs(("AnyCluster", "Get")),
    ),
    Case(
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        "namesrv",
        lambda n: command(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        needs(("Topic:*", "List")),
    ),
    Case(
        R.GET_TOPICS_BY_CLUSTER,
        "namesrv",
        lambda n: command(R.GET_TOPICS_BY_CLUSTER, GetTopicsByClusterRequestHeader(cluster=CLUSTER)),
        needs(("Topic:*", "List")),
    ),
    Case(
        R.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        "namesrv",
        lambda n: command(R.GET_SYSTEM_TOPIC_LIST_FROM_NS),
        needs(("Topic:*", "List")),
    ),
    Case(
        R.DELETE_TOPIC_IN_NAMESRV,
        "namesrv",
        lambda n: command(R.DELETE_TOPIC_IN_NAMESRV, DeleteTopicFromNamesrvRequestHeader(topic=n.topic)),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.WIPE_WRITE_PERM_OF_BROKER,
        "namesrv",
        lambda n: command(R.WIPE_WRITE_PERM_OF_BROKER, BrokerNameRequestHeader(broker_name="no-such-broker")),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.ADD_WRITE_PERM_OF_BROKER,
        "namesrv",
        lambda n: command(R.ADD_WRITE_PERM_OF_BROKER, BrokerNameRequestHeader(broker_name="no-such-broker")),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.PUT_KV_CONFIG,
        "namesrv",
        lambda n: command(R.PUT_KV_CONFIG, PutKVConfigRequestHeader(namespace="acl", key=n.topic, value="v")),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.GET_KV_CONFIG,
        "namesrv",
        lambda n: command(R.GET_KV_CONFIG, KVConfigKeyRequestHeader(namespace="acl", key=n.topic)),
        needs(("AnyCluster", "Get")),
    ),
    Case(
        R.DELETE_KV_CONFIG,
        "namesrv",
        lambda n: command(R.DELETE_KV_CONFIG, KVConfigKeyRequestHeader(namespace="acl", key=n.topic)),
        needs(("AnyCluster", "Update")),
    ),
    Case(
        R.GET_KVLIST_BY_NAMESPACE,
        "namesrv",
        lambda n: command(R.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader(namespace="acl")),
        needs(("AnyCluster", "Get")),
    ),
    *_auth_cases("namesrv", "AnyCluster"),
]

CASES = BROKER_CASES + NAMESRV_CASES
_serial = itertools.count()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A name server and a broker registered with it, both with aclEnable: server kind → address."""
    with separate_secured_servers(tmp_path_factory.mktemp("acl-wire")) as (namesrv, broker):
        yield {"namesrv": namesrv, "broker": broker}


def test_the_broker_registers_with_its_own_credentials(servers: dict[str, str]) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        try:
            request = command(RequestCode.GET_BROKER_CLUSTER_INFO)
            response = await invoke_as(client, servers["namesrv"], request, ROOT)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert servers["broker"] in response.body.decode()
        finally:
            await client.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_request_passes_with_what_the_table_needs_and_not_without(
    case: Case, servers: dict[str, str]
) -> None:
    serial = next(_serial)
    names = Names(f"acl-t{serial}", f"acl-g{serial}", f"%RETRY%acl-g{serial}", f"allowed-{serial}")
    address = servers[case.server]
    wanted = case.needs(names)

    async def scenario() -> None:
        client = RemotingClient()
        try:
            allowed = await create_user(client, address, names.user, ALLOWED_SECRET)
            # One of the actions of each need, on exactly its resource.
            await grant(
                client, address, allowed.access_key, [entry(key, actions[:1]) for key, actions in wanted]
            )
            denied = await create_user(client, address, f"denied-{serial}", "denied-secret")
            # Every other action on the same resources.
            others = [entry(key, [a for a in GRANTABLE if a not in actions]) for key, actions in wanted]
            await grant(client, address, denied.access_key, others)

            answer = await invoke_as(client, address, case.build(names), allowed)
            assert answer.code != ResponseCode.NO_PERMISSION, answer.remark
            refusal = await invoke_as(client, address, case.build(names), denied)
            assert refusal.code == ResponseCode.NO_PERMISSION, (refusal.code, refusal.remark)
            assert f"user {denied.access_key} may not" in (refusal.remark or "")
        finally:
            await client.close()

    asyncio.run(scenario())


def test_every_code_either_server_serves_has_a_case_here(tmp_path: Path) -> None:
    """A code served without a case above would go untested over the wire."""
    broker_codes, namesrv_codes = served_codes(tmp_path)
    assert broker_codes - {case.code for case in BROKER_CASES} == set()
    assert namesrv_codes - {case.code for case in NAMESRV_CASES} == set()
