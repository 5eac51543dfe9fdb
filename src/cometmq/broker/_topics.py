"""The broker's topic table: built-in topics, auto-create from TBW102, persistence in topics.json."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cometmq.broker._json_config import MetadataFile, check_stored_name, load_json_table, read_entries
from cometmq.broker.config import BrokerConfig
from cometmq.protocol.naming import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    dlq_topic,
    stored_topic_name_error,
)
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.topic_config import MAX_QUEUE_NUMS, TopicConfig

log = logging.getLogger("cometmq.broker")

SCHEDULE_QUEUE_NUMS = 18  # one queue per delay level
DLQ_QUEUE_NUMS = 1  # RocketMQ's DLQ_NUMS_PER_GROUP


class TopicConfigManager:
    def __init__(
        self,
        config: BrokerConfig,
        config_dir: Path,
        on_change: Callable[[str | None], None] | None = None,
    ) -> None:
        self._config = config
        # Called after every change of the table with the topic changed, or None when the whole table
        # should be registered (the broker registers with the NameServer then).
        self._on_change = on_change
        self._path = config_dir / "topics.json"
        self._file = MetadataFile(self._path)
        # Lets the NameServer tell whether a registration changed anything.
        self.data_version = DataVersion(timestamp=int(time.time() * 1000))
        self.topics: dict[str, TopicConfig] = {}
        # Each topic's JSON object, with the config it was made from: a table of 10 000 topics is
        # written whole at every creation, and building every object again would be most of it.
        self._json: dict[str, tuple[TopicConfig, dict[str, Any]]] = {}
        self.system_topics: set[str] = set()
        # On a slave: topics its master's table no longer lists (deleted there), whose messages the
        # slave still holds but no longer serves.
        self.dropped_by_master: set[str] = set()
        # Told each BatchCQ topic of the table, before it takes messages (the broker declares it to
        # the store); set by the broker.
        self.on_batch_topic: Callable[[str], None] | None = None
        self._add_builtin_topics()

    def _add_builtin(self, topic: TopicConfig) -> None:
        self.topics[topic.topic_name] = topic
        self.system_topics.add(topic.topic_name)

    def _add_default_topic(self) -> None:
        cfg = self._config
        if cfg.auto_create_topic_enable:
            queues = cfg.default_topic_queue_nums
            self._add_builtin(
                TopicConfig(DEFAULT_TOPIC, queues, queues, PERM_INHERIT | PERM_READ | PERM_WRITE)
            )

    def default_topic_changed(self) -> None:
        """autoCreateTopicEnable or defaultTopicQueueNums changed while the broker runs: TBW102 is
        made, remade with the new queue count, or dropped, and the table registered."""
        self.topics.pop(DEFAULT_TOPIC, None)
        self.system_topics.discard(DEFAULT_TOPIC)
        self._add_default_topic()
        self._changed(None)

    def _add_builtin_topics(self) -> None:
        cfg = self._config
        self._add_default_topic()
        self._add_builtin(TopicConfig(SELF_TEST_TOPIC, 1, 1))
        self._add_builtin(TopicConfig(BENCHMARK_TOPIC, 1024, 1024))
        self._add_builtin(TopicConfig(cfg.broker_cluster_name, 16, 16, PERM_INHERIT))
        self._add_builtin(TopicConfig(cfg.broker_name, 1, 1, PERM_INHERIT))
        self._add_builtin(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
        self._add_builtin(TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS))
        self._add_builtin(TopicConfig(TIMER_TOPIC, 1, 1))
        for transaction_topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC):
            self._add_builtin(TopicConfig(transaction_topic, 1, 1))
        if cfg.trace_topic_enable:
            self._add_builtin(TopicConfig(cfg.msg_trace_topic_name, 1, 1))  # one queue, as RocketMQ's

    def load(self) -> None:
        loaded = load_json_table(self._path, "topicConfigTable", "topic", self._read_topic)
        if loaded is None:
            return
        obj, topics = loaded
        self.topics.update(topics)
        version = obj.get("dataVersion") or {}
        self.data_version.counter = int(version.get("counter", 0))

    def _read_topic(self, name: str, raw: Any) -> TopicConfig | None:
        # Built-ins come from the current settings, never from the file: with autoCreateTopicEnable
        # turned off, a TBW102 saved while it was on must not make auto-create work again. The trace
        # topic is the exception: one made before (with more queues, for clients' own trace topic)
        # keeps its config, or its other queues and their messages would no longer be served.
        trace_topic = self._config.msg_trace_topic_name if self._config.trace_topic_enable else None
        if (name in self.system_topics and name != trace_topic) or name == DEFAULT_TOPIC:
            return None
        config = TopicConfig.from_json(raw)
        for topic in {name, config.topic_name}:
            check_stored_name("topic", topic, stored_topic_name_error)
        if config.queue_nums > MAX_QUEUE_NUMS:
            raise ValueError(f"the topic has {config.queue_nums} queues, above {MAX_QUEUE_NUMS}")
        if name == trace_topic:
            log.info(
                "the trace topic %s keeps its stored config (%d read, %d write queues)",
                name,
                config.read_queue_nums,
                config.write_queue_nums,
            )
        return config

    def persist(self) -> None:
        """Write topics.json; a failure is logged, and the broker's housekeeping writes the table again
        while ``write_pending`` (``MetadataFile``)."""
        self._file.save(self.serialize_wrapper())

    @property
    def write_pending(self) -> bool:
        """Whether the file is older than the table (its last write failed)."""
        return self._file.pending

    def serialize_wrapper(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper: what the NameServer registration and GET_ALL_TOPIC_CONFIG carry."""
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: self._topic_json(name, topic) for name, topic in self.topics.items()},
        }

    def _topic_json(self, name: str, topic: TopicConfig) -> dict[str, Any]:
        # Configs are replaced, never changed in place, so the same object has the same JSON.
        cached = self._json.get(name)
        if cached is None or cached[0] is not topic:
            cached = self._json[name] = (topic, topic.to_json())
        return cached[1]

    def register_body(self, broker_permission: int, names: Iterable[str] | None = None) -> RegisterBrokerBody:
        """What the broker registers with the NameServer: its whole topic table, or only the topics
        *names* that still exist (after a creation or update, as RocketMQ's
        registerIncrementBrokerData: the NameServer keeps the topics a body leaves out). A broker that
        is not both readable and writable (*broker_permission*) registers every topic with its own
        permission, as RocketMQ's registerBrokerAll does, so that clients' routes follow it."""
        if names is None:
            topics = dict(self.topics)
        else:
            topics = {name: self.topics[name] for name in names if name in self.topics}
        if not (broker_permission & PERM_READ and broker_permission & PERM_WRITE):
            topics = {
                name: dataclasses.replace(topic, perm=broker_permission) for name, topic in topics.items()
            }
        return RegisterBrokerBody(self.data_version, topics)

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def _changed(self, topic: str | None) -> None:
        self.data_version.next_version()
        self.persist()
        if self._on_change is not None:
            self._on_change(topic)

    def put(self, topic: TopicConfig) -> None:
        self.topics[topic.topic_name] = topic
        self._declare_batch_topics((topic,))
        self._changed(topic.topic_name)

    def _declare_batch_topics(self, topics: Iterable[TopicConfig]) -> None:
        if self.on_batch_topic is not None:
            for topic in topics:
                if topic.is_batch_cq:
                    self.on_batch_topic(topic.topic_name)

    def declare_batch_topics(self) -> None:
        """Tell ``on_batch_topic`` every BatchCQ topic of the table (at start)."""
        self._declare_batch_topics(self.topics.values())

    def adopt(self, version: DataVersion, table: Any, source: str) -> bool:
        """A slave takes its master's table (GET_ALL_TOPIC_CONFIG's, from *source*) when its version
        differs from this one: every topic but the built-ins is replaced, and the table written.
        Whether it was taken."""
        if version == self.data_version:
            return False
        adopted = read_entries(table, "topic", self._read_topic, source)
        self.dropped_by_master |= self.topics.keys() - adopted.keys() - self.system_topics
        self.dropped_by_master -= adopted.keys()
        self.topics = {name: self.topics[name] for name in self.system_topics if name in self.topics}
        self.topics.update(adopted)
        self._declare_batch_topics(adopted.values())
        self.data_version = DataVersion(version.timestamp, version.counter)
        self.persist()
        return True

    def delete(self, topic: str) -> bool:
        self._json.pop(topic, None)
        if self.topics.pop(topic, None) is None:
            return False
        self._changed(topic)
        return True

    def create_in_send(self, topic: str, default_topic: str, request_queue_nums: int) -> TopicConfig | None:
        """Auto-create ``topic`` from its template (TBW102), as a send to an unknown topic does.

        Only a template that carries PERM_INHERIT may be inherited from; with autoCreateTopicEnable
        off TBW102 does not exist here at all, so the send is answered TOPIC_NOT_EXIST.
        """
        template = self.topics.get(default_topic)
        if not self._config.auto_create_topic_enable or template is None or not template.perm & PERM_INHERIT:
            return None
        queues = max(1, min(request_queue_nums, template.write_queue_nums))
        created = TopicConfig(
            topic,
            queues,
            queues,
            template.perm & ~PERM_INHERIT,
            template.topic_filter_type,
        )
        log.info("auto-created topic %s with %d queues from %s", topic, queues, default_topic)
        self.put(created)
        return created

    def dead_letter_topic(self, group: str) -> TopicConfig:
        """``%DLQ%<group>``, created (and registered soon) if it does not exist yet."""
        return self.create_retry_topic(dlq_topic(group), DLQ_QUEUE_NUMS)

    def create_retry_topic(self, topic: str, queue_nums: int = 1) -> TopicConfig:
        """The retry/DLQ topic, created (and registered soon) if it does not exist yet."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        assert topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
        created = TopicConfig(topic, queue_nums, queue_nums, PERM_READ | PERM_WRITE)
        self.put(created)
        return created
