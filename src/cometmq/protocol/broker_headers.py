"""The headers of the requests a broker serves and of its answers, declared once for both ends
(:mod:`cometmq.protocol.headers`). Field names, Java types and defaults are RocketMQ's
(``remoting/protocol/header``); docs/protocol.md describes each request."""

from __future__ import annotations

from cometmq.protocol.headers import Header, JavaBool, JavaInt, JavaLong, JavaString, header, wire


@header
class PullMessageRequestHeader(Header):
    consumer_group: JavaString = wire("consumerGroup")
    topic: JavaString = wire("topic")
    queue_id: JavaInt = wire("queueId")
    queue_offset: JavaLong = wire("queueOffset")
    max_msg_nums: JavaInt = wire("maxMsgNums", default=32)
    sys_flag: JavaInt = wire("sysFlag", default=0)
    commit_offset: JavaLong = wire("commitOffset", default=0)
    suspend_timeout_millis: JavaLong = wire("suspendTimeoutMillis", default=0)
    subscription: JavaString | None = wire("subscription", default=None)
    sub_version: JavaLong = wire("subVersion", default=0)
    expression_type: JavaString | None = wire("expressionType", default=None)


@header
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE's header; SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE send the same fields under their
    one-letter *compact* names (RocketMQ's SendMessageRequestHeaderV2)."""

    producer_group: JavaString = wire("producerGroup", compact="a")
    topic: JavaString = wire("topic", compact="b")
    default_topic: JavaString = wire("defaultTopic", compact="c", default="TBW102")
    default_topic_queue_nums: JavaInt = wire("defaultTopicQueueNums", compact="d", default=4)
    queue_id: JavaInt = wire("queueId", compact="e", default=-1)
    sys_flag: JavaInt = wire("sysFlag", compact="f", default=0)
    born_timestamp: JavaLong = wire("bornTimestamp", compact="g", default=0)
    flag: JavaInt = wire("flag", compact="h", default=0)
    properties: JavaString | None = wire("properties", compact="i", default=None)
    reconsume_times: JavaInt | None = wire("reconsumeTimes", compact="j", default=None)
    unit_mode: JavaBool = wire("unitMode", compact="k", default=False)
    max_reconsume_times: JavaInt | None = wire("maxReconsumeTimes", compact="l", default=None)
    batch: JavaBool = wire("batch", compact="m", default=False)
