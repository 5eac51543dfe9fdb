"""Queue locks for orderly consumers: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

A lock on (group, queue) belongs to one client id and lapses 60 s after its last renewal
(RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime``); orderly clients renew every ~20 s.
"""

from __future__ import annotations

import time
from typing import Any

from cometmq.protocol import RemotingCommand, fastjson
from cometmq.protocol.jsonbody import MAX_LOCK_BATCH, as_object, java_int, java_list, java_string, json_object
from cometmq.protocol.naming import group_name_error, stored_topic_name_error, text_error
from cometmq.remoting import Connection

LOCK_MAX_LIVE_S = 60.0

_QueueKey = tuple[str, str, int]  # topic, broker name, queue id


class QueueLockProcessor:
    def __init__(self) -> None:
        # group → queue → (client id, last renewal)
        self._locks: dict[str, dict[_QueueKey, tuple[str, float]]] = {}

    def lock_batch_mq(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group, client_id, queues = _lock_body(request)
        locked = self.lock(group, client_id, queues, time.monotonic())
        body: dict[str, Any] = {
            "lockOKMQSet": [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in locked]
        }
        return request.response(body=fastjson.dumps(body))

    def unlock_batch_mq(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.unlock(*_lock_body(request))
        return request.response()

    def lock(self, group: str, client_id: str, queues: list[_QueueKey], now: float) -> list[_QueueKey]:
        """Grant free, lapsed and own locks; return every queue of ``queues`` the client now holds."""
        table = self._locks.setdefault(group, {})
        held = []
        for queue in queues:
            owner = table.get(queue)
            if owner is None or owner[0] == client_id or now - owner[1] > LOCK_MAX_LIVE_S:
                table[queue] = (client_id, now)
                held.append(queue)
        return held

    def unlock(self, group: str, client_id: str, queues: list[_QueueKey]) -> None:
        table = self._locks.get(group, {})
        for queue in queues:
            owner = table.get(queue)
            if owner is not None and owner[0] == client_id:
                del table[queue]


def _lock_body(request: RemotingCommand) -> tuple[str, str, list[_QueueKey]]:
    """The group, client id and queues of a LockBatchRequestBody (UnlockBatchRequestBody alike)."""
    what = "LockBatchRequestBody"
    body = json_object(request.body, what)
    group = java_string(body, "consumerGroup", what, name_rule=group_name_error)
    client_id = java_string(body, "clientId", what, name_rule=text_error)
    queues = []
    for raw in java_list(body, "mqSet", what, max_items=MAX_LOCK_BATCH):
        queue = as_object(raw, "MessageQueue")
        queues.append(
            (
                java_string(queue, "topic", "MessageQueue", name_rule=stored_topic_name_error),
                java_string(queue, "brokerName", "MessageQueue", name_rule=text_error),
                java_int(queue, "queueId", "MessageQueue", minimum=0),
            )
        )
    return group, client_id, queues
