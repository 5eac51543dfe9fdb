"""Queue locks for orderly consumers: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

A lock on (group, queue) belongs to one client id and lapses 60 s after its last renewal
(RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime``); orderly clients renew every ~20 s.
"""

from __future__ import annotations

import time
from typing import Any

from cometmq.errors import RequestRefused
from cometmq.protocol import RemotingCommand, ResponseCode, fastjson
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
    try:
        body = fastjson.loads(request.body)
        group = str(body["consumerGroup"])
        client_id = str(body["clientId"])
        queues = [(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in body["mqSet"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"the lock request body is not valid: {exc}"
        ) from None
    return group, client_id, queues
