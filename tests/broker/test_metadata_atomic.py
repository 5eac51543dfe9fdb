"""The broker's metadata files (topics.json, consumerOffset.json, subscriptionGroup.json,
delayOffset.json) are replaced atomically: temp file written and fsynced, then renamed over the target."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from _support import run, running_broker

from cometmq.broker._json_config import load_json_config, save_json_config
from small_disk import fill, mounted_tmpfs

METADATA_FILES = ("topics.json", "consumerOffset.json", "subscriptionGroup.json", "delayOffset.json")
# ("fsync", path of the fd, its size then; 0 for a directory) or ("replace", source, target)
Call = tuple[str, str, int | str]


def spy_on_fsync_and_replace(monkeypatch: pytest.MonkeyPatch, under: Path) -> list[Call]:
    """Spies: record each os.fsync (path of the fd, its size then) and os.replace (source, target)
    under *under*, then call the real function."""
    calls: list[Call] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync_spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(under)):
            st = os.fstat(fd)
            calls.append(("fsync", path, st.st_size if stat.S_ISREG(st.st_mode) else 0))
        real_fsync(fd)

    def replace_spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(dst).startswith(str(under)):
            calls.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync_spy)
    monkeypatch.setattr(os, "replace", replace_spy)
    return calls


def test_every_metadata_file_is_written_to_a_fsynced_temp_file_then_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "config"
    calls: list[Call] = []

    async def scenario() -> None:
        nonlocal calls
        async with running_broker(tmp_path):
            # Stopping writes all four files; the store's own fsyncs are outside config_dir.
            calls = spy_on_fsync_and_replace(monkeypatch, config_dir)

    run(scenario())
    for name in METADATA_FILES:
        target = config_dir / name
        tmp = f"{target}.tmp"
        size = target.stat().st_size
        assert load_json_config(target) is not None
        mine = [c for c in calls if c[1] == tmp]
        # The whole content is in the temp file when it is fsynced, before the rename.
        assert mine == [("fsync", tmp, size), ("replace", tmp, str(target))], name
        # Then the directory, so that the rename itself survives a power loss.
        assert calls[calls.index(mine[-1]) + 1] == ("fsync", str(config_dir), 0), name


def test_a_failed_rename_leaves_the_previous_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    save_json_config(path, {"offsetTable": {"T@G": {"0": 2}}})
    before = path.read_bytes()

    def injected_failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """A fake: the disk error a rename can meet, which cannot be made real here."""
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", injected_failing_replace)
    with pytest.raises(OSError, match="No space left"):
        save_json_config(path, {"offsetTable": {"T@G": {"0": 3}}})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert load_json_config(path) == {"offsetTable": {"T@G": {"0": 2}}}
    # A later write succeeds over the temp file the failed one left.
    save_json_config(path, {"offsetTable": {"T@G": {"0": 4}}})
    assert load_json_config(path) == {"offsetTable": {"T@G": {"0": 4}}}


def test_a_write_on_a_full_disk_leaves_the_previous_file_whole_and_no_temp_file(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", 1) as disk:
        path = disk / "config" / "topics.json"
        save_json_config(path, {"topicConfigTable": {"T": {}}})
        before = path.read_bytes()
        fill(disk / "filler")
        with pytest.raises(OSError) as failed:
            save_json_config(path, {"topicConfigTable": {"T": {}, "U": {"x" * 8192: 1}}})
        assert failed.value.errno == errno.ENOSPC
        assert path.read_bytes() == before
        assert [p.name for p in path.parent.iterdir()] == ["topics.json"]  # no temp file left
