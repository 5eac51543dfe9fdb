"""Replication between in-process stores: an ``HAServer`` on one store, ``HAClient``s on others, over
real loopback sockets, with no broker around them."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from cometmq.replication import HAClient, HAServer, ReplicationConfig
from cometmq.store import MessageStore, PutStatus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from store_testlib import SMALL_COMMITLOG, bodies, make_msg, small_config

__all__ = ["TOPIC", "following", "put", "replicating", "replication_config", "serving", "stores", "texts"]

TOPIC = "Replicated"


def replication_config(broker_id: int, **settings: Any) -> ReplicationConfig:
    """The settings of broker *broker_id*: small segments, quick heartbeats, patient sends."""
    defaults: dict[str, Any] = {
        "segment_size": SMALL_COMMITLOG,
        "heartbeat_interval_ms": 200,
        "slave_timeout_ms": 60_000,
    }
    return dataclasses.replace(ReplicationConfig(), broker_id=broker_id, **{**defaults, **settings})


@contextmanager
def stores(root: Path, *names: str) -> Iterator[list[MessageStore]]:
    """A started store per name under *root*; all shut down after."""
    opened: list[MessageStore] = []
    try:
        for name in names:
            store = MessageStore(small_config(root / name))
            store.start()
            opened.append(store)
        yield opened
    finally:
        for store in opened:
            store.shutdown()


def put(store: MessageStore, *texts: str) -> int:
    """Store one message per text in queue 0 of TOPIC; the commit log's end after them."""
    for text in texts:
        assert store.put(make_msg(TOPIC, 0, text.encode())).status is PutStatus.PUT_OK
    return store.replica_end()


def texts(store: MessageStore) -> list[str]:
    return [body.decode() for body in bodies(store, TOPIC, 0)]


@asynccontextmanager
async def serving(store: MessageStore, config: ReplicationConfig) -> AsyncIterator[HAServer]:
    """An HA server on *store*, on a loopback port the OS picks."""
    server = HAServer(store, config)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def following(
    store: MessageStore,
    server: HAServer,
    config: ReplicationConfig,
    *,
    expected_epoch: Callable[[], int] | None = None,
) -> AsyncIterator[HAClient]:
    """An HA client on *store* replicating from *server*, identified by the config's brokerId."""
    client = HAClient(
        store,
        config,
        lambda: f"127.0.0.1:{server.port}",
        broker_id=config.broker_id,
        expected_epoch=expected_epoch,
    )
    client.start()
    try:
        yield client
    finally:
        await client.stop()


@asynccontextmanager
async def replicating(
    master: MessageStore,
    master_id: int,
    slave: MessageStore,
    slave_id: int,
    *,
    expected_epoch: Callable[[], int] | None = None,
) -> AsyncIterator[tuple[HAServer, HAClient]]:
    """*slave* (brokerId *slave_id*) following *master* (brokerId *master_id*)."""
    async with (
        serving(master, replication_config(master_id)) as server,
        following(slave, server, replication_config(slave_id), expected_epoch=expected_epoch) as client,
    ):
        yield server, client
