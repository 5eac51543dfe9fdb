"""A store configured with nothing gets RocketMQ 4.x's defaults (MessageStoreConfig)."""

from __future__ import annotations

from pathlib import Path

from store_testlib import make_msg

from cometmq.store import FlushDiskType, MessageStore, StoreConfig


def test_a_default_store_config_holds_rocketmq_defaults(tmp_path: Path) -> None:
    cfg = StoreConfig(tmp_path)
    assert cfg.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert cfg.flush_interval_commitlog_ms == 500
    assert cfg.flush_commitlog_least_pages == 4
    assert cfg.sync_flush_timeout_ms == 5000
    assert cfg.mapped_file_size_commitlog == 1_073_741_824
    assert cfg.mapped_file_size_consume_queue == 300_000 * 20
    assert cfg.file_reserved_time == 72
    assert cfg.delete_when == "04"
    assert cfg.disk_max_used_space_ratio == 75
    assert cfg.disk_space_clean_forcibly_ratio == 85
    assert cfg.disk_space_warning_level_ratio == 90


def test_a_default_store_runs_with_those_defaults(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(tmp_path))
    store.start()
    try:
        store.put(make_msg(topic="Defaults", queue_id=0))
        # The segment files on disk (sparse, so cheap here): 1 GiB and 300 000 units of 20 bytes.
        assert (tmp_path / "commitlog" / f"{0:020d}").stat().st_size == 1 << 30
        assert (tmp_path / "consumequeue" / "Defaults" / "0" / f"{0:020d}").stat().st_size == 6_000_000
        flusher = store._flusher
        assert flusher is not None
        assert not flusher._sync_mode
        assert (flusher._interval_s, flusher._least_bytes, flusher._timeout_s) == (0.5, 4 * 4096, 5.0)
        guard = store._cleaner.guard
        # Expired files go above 75 %, any file above 85 %, writes are refused above 90 %.
        assert (guard.max_used, guard.force_level, guard.warning_level) == (0.75, 0.85, 0.90)
    finally:
        store.shutdown()
