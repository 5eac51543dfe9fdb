"""The headers of the requests a broker serves and of its answers, and of the requests a broker sends
to its clients, declared once for both ends (:mod:`cometmq.protocol.headers`). Field names, Java
types and defaults are RocketMQ's (``remoting/protocol/header``); where several requests carry the
same fields they share one class, whose docstring names RocketMQ's classes. docs/protocol.md
describes each request.

Requests without a header (HEART_BEAT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, CHECK_CLIENT_CONFIG,
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, the GET_ALL_* and GET_BROKER_RUNTIME_INFO) carry everything in
their body.
"""

from __future__ import annotations

from typing import Final

from cometmq.protocol.codes import UNIQUE_KEY_QUERY_FLAG
from cometmq.protocol.headers import Header, JavaBool, JavaInt, JavaLong, JavaString, header, wire
from cometmq.protocol.naming import (
    group_name_error,
    stored_topic_name_error,
    text_error,
    topic_filter_type_error,
    topic_name_error,
)
from cometmq.protocol.topic_config import MAX_PERM, MAX_QUEUE_NUMS

# RocketMQ's clients refuse a pullBatchSize outside 1..1024; the broker refuses a pull asking for more.
MAX_PULL_MESSAGES: Final = 1024
# ResetOffsetRequestHeader.timestamp meaning "the end of each queue" (RocketMQ's tools send it for "now").
RESET_TO_LATEST: Final = -1

# sending ------------------------------------------------------------------------------------------


@header
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE's header; SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE send the same fields under their
    one-letter *compact* names (RocketMQ's SendMessageRequestHeaderV2). A negative ``queue_id`` lets
    the broker pick a writable queue, as RocketMQ's does. RocketMQ 4.9.5 on adds ``n`` (the broker's
    name), which nothing here needs."""

    producer_group: JavaString = wire("producerGroup", compact="a")
    topic: JavaString = wire("topic", compact="b", name_rule=topic_name_error)
    default_topic: JavaString = wire("defaultTopic", compact="c")
    # The queues a topic auto-created by this send gets (capped by the broker, as RocketMQ's).
    default_topic_queue_nums: JavaInt = wire("defaultTopicQueueNums", compact="d")
    queue_id: JavaInt = wire("queueId", compact="e")
    sys_flag: JavaInt = wire("sysFlag", compact="f")
    born_timestamp: JavaLong = wire("bornTimestamp", compact="g")
    flag: JavaInt = wire("flag", compact="h")
    properties: JavaString | None = wire("properties", compact="i", default=None)
    reconsume_times: JavaInt | None = wire("reconsumeTimes", compact="j", default=None, minimum=0)
    unit_mode: JavaBool = wire("unitMode", compact="k", default=False)
    max_reconsume_times: JavaInt | None = wire("maxReconsumeTimes", compact="l", default=None)
    batch: JavaBool = wire("batch", compact="m", default=False)


@header
class SendMessageResponseHeader(Header):
    """The answer to a send. ``MSG_REGION`` and ``TRACE_ON`` are not fields of RocketMQ's class but
    extFields its broker adds to every send answer; its clients read them from there."""

    msg_id: JavaString = wire("msgId")
    queue_id: JavaInt = wire("queueId")
    queue_offset: JavaLong = wire("queueOffset")
    transaction_id: JavaString | None = wire("transactionId", default=None)
    msg_region: JavaString | None = wire("MSG_REGION", default=None)
    trace_on: JavaBool | None = wire("TRACE_ON", default=None)


@header
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION: a producer commits or rolls back a half message, or says it does not know yet
    (``commit_or_rollback``: 8, 12 or 0, the sys-flag transaction types). ``tran_state_table_offset``
    and ``commit_log_offset`` name the half record (its queue offset in the half topic and its
    commit-log offset). ``topic`` (RocketMQ 5's; 4.x clients leave it out) names the real topic."""

    producer_group: JavaString = wire("producerGroup", name_rule=group_name_error)
    tran_state_table_offset: JavaLong = wire("tranStateTableOffset", minimum=0)
    commit_log_offset: JavaLong = wire("commitLogOffset", minimum=0)
    commit_or_rollback: JavaInt = wire("commitOrRollback")
    from_transaction_check: JavaBool = wire("fromTransactionCheck", default=False)
    msg_id: JavaString = wire("msgId")
    transaction_id: JavaString | None = wire("transactionId", default=None)
    topic: JavaString | None = wire("topic", default=None)


@header
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE, a broker's oneway request to a producer of the half message's group:
    the body is the half message (with its real topic and queue); the producer answers with
    END_TRANSACTION (``fromTransactionCheck`` true) naming the same offsets."""

    tran_state_table_offset: JavaLong = wire("tranStateTableOffset")
    commit_log_offset: JavaLong = wire("commitLogOffset")
    msg_id: JavaString | None = wire("msgId", default=None)
    transaction_id: JavaString | None = wire("transactionId", default=None)
    offset_msg_id: JavaString | None = wire("offsetMsgId", default=None)
    topic: JavaString | None = wire("topic", default=None)
    broker_name: JavaString | None = wire("brokerName", default=None)


@header
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK: the message at commit-log ``offset`` failed in ``group``. A negative
    ``delay_level`` sends it to the dead-letter queue at once; 0 lets the broker choose."""

    offset: JavaLong = wire("offset")  # not found: RocketMQ's "look message by offset failed"
    group: JavaString = wire("group", name_rule=group_name_error)
    delay_level: JavaInt = wire("delayLevel")
    origin_msg_id: JavaString | None = wire("originMsgId", default=None)
    origin_topic: JavaString | None = wire("originTopic", default=None, name_rule=stored_topic_name_error)
    unit_mode: JavaBool = wire("unitMode", default=False)
    max_reconsume_times: JavaInt | None = wire("maxReconsumeTimes", default=None)


# pulling and offsets ------------------------------------------------------------------------------


@header
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE: up to ``max_msg_nums`` messages of one queue from ``queue_offset`` on;
    ``sys_flag`` says whether to commit ``commit_offset``, hold the pull, and use ``subscription``."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=0)
    queue_offset: JavaLong = wire("queueOffset")
    max_msg_nums: JavaInt = wire("maxMsgNums", minimum=1, maximum=MAX_PULL_MESSAGES)
    sys_flag: JavaInt = wire("sysFlag")
    commit_offset: JavaLong = wire("commitOffset")  # stored only when sys_flag says so
    # RocketMQ's clients send 15 s (BROKER_SUSPEND_MAX_TIME_MILLIS); the broker holds at most 25 s.
    suspend_timeout_millis: JavaLong = wire("suspendTimeoutMillis")
    subscription: JavaString | None = wire("subscription", default=None)
    sub_version: JavaLong = wire("subVersion")
    expression_type: JavaString | None = wire("expressionType", default=None)


@header
class PullMessageResponseHeader(Header):
    """Every pull answer carries all four fields, a refusal too: Java clients unbox them without null
    checks."""

    suggest_which_broker_id: JavaLong = wire("suggestWhichBrokerId")
    next_begin_offset: JavaLong = wire("nextBeginOffset")
    min_offset: JavaLong = wire("minOffset")
    max_offset: JavaLong = wire("maxOffset")


@header
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=0)


@header
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=0)
    # The JS client commits -1 for a queue it has not consumed yet ("no offset").
    commit_offset: JavaLong = wire("commitOffset", minimum=-1)


@header
class QueueRequestHeader(Header):
    """One queue of a topic: RocketMQ's GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader and
    GetEarliestMsgStoretimeRequestHeader (GET_MAX_OFFSET, GET_MIN_OFFSET,
    GET_EARLIEST_MSG_STORETIME)."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=0)


@header
class SearchOffsetRequestHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the message of one queue stored nearest a time."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=0)
    timestamp: JavaLong = wire("timestamp")


@header
class OffsetResponseHeader(Header):
    """A queue offset: RocketMQ's GetMaxOffsetResponseHeader, GetMinOffsetResponseHeader,
    SearchOffsetResponseHeader and QueryConsumerOffsetResponseHeader."""

    offset: JavaLong = wire("offset")


@header
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: JavaLong = wire("timestamp")


# clients ------------------------------------------------------------------------------------------


@header
class UnregisterClientRequestHeader(Header):
    client_id: JavaString = wire("clientID", name_rule=text_error)
    producer_group: JavaString | None = wire("producerGroup", default=None, name_rule=text_error)
    consumer_group: JavaString | None = wire("consumerGroup", default=None, name_rule=text_error)


@header
class ConsumerGroupRequestHeader(Header):
    """One consumer group: RocketMQ's GetConsumerListByGroupRequestHeader,
    GetConsumerConnectionListRequestHeader and NotifyConsumerIdsChangedRequestHeader
    (GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST, and NOTIFY_CONSUMER_IDS_CHANGED from
    a broker to its clients)."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)


@header
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO, from a broker (or an admin tool through it) to a client."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    client_id: JavaString = wire("clientId", name_rule=text_error)
    jstack_enable: JavaBool = wire("jstackEnable", default=False)


# administration ---------------------------------------------------------------------------------


@header
class TopicRequestHeader(Header):
    """One topic: RocketMQ's DeleteTopicRequestHeader and GetTopicStatsInfoRequestHeader
    (DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO)."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)


@header
class GetTopicConfigRequestHeader(Header):
    """GET_TOPIC_CONFIG (RocketMQ 5's). ``lo`` asks for the logic-queue mapping too, which CometMQ does
    not have: it is read and has no effect."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    lo: JavaBool | None = wire("lo", default=None)


@header
class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC. Every field but ``topicSysFlag`` and ``attributes`` is required, as
    RocketMQ's; a Java broker reads a missing ``topicSysFlag`` as 0. ``attributes`` is RocketMQ 5's
    change of the topic's attributes, ``+name=value,-name`` (``parse_attribute_changes``)."""

    topic: JavaString = wire("topic", name_rule=topic_name_error)
    default_topic: JavaString = wire("defaultTopic")
    read_queue_nums: JavaInt = wire("readQueueNums", minimum=1, maximum=MAX_QUEUE_NUMS)
    write_queue_nums: JavaInt = wire("writeQueueNums", minimum=1, maximum=MAX_QUEUE_NUMS)
    perm: JavaInt = wire("perm", minimum=0, maximum=MAX_PERM)
    topic_filter_type: JavaString = wire("topicFilterType", name_rule=topic_filter_type_error)
    topic_sys_flag: JavaInt = wire("topicSysFlag", default=0)
    order: JavaBool = wire("order")
    attributes: JavaString | None = wire("attributes", default=None)


@header
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID: the record at a commit-log offset (the offset half of an offset message
    id)."""

    offset: JavaLong = wire("offset")  # not found: RocketMQ's "can not find message by the offset"


@header
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE: messages of a topic by key (or unique key) stored in a time range. ``maxNum``
    is capped by the broker (RocketMQ's maxMsgsNumBatch). The unique-key flag is an extField
    RocketMQ's clients add beside the header's fields."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    key: JavaString = wire("key")
    max_num: JavaInt = wire("maxNum", minimum=1)
    begin_timestamp: JavaLong = wire("beginTimestamp")
    end_timestamp: JavaLong = wire("endTimestamp")
    unique_key_query: JavaBool = wire(UNIQUE_KEY_QUERY_FLAG, default=False)


@header
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: JavaLong = wire("indexLastUpdateTimestamp")
    index_last_update_phyoffset: JavaLong = wire("indexLastUpdatePhyoffset")


@header
class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: JavaString = wire("groupName", name_rule=group_name_error)
    remove_offset: JavaBool = wire("removeOffset", default=False)


@header
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS: a group's progress on one topic, or (no topic) on every topic it has
    offsets for."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString | None = wire("topic", default=None, name_rule=stored_topic_name_error)


@header
class NotifyBrokerRoleChangedRequestHeader(Header):
    """NOTIFY_BROKER_ROLE_CHANGED (RocketMQ 5's fields): the broker at ``master_address`` is its group's
    master from ``master_epoch`` on. The broker told it is that address becomes the master; any other
    becomes a slave following the master the name server names."""

    master_address: JavaString = wire("masterAddress", default="")
    master_epoch: JavaInt = wire("masterEpoch", default=0, minimum=0)
    sync_state_set_epoch: JavaInt = wire("syncStateSetEpoch", default=0)
    master_broker_id: JavaLong = wire("masterBrokerId", default=0)


@header
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin → broker) and RESET_CONSUMER_CLIENT_OFFSET (broker →
    client). ``queue_id`` and ``offset`` are RocketMQ 5's fields for one queue set to an explicit
    offset; a ``timestamp`` of -1 means each queue's end. Unless ``is_force``, a reset only moves an
    offset back."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    group: JavaString = wire("group", name_rule=group_name_error)
    timestamp: JavaLong = wire("timestamp")
    is_force: JavaBool = wire("isForce")
    queue_id: JavaInt = wire("queueId", default=-1)  # below 0: every queue
    offset: JavaLong | None = wire("offset", default=None)


@header
class ResetOffsetResponseHeader(Header):
    """How many consumer connections were sent the new offsets (CometMQ's own field; Java tools
    ignore it)."""

    consumers_notified: JavaInt = wire("consumersNotified", default=0)


@header
class GetBrokerConfigResponseHeader(Header):
    """GET_BROKER_CONFIG's answer: the version of the broker's settings as DataVersion JSON (the
    settings themselves are the body, Java properties text)."""

    version: JavaString = wire("version")


@header
class ProducerGroupRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST: one producer group (RocketMQ's
    GetProducerConnectionListRequestHeader)."""

    producer_group: JavaString = wire("producerGroup", name_rule=group_name_error)


@header
class CloneGroupOffsetRequestHeader(Header):
    """CLONE_GROUP_OFFSET: give ``dest_group`` the committed offsets of ``src_group`` on ``topic``, or
    (no topic) on every topic ``src_group`` has offsets for. Unless ``offline``, a topic an online
    ``src_group`` does not subscribe to is skipped, as RocketMQ's."""

    src_group: JavaString = wire("srcGroup", name_rule=group_name_error)
    dest_group: JavaString = wire("destGroup", name_rule=group_name_error)
    topic: JavaString | None = wire("topic", default=None, name_rule=stored_topic_name_error)
    offline: JavaBool = wire("offline", default=False)


@header
class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA: one counter of the broker's statistics, by RocketMQ's stats name
    (TOPIC_PUT_NUMS …) and key (a topic, or ``topic@group``)."""

    stats_name: JavaString = wire("statsName", name_rule=text_error)
    stats_key: JavaString = wire("statsKey", name_rule=text_error)


@header
class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS: every group's progress on a broker; ``is_order``: ordered topics only."""

    is_order: JavaBool = wire("isOrder")
