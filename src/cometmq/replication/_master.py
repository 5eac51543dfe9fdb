"""The master's side of the HA link: the server on haListenPort and one ``SlaveLink`` per slave."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging

from cometmq.errors import ProtocolError
from cometmq.protocol.ha import ReportDecoder, encode_chunk_header
from cometmq.protocol.ha_status import HAConnectionRuntimeInfo, HARuntimeInfo
from cometmq.replication._config import ReplicationConfig
from cometmq.replication._rate import ByteRate
from cometmq.replication._transfer import GroupTransfer
from cometmq.store import MessageStore, PutStatus, ReplicaOffsetError

log = logging.getLogger("cometmq.replication")

_READ_SIZE = 64 * 1024
_WRITE_SIZE = 1024 * 1024


class _State(enum.Enum):
    CATCHING_UP = "catching up"
    CAUGHT_UP = "caught up"
    BEHIND = "behind"


class HAServer:
    """Streams the commit log to the slaves that connect, and answers SYNC_MASTER's waits."""

    def __init__(self, store: MessageStore, config: ReplicationConfig) -> None:
        self._store = store
        self._config = config
        self._server: asyncio.Server | None = None
        self._links: set[SlaveLink] = set()
        self._serving: set[asyncio.Task[object]] = set()  # one per link, awaited by stop()
        # Links waiting for new commit-log bytes; the store's arrival hook wakes them (and only them).
        self.idle: set[SlaveLink] = set()
        self._transfer = GroupTransfer(
            config.slave_timeout_ms, config.max_gap_not_in_sync, config.transfer_batch_size
        )
        self._listening = False
        # (slave host, offset) pairs this master could not serve, logged once: such a slave reconnects
        # every few seconds asking for the same offset until a person acts.
        self.refused_starts: set[tuple[str, int]] = set()

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return 0
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str, port: int) -> None:
        """Listen on *host*:*port* (0: a port the OS picks, see ``port``)."""
        self._transfer.start(asyncio.get_running_loop())
        if not self._listening:
            self._store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._server = await asyncio.start_server(self._serve, host, port)
        log.info("HA server listening on %s:%d", host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        serving = list(self._serving)
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        self._transfer.close()

    def when_replicated(self, end: int) -> asyncio.Future[PutStatus]:
        """Group transfer: PUT_OK once a slave holds the commit log up to *end*; FLUSH_SLAVE_TIMEOUT
        after slaveTimeout; SLAVE_NOT_AVAILABLE at once with no slave connected or one too far behind."""
        return self._transfer.when_replicated(end, len(self._links))

    def runtime_info(self) -> HARuntimeInfo:
        end = self._store.replica_end()
        max_gap = self._config.max_gap_not_in_sync
        connections = [
            HAConnectionRuntimeInfo(
                addr=link.addr,
                slave_ack_offset=link.ack_offset,
                diff=end - link.ack_offset,
                in_sync=end - link.ack_offset < max_gap,
                transferred_byte_in_second=link.rate.per_second(),
                transfer_from_where=link.next_offset,
            )
            for link in self._links
        ]
        return HARuntimeInfo(
            master=True,
            master_commit_log_max_offset=end,
            in_sync_slave_nums=sum(c.in_sync for c in connections),
            ha_connection_info=connections,
        )

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        # Runs after every put: one truth test while no link is idle.
        idle = self.idle
        if idle:
            for link in idle:
                link.wake.set()
            idle.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = SlaveLink(self, self._store, self._config, reader, writer)
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        # A slave counts from its connection on, before its first report (RocketMQ's connectionCount).
        self._links.add(link)
        log.info("slave %s connected", link.addr)
        try:
            await link.run()
        except asyncio.CancelledError:
            # stop() cancelled it. A start_server handler that ends cancelled makes Python 3.11's
            # streams log "Exception in callback" (its done-callback asks the task for its exception).
            pass
        finally:
            self._serving.discard(task)
            self._links.discard(link)
            self.idle.discard(link)
            link.close()
            log.info("slave %s disconnected (acknowledged offset %d)", link.addr, link.ack_offset)

    def shipped(self) -> None:
        """A link wrote everything the commit log had (group transfer: a new group for what follows)."""
        self._transfer.shipped()

    def acknowledged(self, link: SlaveLink, offset: int) -> None:
        self._transfer.acknowledge(offset)
        gap = self._store.replica_end() - offset
        if gap >= self._config.max_gap_not_in_sync:
            if link.state is not _State.BEHIND:
                link.state = _State.BEHIND
                log.info(
                    "slave %s fell behind: %d bytes behind, haMaxGapNotInSync is %d",
                    link.addr,
                    gap,
                    self._config.max_gap_not_in_sync,
                )
        elif link.state is not _State.CAUGHT_UP and 0 <= link.drained_to <= offset:
            link.state = _State.CAUGHT_UP
            log.info("slave %s caught up at commit-log offset %d", link.addr, offset)


class SlaveLink:
    """One slave's connection: its reports in, the commit log out."""

    def __init__(
        self,
        server: HAServer,
        store: MessageStore,
        config: ReplicationConfig,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._server = server
        self._store = store
        self._config = config
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.request_offset = -1  # the first report: where the slave asked to start
        self.ack_offset = 0
        self.next_offset = 0  # where the next chunk starts
        self.drained_to = -1  # where the sender last found nothing more to send
        self.state = _State.CATCHING_UP
        self.rate = ByteRate()
        self.wake = asyncio.Event()
        self._first_report = asyncio.Event()

    async def run(self) -> None:
        """Serve the slave until the link ends (either side closes, housekeeping, a bad report)."""
        reading = asyncio.ensure_future(self._read_reports())
        sending = asyncio.ensure_future(self._send_chunks())
        try:
            done, _ = await asyncio.wait((reading, sending), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reading, sending):
                task.cancel()
            await asyncio.gather(reading, sending, return_exceptions=True)
        for task in done:
            exc = task.exception()
            if isinstance(exc, ProtocolError):
                log.warning("slave %s sent bytes that are not offset reports: %s", self.addr, exc)
            elif isinstance(exc, OSError):
                log.info("slave %s: %s", self.addr, exc)
            elif exc is not None:
                log.error("slave %s: the HA link failed", self.addr, exc_info=exc)

    def close(self) -> None:
        self._writer.close()

    async def _read_reports(self) -> None:
        decoder = ReportDecoder()
        quiet_s = self._config.housekeeping_interval_ms / 1000
        while True:
            try:
                async with asyncio.timeout(quiet_s):
                    data = await self._reader.read(_READ_SIZE)
            except TimeoutError:
                log.info(
                    "slave %s sent nothing for %d ms (haHousekeepingInterval): closing its link",
                    self.addr,
                    self._config.housekeeping_interval_ms,
                )
                return
            if not data:
                return
            offset = decoder.feed(data)
            if offset is None:
                continue
            end = self._store.replica_end()
            if offset > end:
                log.error(
                    "slave %s reports commit-log offset %d, beyond this master's end %d: the slave's log "
                    "is longer than the master's (was it a slave of another master, or did this master "
                    "lose data?); closing its link",
                    self.addr,
                    offset,
                    end,
                )
                # An empty chunk at the master's end tells a CometMQ slave why (a RocketMQ slave closes
                # on the offset mismatch, as it would anyway).
                self._writer.write(encode_chunk_header(end, 0))
                with contextlib.suppress(OSError):
                    await self._writer.drain()
                return
            if self.request_offset < 0:
                self.request_offset = offset
                self._first_report.set()
            self.ack_offset = offset
            self._server.acknowledged(self, offset)

    async def _send_chunks(self) -> None:
        await self._first_report.wait()
        store = self._store
        # RocketMQ: an empty slave starts at the master's last segment, not at its first.
        next_offset = store.ha_start_for_empty_slave() if self.request_offset == 0 else self.request_offset
        self.next_offset = next_offset
        batch = self._config.transfer_batch_size
        heartbeat_s = self._config.heartbeat_interval_ms / 1000
        writer = self._writer
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        while True:
            # The chunks available, up to _WRITE_SIZE, in one write: one send for several chunks of
            # haTransferBatchSize (bench/replication.py, SYNC_MASTER's batches and the new slave's copy).
            parts: list[bytes | memoryview] = []
            size = 0
            try:
                while size < _WRITE_SIZE:
                    view = store.ha_readable(next_offset + size, batch)
                    chunk = len(view)
                    if chunk:
                        parts += (encode_chunk_header(next_offset + size, chunk), view)
                    del view
                    if not chunk:
                        break
                    size += chunk
            except ReplicaOffsetError as exc:
                if not parts:  # else the chunks before it go first, and the next round meets it again
                    refused = (self.addr.rpartition(":")[0], next_offset + size)
                    if refused not in self._server.refused_starts:
                        self._server.refused_starts.add(refused)
                        log.error(
                            "cannot send slave %s the commit log from offset %d: %s; closing its link (a "
                            "slave whose offset this master no longer holds copies again from an empty "
                            "data directory)",
                            self.addr,
                            next_offset + size,
                            exc,
                        )
                    return
            if size:
                writer.writelines(parts)
                parts.clear()  # the views pin commit-log mappings: dropped as soon as they are written
                if size < _WRITE_SIZE:
                    self._server.shipped()
                next_offset += size
                self.next_offset = next_offset
                self.drained_to = -1
                self.rate.total += size
                last_write = loop.time()
                await writer.drain()
                continue
            self.drained_to = next_offset
            wait = last_write + heartbeat_s - loop.time()
            if wait <= 0:
                writer.write(encode_chunk_header(next_offset, 0))  # heartbeat
                last_write = loop.time()
                await writer.drain()
                continue
            self.wake.clear()
            idle = self._server.idle
            idle.add(self)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self.wake.wait()
            idle.discard(self)
