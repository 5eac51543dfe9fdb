"""Helpers for the store tests (a module of its own so test files can import it by a unique name).

Small segment sizes make roll-overs happen within a few messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cometmq.protocol.record import decode_records, encode_host
from cometmq.store import GetStatus, MessageStore, MessageToStore, StoreConfig

BORN_HOST = encode_host("192.168.1.7", 53012)
STORE_HOST = encode_host("10.0.0.1", 10911)
SMALL_COMMITLOG = 64 * 1024
SMALL_CQ = 20 * 100


def make_msg(
    topic: str = "TopicTest",
    queue_id: int = 0,
    body: bytes = b"hello",
    properties: str = "",
    tags_code: int = 0,
    **kw: int,
) -> MessageToStore:
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        flag=kw.pop("flag", 0),
        body=body,
        properties=properties,
        sys_flag=kw.pop("sys_flag", 0),
        born_timestamp=kw.pop("born_timestamp", 1_700_000_000_000),
        born_host=BORN_HOST,
        store_host=STORE_HOST,
        tags_code=tags_code,
        **kw,
    )


def small_config(root: Path, **kw: object) -> StoreConfig:
    cfg = StoreConfig(
        root, mapped_file_size_commitlog=SMALL_COMMITLOG, mapped_file_size_consume_queue=SMALL_CQ
    )
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def cut_commit_log(root: Path, offset: int) -> None:
    """End the (``small_config``) commit log under *root* at *offset*, as if its tail never reached the
    disk: the segments after the one holding *offset* deleted, that one truncated there, and ``abort``
    left, as by the crash that lost the tail."""
    for path in (root / "commitlog").iterdir():
        if int(path.name) > offset:
            path.unlink()
    with (root / "commitlog" / f"{offset - offset % SMALL_COMMITLOG:020d}").open("r+b") as f:
        f.truncate(offset % SMALL_COMMITLOG)
    (root / "abort").touch()


def crash(store: MessageStore) -> None:
    """Simulate kill -9 in-process: stop the flush thread without the final flush and checkpoint,
    close the files, leave ``abort``. Everything written stays in the page cache, as after a real
    kill -9 (but not after a power loss)."""
    flusher = store._flusher
    assert flusher is not None
    flusher._stopping = True
    flusher._wake.set()
    assert flusher._flush_thread is not None
    flusher._flush_thread.join()
    store._flusher = None
    store._running = False
    store._close_files()


def bodies(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list[bytes]:
    """Every body in the queue from *start* on, read through get_messages (CRC-checked)."""
    out: list[bytes] = []
    offset = start
    while True:
        res = store.get_messages(topic, queue_id, offset, 32)
        if res.status is not GetStatus.FOUND:
            return out
        out += [r.body for r in decode_records(b"".join(res.buffers), check_crc=True)]
        offset = res.next_begin_offset


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run *script* (``python -c``) in a child process that can import this module: for what applies
    to a whole process, such as RLIMIT_FSIZE."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=60
    )
