"""Fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from store_testlib import small_config

from cometmq.store import MessageStore


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(**config overrides)`` starts a store on ``tmp_path/"store"``; all are shut down."""
    stores: list[MessageStore] = []

    def _open(**kw: object) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **kw))
        store.start()
        stores.append(store)
        return store

    yield _open
    for store in stores:
        store.shutdown()
