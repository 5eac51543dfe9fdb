"""MessageStore.put_together: single messages of any topics and queues appended in one write, all or
nothing, and whole or absent after a crash."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import bodies, crash, make_msg, run_child

from cometmq.protocol.record import decode_records
from cometmq.protocol.taghash import java_string_hash
from cometmq.store import MessageStore, PutStatus, _mappedfile

OpenStore = Callable[..., MessageStore]

_PREPARED = 0x4


def test_mixed_topics_are_stored_as_put_would_store_each(open_store: OpenStore) -> None:
    store = open_store()
    store.put(make_msg("A", 0, b"before"))
    arrivals: list[tuple[str, int, int, int]] = []
    store.add_arrival_listener(lambda *args: arrivals.append(args))
    tag = java_string_hash("t")
    group = [
        make_msg("A", 0, b"a1", properties="TAGS\x01t\x02UNIQ_KEY\x01U1", tags_code=tag, uniq_key="U1"),
        make_msg("SCHEDULE_TOPIC_XXXX", 2, b"delayed", properties="DELAY\x013"),
        make_msg("Half", 0, b"prepared", sys_flag=_PREPARED),  # no consume-queue unit
        make_msg("B", 1, b"b1"),
        make_msg("A", 0, b"a2"),
    ]
    start = store.commitlog_max_offset
    results = store.put_together(group)

    assert [r.status for r in results] == [PutStatus.PUT_OK] * 5
    assert [r.count for r in results] == [1] * 5
    # Consecutive records, in order, each with its own offset message id.
    assert results[0].commitlog_offset == start
    for before, after in itertools.pairwise(results):
        assert after.commitlog_offset == before.commitlog_end_offset
    assert store.commitlog_max_offset == results[-1].commitlog_end_offset
    assert len({r.store_timestamp for r in results}) == 1
    for result in results:
        assert result.msg_id_text.endswith(f"{result.commitlog_offset:016X}")
    # Queue offsets: consecutive within a queue, 0 for the record without a unit.
    assert [r.queue_offset for r in results] == [1, 0, 0, 0, 2]
    assert bodies(store, "A", 0) == [b"before", b"a1", b"a2"]
    assert bodies(store, "B", 1) == [b"b1"]
    assert store.max_offset("Half", 0) == 0
    view = store.message_at(results[2].commitlog_offset)
    assert view is not None and decode_records(view)[0].body == b"prepared"
    # Tags codes: the message's own, and a delay level's delivery time in the schedule topic.
    unit = store.queue_unit("A", 0, 1)
    assert unit is not None and unit[0] == results[0].commitlog_offset and unit[2] == tag
    unit = store.queue_unit("SCHEDULE_TOPIC_XXXX", 2, 0)
    assert unit is not None and unit[2] == results[1].store_timestamp + 10_000  # level 3 = 10s
    # Indexed as a put is; one arrival per queue and distinct tags code.
    found = store.query_messages("A", "U1", 10, 0, 1 << 62, unique=True)
    assert [r.body for r in decode_records(b"".join(found.buffers))] == [b"a1"]
    assert sorted(arrivals) == sorted(
        [("A", 0, 3, tag), ("A", 0, 3, 0), ("SCHEDULE_TOPIC_XXXX", 2, 1, unit[2]), ("B", 1, 1, 0)]
    )


def test_the_group_survives_a_restart_and_a_crash(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    results = store.put_together([make_msg("A", 0, b"x"), make_msg("B", 0, b"y"), make_msg("A", 0, b"z")])
    assert all(r.status is PutStatus.PUT_OK for r in results)
    crash(store)
    store = open_store()
    assert bodies(store, "A", 0) == [b"x", b"z"]
    assert bodies(store, "B", 0) == [b"y"]
    assert store.commitlog_max_offset == results[-1].commitlog_end_offset


def test_one_refused_message_refuses_the_whole_group(open_store: OpenStore) -> None:
    store = open_store()
    end = store.commitlog_max_offset
    too_big = b"x" * (4 * 1024 * 1024 + 1)
    for bad, status in [
        (make_msg("B", 0, too_big), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("B", -1), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("bad/topic"), PutStatus.MESSAGE_ILLEGAL),
        (make_msg("B", 0, properties="K\x01" + "v" * 40_000), PutStatus.PROPERTIES_SIZE_EXCEEDED),
    ]:
        results = store.put_together([make_msg("A", 0, b"ok"), bad, make_msg("C", 0)])
        assert [r.status for r in results] == [status] * 3
        assert all(r.commitlog_offset == -1 and not r.msg_id_text for r in results)
    assert store.commitlog_max_offset == end
    assert store.max_offset("A", 0) == 0 and store.max_offset("C", 0) == 0
    assert store.put_together([]) == []


def test_a_group_larger_than_a_segment_is_refused(open_store: OpenStore) -> None:
    store = open_store()
    group = [make_msg("A", 0, b"x" * 40_000), make_msg("B", 0, b"y" * 40_000)]  # 64 KiB segments
    assert [r.status for r in store.put_together(group)] == [PutStatus.MESSAGE_ILLEGAL] * 2
    assert store.commitlog_max_offset == 0


def test_a_group_that_does_not_fit_the_segment_rolls_whole(open_store: OpenStore) -> None:
    store = open_store()
    while store.commitlog_max_offset < 50_000:
        store.put(make_msg("A", 0, b"f" * 1000))
    results = store.put_together([make_msg("A", 0, b"x" * 10_000), make_msg("B", 0, b"y" * 10_000)])
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
    assert results[0].commitlog_offset == 64 * 1024  # both in the next segment
    assert bodies(store, "B", 0) == [b"y" * 10_000]


def test_a_full_disk_refuses_the_whole_group(open_store: OpenStore) -> None:
    usage = [0.5]
    store = open_store(disk_usage_probe=lambda path: usage[0])
    store.put(make_msg("A", 0, b"before"))
    usage[0] = 0.99
    store._check_disk()  # the guard looks at the disk between puts: make it look now
    results = store.put_together([make_msg("A", 0, b"x"), make_msg("B", 0, b"y")])
    assert [r.status for r in results] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert bodies(store, "A", 0) == [b"before"] and store.max_offset("B", 0) == 0


_WRITE_FAILS_PART_WAY = """
import json, resource, signal, sys
from pathlib import Path
from store_testlib import bodies, crash, make_msg, small_config
from cometmq.store import FlushDiskType, MessageStore

def group(tag):
    return [make_msg("A" if i % 2 else "B", 0, f"{tag}{i}".encode() * 1000) for i in range(4)]

# SYNC_FLUSH: the group is written with pwrite (under ASYNC_FLUSH, into reserved blocks through the
# mapping, where no write can be cut short).
store = MessageStore(small_config(Path(sys.argv[1]), flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.start()
statuses = [[r.status.name for r in store.put_together(group("a"))]]
# Writes past 12 KiB now fail part way, as on a disk that fills up during the write.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, hard))
statuses.append([r.status.name for r in store.put_together(group("b"))])
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
crash(store)  # as kill -9: b's first records, written whole before the cut, must not come back
store = MessageStore(small_config(Path(sys.argv[1]), flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.start()
def stored():
    return [b.decode()[:2] for topic in ("A", "B") for b in bodies(store, topic, 0)]
after_crash = stored()
statuses.append([r.status.name for r in store.put_together(group("c"))])
print(json.dumps({"statuses": statuses, "after_crash": after_crash, "stored": stored()}))
store.shutdown()
"""


def test_a_group_whose_write_fails_part_way_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """A real short write (RLIMIT_FSIZE in a child process): the group is refused as on a full
    disk, and nothing of it comes back after a crash, although its first records were written."""
    done = run_child(_WRITE_FAILS_PART_WAY, str(tmp_path / "store"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statuses"] == [["PUT_OK"] * 4, ["SERVICE_NOT_AVAILABLE"] * 4, ["PUT_OK"] * 4]
    assert result["after_crash"] == ["a1", "a3", "a0", "a2"]
    assert result["stored"] == ["a1", "a3", "c1", "c3", "a0", "a2", "c0", "c2"]


def test_under_async_flush_a_group_is_written_through_the_mapping(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a single put: no write system call."""
    store = open_store()

    def no_pwrite(self: object, pos: int, data: object) -> None:
        raise AssertionError("put_together wrote with pwrite")

    monkeypatch.setattr(_mappedfile.MappedFile, "write_at", no_pwrite)
    results = store.put_together([make_msg("A", 0, b"one"), make_msg("B", 0, b"two")])
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
    assert bodies(store, "A", 0) == [b"one"] and bodies(store, "B", 0) == [b"two"]


_KILLED_BETWEEN_THE_WRITES = """
import os, signal, sys
from pathlib import Path
from store_testlib import make_msg, small_config
from cometmq.store import FlushDiskType, MessageStore, _mappedfile

# SYNC_FLUSH: the records go with pwrite, the first size field through the mapping after them.
store = MessageStore(small_config(Path(sys.argv[1]), flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.start()
store.put_together([make_msg("A", 0, b"kept"), make_msg("B", 0, b"kept")])
write_at = _mappedfile.MappedFile.write_at

def write_then_die(self, pos, data):
    write_at(self, pos, data)  # the group's records are in; its first size field is not
    os.kill(os.getpid(), signal.SIGKILL)

_mappedfile.MappedFile.write_at = write_then_die
store.put_together([make_msg("A", 0, b"lost"), make_msg("B", 0, b"lost")])
"""


def test_killed_between_the_records_and_the_first_size_the_group_is_absent(
    tmp_path: Path, open_store: OpenStore
) -> None:
    done = run_child(_KILLED_BETWEEN_THE_WRITES, str(tmp_path / "store"))
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = open_store()
    assert bodies(store, "A", 0) == [b"kept"] and bodies(store, "B", 0) == [b"kept"]
    # The space is reused by the next group.
    results = store.put_together([make_msg("A", 0, b"next"), make_msg("B", 0, b"next")])
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
    assert bodies(store, "A", 0) == [b"kept", b"next"] and bodies(store, "B", 0) == [b"kept", b"next"]


_APPENDING_GROUPS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {testdir!r})
    from store_testlib import make_msg, small_config
    from cometmq.store import MessageStore

    store = MessageStore(small_config(Path({root!r})))
    store.start()
    n = 0
    while True:
        # Three topics, one of them twice, bodies of different sizes: groups cross pages and segments.
        group = [
            make_msg("A", 0, b"%d-0" % n + b"a" * (n % 7) * 300),
            make_msg("B", 1, b"%d-1" % n + b"b" * (n % 5) * 900),
            make_msg("A", 0, b"%d-2" % n),
            make_msg("C", 0, b"%d-3" % n, sys_flag=0x4),
        ]
        assert all(r.status.name == "PUT_OK" for r in store.put_together(group))
        print(n, flush=True)
        n += 1
    """
)


def test_kill_9_keeps_whole_groups(tmp_path: Path, open_store: OpenStore) -> None:
    """A process appending groups is killed at some moment of its loop: every group recovery keeps
    is complete, and every group it acknowledged is kept."""
    root = tmp_path / "store"
    code = _APPENDING_GROUPS.format(testdir=str(Path(__file__).parent), root=str(root))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        for _ in range(300):
            acknowledged = int(child.stdout.readline())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    store = open_store()
    a = [b.split(b"-")[0] + b"-" + b.split(b"-")[1][:1] for b in bodies(store, "A", 0)]
    b = [body.split(b"-")[0] for body in bodies(store, "B", 1)]
    groups = len(b)
    assert groups > acknowledged
    assert b == [b"%d" % n for n in range(groups)]
    assert a == [b"%d-%d" % (n, part) for n in range(groups) for part in (0, 2)]
    assert store.max_offset("C", 0) == 0
