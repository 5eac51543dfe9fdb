"""One running MessageStore per directory: the ``lock`` file and how a second store is refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import bodies, crash, make_msg, small_config

from cometmq.errors import StoreInUseError
from cometmq.store import MessageStore, PutStatus

OpenStore = Callable[..., MessageStore]


def test_a_running_store_writes_its_pid_into_the_lock_file(open_store: OpenStore, tmp_path: Path) -> None:
    open_store()
    assert (tmp_path / "store" / "lock").read_text() == f"{os.getpid()}\n"


def test_a_second_store_on_the_directory_is_refused_and_the_first_keeps_working(
    open_store: OpenStore, tmp_path: Path
) -> None:
    first = open_store()
    assert first.put(make_msg(body=b"before")).status is PutStatus.PUT_OK
    second = MessageStore(small_config(tmp_path / "store"))
    with pytest.raises(StoreInUseError) as refused:
        second.start()
    assert refused.value.directory == tmp_path / "store"
    assert refused.value.holder_pid == os.getpid()
    assert f"{tmp_path / 'store'} is in use by process {os.getpid()}" in str(refused.value)
    assert first.put(make_msg(body=b"after")).status is PutStatus.PUT_OK
    assert bodies(first, "TopicTest", 0) == [b"before", b"after"]


def test_the_directory_is_free_again_after_a_shutdown(open_store: OpenStore, tmp_path: Path) -> None:
    first = open_store()
    first.put(make_msg(body=b"kept"))
    refused = MessageStore(small_config(tmp_path / "store"))
    with pytest.raises(StoreInUseError):
        refused.start()
    first.shutdown()
    refused.start()  # the same object: a refused start left nothing behind
    try:
        assert bodies(refused, "TopicTest", 0) == [b"kept"]
    finally:
        refused.shutdown()


def test_the_directory_is_free_again_after_a_crash(open_store: OpenStore, tmp_path: Path) -> None:
    first = open_store()
    first.put(make_msg(body=b"kept"))
    crash(first)  # closes every file, the lock's with them, as the kernel does for a killed process
    second = open_store()
    assert bodies(second, "TopicTest", 0) == [b"kept"]
