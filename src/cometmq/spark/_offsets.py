"""Offsets of a set of queues as the JSON Spark checkpoints (pure: no I/O).

``{"orders": {"broker-a": {"0": 120, "1": 118}}}``: topic, then broker name, then queue id (a
string, as JSON keys are) to the consume-queue offset. In ``startingOffsets`` and ``endingOffsets``
-2 means the queue's earliest offset and -1 its latest, as in Spark's Kafka source.
"""

from __future__ import annotations

import json
from typing import Any

from cometmq.client.message import MessageQueue
from cometmq.errors import OptionError

__all__ = ["EARLIEST", "LATEST", "QueueOffsets", "from_json", "offsets_behind_latest", "to_json"]

EARLIEST = -2
LATEST = -1

QueueOffsets = dict[MessageQueue, int]


def to_json(offsets: QueueOffsets) -> dict[str, Any]:
    """The nested dict Spark serialises (sorted, so equal offsets give equal JSON)."""
    out: dict[str, Any] = {}
    for queue in sorted(offsets):
        out.setdefault(queue.topic, {}).setdefault(queue.broker_name, {})[str(queue.queue_id)] = offsets[
            queue
        ]
    return out


def from_json(value: dict[str, Any] | str, what: str = "offsets") -> QueueOffsets:
    """Parse the nested form (a dict, or its JSON text); a clear :class:`OptionError` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise OptionError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OptionError(f'{what} must look like {{"topic": {{"broker": {{"0": 42}}}}}}')
    offsets: QueueOffsets = {}
    for topic, brokers in value.items():
        if not isinstance(brokers, dict):
            raise OptionError(f"{what}: topic {topic!r} must map broker names to queues")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(f"{what}: {topic}@{broker} must map queue ids to offsets")
            for queue_id, offset in queues.items():
                try:
                    queue = MessageQueue(str(topic), str(broker), int(queue_id))
                except ValueError:
                    raise OptionError(
                        f"{what}: queue id {queue_id!r} of {topic}@{broker} is not a number"
                    ) from None
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                    raise OptionError(
                        f"{what}: offset of {queue} must be a whole number >= -2, not {offset!r}"
                    )
                offsets[queue] = offset
    return offsets


def offsets_behind_latest(source: Any) -> dict[str, float]:
    """How far a micro-batch's end was behind the queues' ends, from a streaming query's progress
    for this source (``query.lastProgress.sources[i]``, or its JSON dict): the metrics Spark's
    Kafka source reports in ``metrics``, which a Python source cannot fill. ``{}`` when the
    progress has no latest offsets (no batch ran yet)."""
    end_text, latest_text = (
        (source.get("endOffset"), source.get("latestOffset"))
        if isinstance(source, dict)
        else (source.endOffset, source.latestOffset)
    )
    if not end_text or not latest_text or latest_text == "null":
        return {}
    end = from_json(end_text, "endOffset")
    behind = [max(0, latest - end.get(queue, latest)) for queue, latest in from_json(latest_text).items()]
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
        "maxOffsetsBehindLatest": float(max(behind)),
        "minOffsetsBehindLatest": float(min(behind)),
    }
