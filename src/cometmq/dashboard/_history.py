"""What the dashboard's charts show: figures sampled from the cluster every few seconds (a group's lag
every minute unless its page is open) and kept for the last hour, in the dashboard's memory (a
restart starts them afresh).

Sampling runs on the server, not in the browser, so a chart opened at any time shows the whole hour,
and the cluster is asked once per interval however many browsers look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from cometmq.client import AdminClient
from cometmq.errors import CometMQError

log = logging.getLogger("cometmq.dashboard")

DEFAULT_INTERVAL_S = 5.0
KEEP_S = 3600.0
# How often the list of consumer groups is read again and every listed group's lag sampled; a group
# whose page or chart was opened in the last FOLLOW_S seconds is sampled every interval instead.
GROUP_LIST_INTERVAL_S = 60.0
FOLLOW_S = 300.0
MAX_GROUPS = 1000  # the most groups sampled from the list, and the most followed
_GROUP_CONCURRENCY = 8


class Series:
    """Samples of a few named figures, the newest last, for the last ``keep_s`` seconds."""

    def __init__(self, names: Iterable[str], keep_s: float = KEEP_S) -> None:
        self.keep_s = keep_s
        self.times: deque[float] = deque()
        self.columns: dict[str, deque[float | None]] = {name: deque() for name in names}

    def add(self, at: float, values: dict[str, float | None]) -> None:
        self.times.append(at)
        for name, column in self.columns.items():
            column.append(values.get(name))
        while self.times and self.times[0] < at - self.keep_s:
            self.times.popleft()
            for column in self.columns.values():
                column.popleft()

    def to_json(self) -> dict[str, Any]:
        """``{"t": [unix seconds...], name: [value or null...], ...}``: uPlot's data, column by column."""
        return {"t": list(self.times), **{name: list(column) for name, column in self.columns.items()}}


def _rate(info: dict[str, str], *keys: str) -> float | None:
    """The first of ``keys`` in a broker's runtime info as messages per second: RocketMQ writes a
    rate as ``"12.5 3.1 0.9"`` (over the last 10 s, minute, hour); the first figure is taken."""
    for key in keys:
        text = info.get(key, "").split()
        if text:
            try:
                return float(text[0])
            except ValueError:
                return None
    return None


class Sampler:
    """Samples every broker's in and out rates (putTps, getTransferedTps of its runtime info) every
    ``interval_s`` seconds while :meth:`run` runs, and consumer groups' total lag: every listed group's
    every ``group_list_interval_s`` seconds, a followed group's (:meth:`follow`) every interval."""

    def __init__(
        self,
        admin: AdminClient,
        interval_s: float = DEFAULT_INTERVAL_S,
        keep_s: float = KEEP_S,
        group_list_interval_s: float = GROUP_LIST_INTERVAL_S,
    ):
        self.admin = admin
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.group_list_interval_s = group_list_interval_s
        self.broker_rates: dict[str, Series] = {}  # "brokerName addr" → in, out
        self.group_lag: dict[str, Series] = {}  # group → lag
        self._groups: dict[str, str] = {}  # listed group → its cluster
        self.followed: dict[str, tuple[str, float]] = {}  # group → its cluster, when last opened
        self._groups_read_at = float("-inf")
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Sample until :meth:`stop`. A failed sample is logged (once while it keeps failing the same
        way; an unexpected failure with its traceback) and the next one is tried all the same."""
        failure = ""
        while not self._stopping.is_set():
            try:
                await self.sample()
                if failure:
                    log.info("dashboard: sampling the cluster again")
                failure = ""
            except (CometMQError, OSError) as exc:
                text = str(exc) or type(exc).__name__
                if text != failure:
                    log.info("dashboard: cannot sample the cluster: %s", text)
                failure = text
            except Exception as exc:  # a bug must not end the charts for good
                text = type(exc).__name__
                if text != failure:
                    log.exception("dashboard: sampling the cluster failed")
                failure = text
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)

    def stop(self) -> None:
        """End :meth:`run` after the sample in progress. Cancelling its task ends it sooner, but a
        cancellation can be lost (Python 3.11's wait_for returns a result that arrives as it is
        cancelled), so the loop also watches this flag."""
        self._stopping.set()

    async def sample(self) -> None:
        """Take one sample of every figure."""
        info = await self.admin.cluster_info()
        now = time.time()
        brokers = [
            (f"{broker.broker_name} {addr}", addr)
            for broker in info.broker_addr_table.values()
            for _, addr in sorted(broker.broker_addrs.items())
        ]
        answers = await asyncio.gather(
            *(self.admin.broker_runtime_info(addr) for _, addr in brokers), return_exceptions=True
        )
        for (label, _), answer in zip(brokers, answers, strict=True):
            values: dict[str, float | None] = {"in": None, "out": None}
            if isinstance(answer, dict):
                # RocketMQ spells it getTransferedTps; CometMQ sends that and the right spelling.
                values = {
                    "in": _rate(answer, "putTps"),
                    "out": _rate(answer, "getTransferedTps", "getTransferredTps"),
                }
            self._series(self.broker_rates, label, ("in", "out")).add(now, values)
        for gone in set(self.broker_rates) - {label for label, _ in brokers}:
            del self.broker_rates[gone]
        for group, (_, opened_at) in list(self.followed.items()):
            if opened_at < now - FOLLOW_S:
                del self.followed[group]
        sampled = {group: cluster for group, (cluster, _) in self.followed.items()}
        if now - self._groups_read_at >= self.group_list_interval_s:
            await self._read_groups(sorted(info.cluster_addr_table))
            self._groups_read_at = now
            sampled = self._groups | sampled
        await self._sample_lag(now, sampled)

    def follow(self, group: str, cluster: str) -> None:
        """Sample ``group`` of ``cluster`` every interval for the next FOLLOW_S seconds (its page or
        chart is open); beyond MAX_GROUPS followed groups only those already followed are kept on."""
        if group in self.followed or len(self.followed) < MAX_GROUPS:
            self.followed[group] = (cluster, time.time())

    def keep_following(self, group: str) -> None:
        """Sample ``group`` every interval for FOLLOW_S seconds more, if it is followed."""
        if group in self.followed:
            self.follow(group, self.followed[group][0])

    def _series(self, table: dict[str, Series], key: str, names: tuple[str, ...]) -> Series:
        series = table.get(key)
        if series is None:
            series = table[key] = Series(names, self.keep_s)
        return series

    async def _read_groups(self, clusters: list[str]) -> None:
        groups: dict[str, str] = {}
        for cluster in clusters:
            try:
                for group in await self.admin.list_groups(cluster):
                    groups.setdefault(group, cluster)
            except CometMQError as exc:  # a cluster without a master: no group to sample there
                log.info("dashboard: cannot list the groups of cluster %s: %s", cluster, exc)
        self._groups = dict(sorted(groups.items())[:MAX_GROUPS])
        for gone in set(self.group_lag) - set(self._groups) - set(self.followed):
            del self.group_lag[gone]

    async def _sample_lag(self, now: float, groups: dict[str, str]) -> None:
        limit = asyncio.Semaphore(_GROUP_CONCURRENCY)

        async def lag_of(group: str, cluster: str) -> None:
            async with limit:
                try:
                    progress = await self.admin.consume_progress(group, cluster=cluster)
                except CometMQError as exc:
                    log.debug("dashboard: no progress of group %s: %s", group, exc)
                    return
            self._series(self.group_lag, group, ("lag",)).add(now, {"lag": float(progress.total_lag)})

        await asyncio.gather(*(lag_of(group, cluster) for group, cluster in groups.items()))
