"""The rows a CometMQ topic reads as: Spark's schema and the Arrow schema ``read()`` must match."""

from __future__ import annotations

import pyarrow as pa

# One row per message. ``keys`` is the KEYS property split at spaces (null when the producer set
# none), ``properties`` the user properties (null unless ``includeProperties`` is true); RocketMQ's
# system properties have their own columns (tags, keys, msg_id) or are the broker's business.
SCHEMA_DDL = (
    "topic string, broker string, queue_id int, queue_offset bigint, msg_id string, "
    "keys array<string>, tags string, body binary, properties map<string,string>, "
    "born_timestamp timestamp, store_timestamp timestamp, reconsume_times int"
)

TIMESTAMP = pa.timestamp("us", tz="UTC")
KEYS_TYPE = pa.list_(pa.string())
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())

# Spark >= 4.2 checks the batches against the declared schema exactly: int32 for int, microsecond
# UTC timestamps, and every field nullable (Spark's own fields are).
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("keys", KEYS_TYPE),
        ("tags", pa.string()),
        ("body", pa.binary()),
        ("properties", PROPERTIES_TYPE),
        ("born_timestamp", TIMESTAMP),
        ("store_timestamp", TIMESTAMP),
        ("reconsume_times", pa.int32()),
    ]
)
