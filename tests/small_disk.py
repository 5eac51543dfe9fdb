"""A small real filesystem for the disk-full tests: a tmpfs mounted for one test."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of *size_mib* MiB at *mount_point* (created), unmounted after; the test is skipped where
    it cannot be mounted (not root, no mount permission in a container)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def fill(path: Path, leave: int = 0) -> None:
    """Write *path* until the filesystem has *leave* bytes free; with *leave* 0, until a write fails
    with ENOSPC."""
    with path.open("ab", buffering=0) as f:
        if leave:
            st = os.statvfs(path)
            remaining = st.f_bavail * st.f_frsize - leave
            while remaining > 0:
                remaining -= f.write(bytes(min(remaining, 1 << 20)))
            return
        for chunk in (bytes(1 << 20), bytes(4096)):
            try:
                while True:
                    f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
