"""Client unique message ids (property UNIQ_KEY), laid out as RocketMQ's Java client lays them out.

16 bytes, shown as 32 upper-case hex characters: client IPv4 address (4), low 16 bits of the pid (2),
a per-process random number standing in for Java's class-loader hash (4), milliseconds since the
start of the current month (4), a counter (2). Brokers and other clients treat the id as opaque; the
layout only matters to tools that read the time out of it.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time

from cometmq.protocol.record import hex_ids

_TAIL = struct.Struct(">IH")


def local_ip() -> str:
    """The address other hosts would see this client at (no packet is sent: a UDP socket is only
    connected to learn the route's source address); 127.0.0.1 on a machine without a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            return str(sock.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _month_start_ms(now_ms: int) -> int:
    now = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqueIdGenerator:
    """Makes UNIQ_KEY values; thread-safe (a blocking producer's sends make them on the callers'
    threads while its loop makes others)."""

    def __init__(self, ip: str | None = None) -> None:
        try:
            ip_bytes = socket.inet_aton(ip or local_ip())
        except OSError:
            ip_bytes = bytes(4)
        prefix = ip_bytes + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self._prefix_hex = prefix.hex().upper()
        self._counter = itertools.count(random.getrandbits(16))
        # next_ids takes a run of counters by replacing the counter: no next_id may come between.
        self._counter_lock = threading.Lock()
        self._month_start = 0
        self._next_month = 0

    def _ms_into_month(self) -> int:
        now = int(time.time() * 1000)
        if now >= self._next_month:
            self._month_start = _month_start_ms(now)
            self._next_month = _month_start_ms(self._month_start + 32 * 86_400_000)
        return (now - self._month_start) & 0xFFFFFFFF

    def next_id(self) -> str:
        with self._counter_lock:
            counter = next(self._counter)
        tail = _TAIL.pack(self._ms_into_month(), counter & 0xFFFF)
        return self._prefix_hex + tail.hex().upper()

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids at once (a batch): one clock read, consecutive counters; the same ids
        ``count`` calls of :meth:`next_id` within one millisecond would give, at a fraction of the cost."""
        elapsed = self._ms_into_month()
        with self._counter_lock:
            first = next(self._counter) & 0xFFFF
            self._counter = itertools.count(first + count)
        head = f"{self._prefix_hex}{elapsed:08X}"
        counters: range | list[int] = range(first, first + count)
        if first + count > 0x10000:
            counters = [n & 0xFFFF for n in counters]
        # One pack for all counters and one split, cheaper than cutting ids by slices
        # (`cometmq bench produce`).
        return hex_ids(head, struct.pack(f">{count}H", *counters), 2).split(",")
