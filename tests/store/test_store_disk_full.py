"""A store on a filesystem that is full (a small tmpfs), with files an earlier run left sparse:
nothing is ever stored into a hole of a mapping (a SIGBUS, which kills the process), the puts that
find no room are refused as SERVICE_NOT_AVAILABLE, and they succeed again once there is room."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_testlib import bodies, make_msg, run_child, small_config

from cometmq.store import MessageStore, PutStatus, _mappedfile
from small_disk import mounted_tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", 8) as mount_point:
        yield mount_point


_SPARSE_FILES_ON_A_FULL_DISK = """
import json, os, sys, time
from pathlib import Path
from small_disk import fill
from store_testlib import bodies, make_msg, small_config
from cometmq.store import MessageStore

root, filler, cq_file_size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
config = small_config(
    root, mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=cq_file_size, max_index_num=1000
)
# The guard has not seen the disk fill up (it looks between puts, and another process filled it):
# the puts themselves meet the full disk.
config.disk_usage_probe = lambda path: 0.5
store = MessageStore(config)
store.start()
before = [store.put(make_msg(body=b"before %d" % i)).status.name for i in range(10)]
end = store.commitlog_max_offset
store.shutdown()
# What an older version left: files whose tails are holes.
for path, used in ((root / "commitlog" / f"{0:020d}", end),
                   (root / "consumequeue" / "TopicTest" / "0" / f"{0:020d}", 10 * 20)):
    size = path.stat().st_size
    os.truncate(path, -(-used // 4096) * 4096)
    os.truncate(path, size)
fill(filler)
store = MessageStore(config)
store.start()
full = [store.put(make_msg(body=b"x" * 5000)).status.name for _ in range(3)]
refusal = store.write_refusal
filler.unlink()
deadline = time.monotonic() + 30
while store.put(make_msg(body=b"after")).status.name != "PUT_OK":
    assert time.monotonic() < deadline, "writes did not resume"
    time.sleep(0.02)
stored = bodies(store, "TopicTest", 0)
store.shutdown()
print(json.dumps({"before": before, "full": full, "refusal": refusal,
                  "stored": [b.decode()[:8] for b in stored]}))
"""


@pytest.mark.parametrize(
    "cq_file_size",
    [
        # A one-page consume-queue file has no hole: the commit log's reservation is what fails.
        20 * 100,
        # Five pages: the queue cannot reserve the blocks of its next units, and refuses first.
        20 * 1000,
    ],
)
def test_files_left_sparse_are_never_written_through_their_mapping_on_a_full_disk(
    small_disk: Path, cq_file_size: int
) -> None:
    store, filler = small_disk / "store", small_disk / "filler"
    done = run_child(_SPARSE_FILES_ON_A_FULL_DISK, str(store), str(filler), str(cq_file_size))
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7: killed by SIGBUS
    result = json.loads(done.stdout)
    assert result["before"] == ["PUT_OK"] * 10
    assert result["full"] == ["SERVICE_NOT_AVAILABLE"] * 3
    assert result["refusal"].startswith("disk full: 50.0% of ")
    assert result["refusal"].endswith("; no room for the store files to grow")
    assert result["stored"] == [f"before {i}" for i in range(10)] + ["after"]
    assert done.stderr.count("refusing writes") == 1, done.stderr


def test_a_filesystem_that_cannot_reserve_blocks_still_stores_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """posix_fallocate without a fallback (musl's) on a filesystem without fallocate: the files
    are only sized, sparse, and everything works as on such a filesystem; said once in the log."""

    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    monkeypatch.setattr(_mappedfile, "_cannot_reserve_logged", False)
    store = MessageStore(small_config(tmp_path / "store"))
    store.start()
    try:
        expected = [b"%05d" % i * 100 for i in range(200)]  # several segments and queue files
        for body in expected:
            assert store.put(make_msg(body=body)).status is PutStatus.PUT_OK
        assert bodies(store, "TopicTest", 0) == expected
    finally:
        store.shutdown()
    assert caplog.text.count("cannot reserve blocks for store files") == 1
