"""Route bodies the NameServer serves and brokers register: who holds which topic's queues.

The JSON shapes are RocketMQ's (``common/protocol/route``, ``RegisterBrokerBody``). Broker ids are
``int`` keys in memory; on the wire fastjson writes them unquoted (``{0:"10.0.0.1:10911"}``), which
only the legacy route form keeps (see :meth:`TopicRouteData.encode`).
"""

from __future__ import annotations

import contextlib
import json
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cometmq.errors import ProtocolError, RecordError
from cometmq.protocol import fastjson
from cometmq.protocol.codec import MAX_FRAME_SIZE
from cometmq.protocol.jsonbody import BodyError, as_object, java_long, json_object
from cometmq.protocol.naming import name_remark, text_error
from cometmq.protocol.record import inflate_body
from cometmq.protocol.topic_config import TopicConfig

MASTER_ID = 0  # brokerId of a broker group's master; slaves have ids >= 1

_INT32 = struct.Struct(">i")


@contextlib.contextmanager
def _decoding(what: str) -> Iterator[None]:
    """Turn what a malformed body makes the parsers raise into one ProtocolError naming *what* (and the
    field, for one that is missing)."""
    try:
        yield
    except BodyError as exc:
        raise ProtocolError(f"the {what} is not valid: {exc.remark}") from None
    except KeyError as exc:
        raise ProtocolError(f"the {what} has no field {exc.args[0]}") from None
    except (ValueError, TypeError, OverflowError):  # OverflowError: int() of 1e999
        raise ProtocolError(f"the {what} is not valid: a field is not of its Java type") from None


@dataclass(slots=True)
class QueueData:
    """One broker group's share of a topic: its queue counts and permission."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: Any) -> QueueData:
        obj = as_object(obj, "QueueData")
        return cls(
            broker_name=str(obj["brokerName"]),
            read_queue_nums=int(obj.get("readQueueNums", 0)),
            write_queue_nums=int(obj.get("writeQueueNums", 0)),
            perm=int(obj.get("perm", 0)),
            # RocketMQ up to 4.8 spelled it topicSynFlag.
            topic_sys_flag=int(obj.get("topicSysFlag", obj.get("topicSynFlag", 0))),
        )


@dataclass(slots=True)
class BrokerData:
    """A broker group: its name, cluster, and broker id → ``ip:port`` (id 0 is the master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))

    def to_json(self) -> dict[str, Any]:
        """JSON object with *int* brokerAddrs keys, so the legacy writer can leave them unquoted."""
        return {
            "brokerAddrs": {
                broker_id: self.broker_addrs[broker_id] for broker_id in sorted(self.broker_addrs)
            },
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, obj: Any) -> BrokerData:
        obj = as_object(obj, "BrokerData")
        addrs = as_object(obj.get("brokerAddrs") or {}, "brokerAddrs")
        return cls(
            cluster=str(obj.get("cluster", "")),
            broker_name=str(obj["brokerName"]),
            broker_addrs={int(key): str(value) for key, value in addrs.items()},
        )


@dataclass(slots=True)
class TopicRouteData:
    """The answer to GET_ROUTEINFO_BY_TOPIC."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "brokerDatas": [broker.to_json() for broker in self.broker_datas],
            "filterServerTable": {
                addr: list(servers) for addr, servers in sorted(self.filter_server_table.items())
            },
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        obj["queueDatas"] = [queue.to_json() for queue in self.queue_datas]
        return obj

    def encode(self, *, standard_json: bool) -> bytes:
        """The reply body: standard JSON, or fastjson's legacy form with unquoted broker-id keys.

        Some released clients (the Go client) parse the legacy form by hand, so it stays the answer
        for old request versions, as the Java namesrv does.
        """
        return fastjson.dumps(self.to_json(), numeric_keys_unquoted=not standard_json)

    @classmethod
    def from_json(cls, obj: Any) -> TopicRouteData:
        obj = as_object(obj, "TopicRouteData")
        order_conf = obj.get("orderTopicConf")
        filter_servers = as_object(obj.get("filterServerTable") or {}, "filterServerTable")
        return cls(
            queue_datas=[QueueData.from_json(item) for item in obj.get("queueDatas") or []],
            broker_datas=[BrokerData.from_json(item) for item in obj.get("brokerDatas") or []],
            filter_server_table={
                str(addr): [str(server) for server in servers] for addr, servers in filter_servers.items()
            },
            order_topic_conf=str(order_conf) if order_conf is not None else None,
        )

    @classmethod
    def decode(cls, body: bytes) -> TopicRouteData:
        """The route in an answer's *body*; ProtocolError when it is not one."""
        with _decoding("TopicRouteData"):
            return cls.from_json(fastjson.loads(body))


@dataclass(slots=True)
class ClusterInfo:
    """The answer to GET_BROKER_CLUSTER_INFO: every broker group, and each cluster's group names."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {
                name: data.to_json() for name, data in sorted(self.broker_addr_table.items())
            },
            "clusterAddrTable": {
                name: sorted(names) for name, names in sorted(self.cluster_addr_table.items())
            },
        }

    def encode(self) -> bytes:
        # Standard JSON wherever no client is known to need the legacy form (docs/protocol.md#fastjson).
        return fastjson.dumps(self.to_json())

    @classmethod
    def from_json(cls, obj: Any) -> ClusterInfo:
        obj = as_object(obj, "ClusterInfo")
        brokers = as_object(obj.get("brokerAddrTable") or {}, "brokerAddrTable")
        clusters = as_object(obj.get("clusterAddrTable") or {}, "clusterAddrTable")
        return cls(
            broker_addr_table={str(name): BrokerData.from_json(data) for name, data in brokers.items()},
            cluster_addr_table={str(name): sorted(str(n) for n in names) for name, names in clusters.items()},
        )

    @classmethod
    def decode(cls, body: bytes) -> ClusterInfo:
        """The cluster info in an answer's *body*; ProtocolError when it is not one."""
        with _decoding("ClusterInfo"):
            return cls.from_json(fastjson.loads(body))

    def brokers_of(self, cluster: str) -> list[BrokerData]:
        """The broker groups of ``cluster`` that are known, by name."""
        return [
            self.broker_addr_table[name]
            for name in sorted(self.cluster_addr_table.get(cluster, ()))
            if name in self.broker_addr_table
        ]


@dataclass(slots=True)
class TopicList:
    """``{"topicList":[…]}``, plus ``brokerAddr`` in the system-topic answer."""

    topics: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        if self.broker_addr is not None:
            obj["brokerAddr"] = self.broker_addr
        obj["topicList"] = list(self.topics)
        return obj

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes) -> TopicList:
        """The topic list in an answer's *body*; ProtocolError when it is not one."""
        with _decoding("TopicList"):
            obj = as_object(fastjson.loads(body), "TopicList")
            addr = obj.get("brokerAddr")
            return cls([str(topic) for topic in obj.get("topicList") or []], str(addr) if addr else None)


@dataclass(slots=True)
class DataVersion:
    """A broker's topic-table version: the namesrv re-reads queue data only when it changes."""

    timestamp: int = 0
    counter: int = 0

    def next_version(self) -> None:
        """RocketMQ's nextVersion: the table changed now."""
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        what = "DataVersion"
        obj = as_object(obj, what)
        counter = obj.get("counter")
        if isinstance(counter, dict):  # fastjson writes AtomicLong as a number, but be lenient
            obj = {**obj, "counter": counter.get("value")}
        return cls(
            timestamp=java_long(obj, "timestamp", what, default=0, minimum=0),
            counter=java_long(obj, "counter", what, default=0, minimum=0),
        )

    @classmethod
    def decode(cls, body: bytes) -> DataVersion:
        """The data version in QUERY_DATA_VERSION's *body* (none: the zero version); ProtocolError when
        it is not one."""
        with _decoding("DataVersion"):
            return cls.from_json(json_object(body, "DataVersion") if body else {})


@dataclass(slots=True)
class RegisterBrokerBody:
    """The body of REGISTER_BROKER: the broker's whole (or, from Java 4.9 brokers creating a topic,
    incremental) topic table, its data version and its filter servers."""

    data_version: DataVersion = field(default_factory=DataVersion)
    topic_configs: dict[str, TopicConfig] = field(default_factory=dict)
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, *, compressed: bool = False) -> bytes:
        if not compressed:
            return fastjson.dumps(
                {
                    "filterServerList": list(self.filter_server_list),
                    "topicConfigSerializeWrapper": {
                        "dataVersion": self.data_version.to_json(),
                        "topicConfigTable": {name: tc.to_json() for name, tc in self.topic_configs.items()},
                    },
                }
            )
        parts = [
            _length_prefixed(fastjson.dumps(self.data_version.to_json())),
            _INT32.pack(len(self.topic_configs)),
        ]
        for tc in self.topic_configs.values():
            compact = (
                f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}"
            )
            parts.append(_length_prefixed(compact.encode()))
        parts.append(_length_prefixed(fastjson.dumps(list(self.filter_server_list))))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, body: bytes, *, compressed: bool = False) -> RegisterBrokerBody:
        """Parse either form; ProtocolError for a body that is not the one *compressed* says."""
        with _decoding("RegisterBrokerBody"):
            if compressed:
                return cls._decode_compressed(body)
            return cls._decode_json(body)

    @classmethod
    def _decode_json(cls, body: bytes) -> RegisterBrokerBody:
        if not body:
            return cls()
        obj = json_object(body, "RegisterBrokerBody")
        wrapper = as_object(obj.get("topicConfigSerializeWrapper", {}), "topicConfigSerializeWrapper")
        table = as_object(wrapper.get("topicConfigTable", {}), "topicConfigTable")
        configs: dict[str, TopicConfig] = {}
        for name, tc_obj in table.items():
            tc_obj = as_object(tc_obj, "TopicConfig")
            # Only text is checked: a broker's own name and its cluster's are topics of its table, and
            # RocketMQ does not hold those to the topic characters.
            if (problem := text_error(str(name))) is not None:
                raise BodyError(name_remark("topic", str(name), problem))
            configs[str(name)] = TopicConfig.from_json({"topicName": name, **tc_obj})
        return cls(
            data_version=DataVersion.from_json(wrapper.get("dataVersion", {})),
            topic_configs=configs,
            filter_server_list=[str(addr) for addr in obj.get("filterServerList") or []],
        )

    @classmethod
    def _decode_compressed(cls, body: bytes) -> RegisterBrokerBody:
        # Inflated no larger than the frame limit: what the same body could be sent as uncompressed.
        try:
            data = inflate_body(body, MAX_FRAME_SIZE)
        except RecordError as exc:
            raise BodyError(str(exc)) from None
        reader = _Reader(data)
        data_version = DataVersion.from_json(fastjson.loads(reader.chunk()))
        configs: dict[str, TopicConfig] = {}
        for _ in range(reader.int32()):
            tokens = reader.chunk().decode().split(" ")
            if len(tokens) < 5:
                raise BodyError(f"compact topic config {' '.join(tokens)!r} has fewer than 5 fields")
            name, read, write, perm, filter_type = tokens[:5]
            if (problem := text_error(name)) is not None:
                raise BodyError(name_remark("topic", name, problem))
            configs[name] = TopicConfig.from_json(
                {
                    "topicName": name,
                    "readQueueNums": read,
                    "writeQueueNums": write,
                    "perm": perm,
                    "topicFilterType": filter_type,
                }
            )
        filters = fastjson.loads(reader.chunk()) if reader.remaining else []
        if not isinstance(filters, list):
            raise BodyError("filter server list is not a JSON array")
        return cls(data_version, configs, [str(addr) for addr in filters])


def _length_prefixed(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data


class _Reader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def int32(self) -> int:
        if self.remaining < 4:
            raise BodyError("compressed register body is truncated")
        (value,) = _INT32.unpack_from(self._data, self._pos)
        self._pos += 4
        return int(value)

    def chunk(self) -> bytes:
        size = self.int32()
        if size < 0 or size > self.remaining:
            raise BodyError("compressed register body is truncated")
        data = self._data[self._pos : self._pos + size]
        self._pos += size
        return data


def kv_table_body(table: dict[str, str]) -> bytes:
    """A KVTable body, ``{"table":{…}}``."""
    return fastjson.dumps({"table": dict(sorted(table.items()))})


def parse_kv_table(body: bytes) -> dict[str, str]:
    obj = as_object(fastjson.loads(body), "KVTable") if body else {}
    table = as_object(obj.get("table") or {}, "table")
    return {str(key): value if isinstance(value, str) else json.dumps(value) for key, value in table.items()}
