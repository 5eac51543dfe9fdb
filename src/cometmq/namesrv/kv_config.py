"""The NameServer's KV config: namespaced string settings (e.g. ``ORDER_TOPIC_CONFIG``), in memory."""

from __future__ import annotations

import logging

log = logging.getLogger("cometmq.namesrv")

# Namespace whose entries the namesrv hands to brokers and, for order topics, to route queries.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self) -> None:
        self._table: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value
        log.info("KV config put: %s %s=%s", namespace, key, value)

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        entries = self._table.get(namespace)
        if entries is not None and entries.pop(key, None) is not None:
            log.info("KV config deleted: %s %s", namespace, key)
            if not entries:
                del self._table[namespace]

    def namespace(self, namespace: str) -> dict[str, str] | None:
        entries = self._table.get(namespace)
        return dict(entries) if entries else None
