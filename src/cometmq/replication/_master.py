"""The master's side of the HA link: the server on haListenPort and one ``SlaveLink`` per slave.

In failover mode the master also keeps the in-sync set: ``set_in_sync`` gives it the set as committed
in etcd, which a SYNC_MASTER send waits for. A slave that identified itself with a hello and caught up
joins the wait at once, with a barrier (this master's end then): it is offered as a candidate
(``in_sync_candidates``) only once its acknowledgement reached the barrier, so a member holds every
message acknowledged before it joined and, being waited for since, every one after. The confirmed
offset is what every member waited for holds (RocketMQ 5's confirmOffset): reads stay below it.

With ``verify_slave`` (the master's access control on), a slave must answer the challenge that follows
its hello before it is served; a slave without a hello cannot, and is refused. With ``tls`` the HA
port follows the server's TLS mode, as the broker's remoting port does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import secrets
import socket
import time
from collections.abc import Callable
from typing import Final

from cometmq.errors import ProtocolError
from cometmq.protocol.ha import (
    AUTH_NONCE_SIZE,
    AuthDecoder,
    Hello,
    HelloDecoder,
    ReportDecoder,
    auth_content,
    encode_auth_challenge,
    encode_chunk_header,
    encode_confirmed_chunk_header,
    encode_hello_answer,
)
from cometmq.protocol.ha_status import HAConnectionRuntimeInfo, HARuntimeInfo
from cometmq.remoting import PeerLogLimit
from cometmq.remoting.tls import HANDSHAKE_TIMEOUT_S, TlsListener, TlsMode, TlsSettings, handshake_failure
from cometmq.replication._config import ReplicationConfig
from cometmq.replication._rate import ByteRate
from cometmq.replication._transfer import GroupTransfer
from cometmq.store import MessageStore, PutStatus, ReplicaOffsetError

log = logging.getLogger("cometmq.replication")

_READ_SIZE = 64 * 1024
_WRITE_SIZE = 1024 * 1024

# The most connections the HA port holds at once (slaves, and connections not yet known to be one): a
# master has a few slaves, and anyone who can reach the port may connect.
MAX_HA_CONNECTIONS: Final = 64
# How often a line about one peer host is logged: a refused slave reconnects every few seconds.
HOST_LOG_INTERVAL_S: Final = 60.0

# The ends shipped and not yet acknowledged that a link remembers: the last of each 1/_SHIPPED_GRAINS of
# haMaxTimeSlaveNotCatchup, for two windows at most (a catch-up older than the window counts for
# nothing). A slave is then seen caught up a grain late at worst, whatever the rate of sends.
_SHIPPED_GRAINS: Final = 256

# Checks a slave's AUTH: (the slave's address, its access key, the content it signed, its signature) →
# None if it may replicate, else why not.
SlaveVerifier = Callable[[str, str, bytes, bytes], str | None]


class _State(enum.Enum):
    CATCHING_UP = "catching up"
    CAUGHT_UP = "caught up"
    BEHIND = "behind"


class HAServer:
    """Streams the commit log to the slaves that connect, and answers SYNC_MASTER's waits.
    *verify_slave* checks a slave's credentials (None: access control off); *tls* gives the server's
    ``tls.server.*`` settings. Connections past *max_connections* are closed at once."""

    def __init__(
        self,
        store: MessageStore,
        config: ReplicationConfig,
        *,
        verify_slave: SlaveVerifier | None = None,
        tls: TlsSettings | None = None,
        max_connections: int = MAX_HA_CONNECTIONS,
    ) -> None:
        self._store = store
        self._max_connections = max_connections
        self._last_full_warning = -HOST_LOG_INTERVAL_S
        self._config = config
        self.verify_slave = verify_slave
        self._tls_mode = tls.mode if tls is not None else TlsMode.DISABLED
        self._ssl_context = tls.server_context() if tls is not None else None
        self._tls_listener: TlsListener | None = None
        # The hosts of refused slaves, logged once a minute at most: a refused slave retries every 5 s.
        self.refused_slaves = PeerLogLimit(HOST_LOG_INTERVAL_S)
        self._server: asyncio.Server | None = None
        self._links: set[SlaveLink] = set()
        self._serving: set[asyncio.Task[object]] = set()  # one per link, awaited by stop()
        # Links waiting for new commit-log bytes; the store's arrival hook wakes them (and only them).
        self.idle: set[SlaveLink] = set()
        self._transfer = GroupTransfer(
            config.slave_timeout_ms, config.max_gap_not_in_sync, config.transfer_batch_size
        )
        self._listening = False
        # Set by stop(): a connection accepted before the listener closed, whose task had not run yet
        # (so stop() could not cancel it), is closed when it starts rather than served by a server that
        # is gone (a slave served so would be invisible to the server that replaced this one).
        self._stopped = False
        # The hosts of slaves asking for an offset this master could not serve, logged once a minute at
        # most: such a slave reconnects every few seconds asking for the same offset until a person acts.
        self.refused_starts = PeerLogLimit(HOST_LOG_INTERVAL_S)
        # The in-sync set as committed in etcd (None: the classic rule, any slave acknowledges) and its
        # members other than this master, whom a SYNC_MASTER send waits for.
        self._in_sync: frozenset[int] | None = None
        self._others: tuple[int, ...] = ()
        # Slaves waited for before they are members: brokerId -> barrier (this master's end when they
        # joined). Offered once their acknowledgement reached it.
        self._joining: dict[int, int] = {}
        # The candidates last handed out: one of them that drops out stays waited for until the next
        # ask, since a proposal naming it may be on its way to etcd.
        self._offered: frozenset[int] = frozenset()
        # The confirmed offset while somebody is waited for (it never goes down: a joiner is offered
        # only past the end confirmed when it joined), and who hears that it rose.
        self._confirmed = 0
        self.on_confirmed: Callable[[int], None] | None = None
        # Called when in_sync_candidates() may have changed (failover proposes the set again).
        self.on_candidates_changed: Callable[[], None] | None = None
        self._candidates: frozenset[int] = frozenset()
        self._candidates_watch: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._tls_listener is not None:
            return self._tls_listener.port
        if self._server is None or not self._server.sockets:
            return 0
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str, port: int) -> None:
        """Listen on *host*:*port* (0: a port the OS picks, see ``port``)."""
        self._transfer.start(asyncio.get_running_loop())
        self._stopped = False
        if not self._listening:
            self._store.add_arrival_listener(self._on_arrival)
            self._listening = True
        if self._tls_mode is TlsMode.DISABLED:
            self._server = await asyncio.start_server(self._serve_plaintext, host, port)
        else:
            self._tls_listener = TlsListener(self._serve_accepted, self._admit)
            await self._tls_listener.start(host, port)
        if self._candidates_watch is None:
            self._candidates_watch = asyncio.ensure_future(self._watch_candidates())
        log.info("HA server listening on %s:%d", host, self.port)

    async def stop(self) -> None:
        self._stopped = True
        if self._listening:
            self._store.remove_arrival_listener(self._on_arrival)
            self._listening = False
        server, self._server = self._server, None
        if server is not None:
            server.close()
        listener, self._tls_listener = self._tls_listener, None
        if listener is not None:
            await listener.stop()
        serving = list(self._serving)
        for task in serving:
            task.cancel()
        watch, self._candidates_watch = self._candidates_watch, None
        if watch is not None:
            watch.cancel()
        await asyncio.gather(*serving, *(watch,) if watch is not None else (), return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        self._transfer.close()

    def when_replicated(self, end: int) -> asyncio.Future[PutStatus]:
        """Group transfer: PUT_OK once a slave holds the commit log up to *end*; FLUSH_SLAVE_TIMEOUT
        after slaveTimeout; SLAVE_NOT_AVAILABLE at once with no slave connected or one too far behind.

        With an in-sync set (``set_in_sync``): PUT_OK once every other member of it holds *end*
        (allAckInSyncStateSet; else once one of them does), at once when it has no other member;
        FLUSH_SLAVE_TIMEOUT after slaveTimeout, whoever is connected."""
        if self._in_sync is None:
            return self._transfer.when_replicated(end, len(self._links))
        if not self._others and not self._joining:
            return self._transfer.answered(PutStatus.PUT_OK)
        return self._transfer.when_replicated(end, None)

    def set_in_sync(self, ids: frozenset[int] | None) -> None:
        """The in-sync set as committed in etcd, this master's brokerId included (None: the classic
        rule, any slave acknowledges a SYNC_MASTER send). A member leaves the sends' wait from this
        call on (unless it is a caught-up slave: then it joins again, with a barrier); a member joins
        it with this call unless it was waited for already as a joiner."""
        self._advance_confirmed()  # the offset confirmed by the members so far stays confirmed
        self._in_sync = ids
        self._others = () if ids is None else tuple(sorted(ids - {self._config.broker_id}))
        if ids is None:
            self._joining.clear()
            self._transfer.reset(max((link.ack_offset for link in self._links), default=0))
            return
        for member in ids:
            self._joining.pop(member, None)
        now = time.monotonic()
        for link in self._links:
            self._maybe_join(link, now)
        self._rewait()
        # Offered again whatever was told before: the election may not have been listening then.
        self._check_candidates(until_committed=True)

    def in_sync_candidates(self) -> frozenset[int]:
        """The brokerIds of the slaves connected with a hello whose acknowledgement reached an end this
        master had within the last haMaxTimeSlaveNotCatchup ms, and, if they are not members of the
        in-sync set, reached their barrier. Asking again settles the candidates offered last time: one
        that dropped out since is no longer waited for."""
        now = time.monotonic()
        self._offered = frozenset()
        self._drop_joiners(now)
        self._offered = candidates = self._candidates_now(now)
        return candidates

    def confirmed_offset(self) -> int:
        """The commit-log end every broker waited for holds (RocketMQ 5's confirmOffset); this master's
        end while nobody is waited for, or outside failover mode."""
        if self._in_sync is None or (not self._others and not self._joining):
            return self._store.replica_end()
        return self._confirmed

    def acknowledged_by_all_in_sync(self, end: int) -> bool:
        """Whether the in-sync set has another member than this master and every other member (and
        every joiner) acknowledged the commit log up to *end*: then no broker that could be elected
        lacks it."""
        return bool(self._others) and all(
            self._acked_by(member) >= end for member in (*self._others, *self._joining)
        )

    def _acked_by(self, broker_id: int) -> int:
        return max((link.ack_offset for link in self._links if link.broker_id == broker_id), default=0)

    def _in_sync_acked(self) -> int:
        """The offset the brokers waited for acknowledged: the lowest of the in-sync set's other members'
        (allAck, else the highest), and no more than any joiner's."""
        acked = [self._acked_by(member) for member in self._others]
        lowest = (min(acked) if self._config.all_ack_in_sync else max(acked)) if acked else 1 << 62
        return min(lowest, *(self._acked_by(joiner) for joiner in self._joining)) if self._joining else lowest

    def _eligible(self, link: SlaveLink, now: float) -> bool:
        return link.broker_id is not None and link.caught_up(now) and link.state is not _State.BEHIND

    def _candidates_now(self, now: float) -> frozenset[int]:
        in_sync = self._in_sync
        joining = self._joining
        candidates = set()
        for link in self._links:
            broker_id = link.broker_id
            if broker_id is None or not link.caught_up(now):
                continue
            member = in_sync is None or broker_id in in_sync
            if member or (link.ack_offset >= joining.get(broker_id, 1 << 62) and self._eligible(link, now)):
                candidates.add(broker_id)
        return frozenset(candidates)

    def _maybe_join(self, link: SlaveLink, now: float) -> None:
        """A caught-up slave that is no member joins the wait, its barrier this master's end now."""
        broker_id = link.broker_id
        if (
            broker_id is None
            or self._in_sync is None
            or broker_id in self._in_sync
            or broker_id in self._joining
            or not self._eligible(link, now)
        ):
            return
        self._advance_confirmed()
        self._joining[broker_id] = self._store.replica_end()
        log.info(
            "slave %s (brokerId %d) caught up: sends wait for it, and it is offered for the in-sync set once "
            "it acknowledged commit-log offset %d",
            link.addr,
            broker_id,
            self._joining[broker_id],
        )
        self._rewait()

    def _drop_joiners(self, now: float) -> None:
        """Joiners that disconnected or fell behind leave the wait, unless offered last time."""
        eligible = {link.broker_id for link in self._links if self._eligible(link, now)}
        dropped = [j for j in self._joining if j not in eligible and j not in self._offered]
        if dropped:
            for joiner in dropped:
                del self._joining[joiner]
                log.info("slave with brokerId %d fell behind or left before joining the in-sync set", joiner)
            self._rewait()

    def _rewait(self) -> None:
        """Whom the sends wait for changed: answer those the brokers now waited for acknowledged."""
        if self._others or self._joining:
            self._transfer.reset(self._in_sync_acked())
        else:  # nobody else to wait for: every send stored so far is answered
            self._transfer.reset(self._store.replica_end())
        self._advance_confirmed()

    def _advance_confirmed(self) -> None:
        if self._in_sync is None:
            return
        if self._others or self._joining:
            acked = [self._acked_by(broker_id) for broker_id in (*self._others, *self._joining)]
            confirmed = min(acked)
        else:
            confirmed = self._store.replica_end()
        if confirmed > self._confirmed:
            self._confirmed = confirmed
            for link in self.idle:
                if link.handshake:
                    link.wake.set()
            if self.on_confirmed is not None:
                self.on_confirmed(confirmed)

    def _check_candidates(self, *, until_committed: bool = False) -> None:
        """Tell ``on_candidates_changed`` when the candidates changed; *until_committed*: also while a
        candidate is not in the in-sync set, so that an offer is made again until the set holds it
        rather than once (its proposal may have been lost: etcd refused the swap, or the election
        asked before the slave reached its barrier)."""
        now = time.monotonic()
        self._drop_joiners(now)
        candidates = self._candidates_now(now)
        changed = candidates != self._candidates
        self._candidates = candidates
        in_sync = self._in_sync
        if until_committed and in_sync is not None:
            changed = changed or not candidates <= in_sync
        if changed and self.on_candidates_changed is not None:
            self.on_candidates_changed()

    async def _watch_candidates(self) -> None:
        # A slave leaves the candidates when its last catch-up grows older than the window, which no
        # event marks: looked at a few times per window.
        interval = min(1.0, self._config.max_time_slave_not_catchup_ms / 4000)
        while True:
            await asyncio.sleep(interval)
            self._check_candidates(until_committed=True)

    def identified(self, link: SlaveLink, broker_id: int, expected_epoch: int) -> bytes | None:
        """A slave's hello: the answer to write, or None when the slave expects another epoch (its link
        is closed)."""
        epochs = self._store.epochs()
        epoch = epochs[-1].epoch if epochs else 0
        if expected_epoch and expected_epoch != epoch:
            log.info(
                "slave %s (brokerId %d) expects master epoch %d, this master's is %d: closing its link",
                link.addr,
                broker_id,
                expected_epoch,
                epoch,
            )
            return None
        for earlier in [other for other in self._links if other.broker_id == broker_id]:
            # A slave keeps one link: an earlier one (its process stopped or cut off, the socket not
            # yet closed) must not answer for the slave with what it acknowledged before.
            log.info(
                "slave %s is brokerId %d again: closing its earlier link from %s",
                link.addr,
                broker_id,
                earlier.addr,
            )
            earlier.broker_id = None
            earlier.close()
        link.broker_id = broker_id
        link.handshake = True
        log.info("slave %s is brokerId %d (master epoch %d)", link.addr, broker_id, epoch)
        entries = [(entry.epoch, entry.start_offset) for entry in epochs]
        return encode_hello_answer(epoch, self._store.replica_end(), entries)

    def runtime_info(self) -> HARuntimeInfo:
        end = self._store.replica_end()
        max_gap = self._config.max_gap_not_in_sync
        in_sync = self._in_sync
        connections = [
            HAConnectionRuntimeInfo(
                addr=link.addr,
                slave_ack_offset=link.ack_offset,
                diff=end - link.ack_offset,
                # With an in-sync set, membership (as RocketMQ 5's syncStateSet); else the gap.
                in_sync=end - link.ack_offset < max_gap if in_sync is None else link.broker_id in in_sync,
                transferred_byte_in_second=link.rate.per_second(),
                transfer_from_where=link.next_offset,
            )
            for link in self._links
        ]
        epochs = self._store.epochs()
        return HARuntimeInfo(
            master=True,
            master_commit_log_max_offset=end,
            in_sync_slave_nums=sum(c.in_sync for c in connections),
            ha_connection_info=connections,
            epoch=epochs[-1].epoch if epochs else 0,
            in_sync_replicas=sorted(in_sync or ()),
            failover=in_sync is not None,
        )

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        # Runs after every put: one truth test while no link is idle.
        idle = self.idle
        if idle:
            for link in idle:
                link.wake.set()
            idle.clear()

    def refused(self, addr: str, why: str) -> None:
        """Log that the slave at *addr* was refused, once a minute per host at most."""
        if self.refused_slaves.due(addr) is not None:
            log.warning("refused the HA link of slave %s: %s", addr, why)

    def _admit(self) -> bool:
        """Whether one more connection may be served."""
        listener = self._tls_listener
        # A TLS listener's pending tasks serve their links to the end: they count every connection.
        held = len(listener.pending) if listener is not None else len(self._links)
        if held < self._max_connections:
            return True
        now = time.monotonic()
        if now - self._last_full_warning >= HOST_LOG_INTERVAL_S:
            self._last_full_warning = now
            log.warning("%d HA connections are open, the most this master holds: closing new ones", held)
        return False

    async def _serve_plaintext(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admit():
            writer.close()
            return
        await self._serve(reader, writer)

    async def _serve_accepted(self, sock: socket.socket, peer: str, tls: bool) -> None:
        """A connection the TLS listener accepted, *tls* if it starts a TLS handshake."""
        if not tls and self._tls_mode is TlsMode.ENFORCING:
            sock.close()
            self.refused(
                peer, "it does not speak TLS, and this HA port accepts only TLS (tls.server.mode=enforcing)"
            )
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_SIZE)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                sock,
                ssl=self._ssl_context if tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls else None,
            )
        except (OSError, TimeoutError) as exc:
            sock.close()
            self.refused(peer, f"TLS handshake failed: {handshake_failure(exc)}")
            return
        await self._serve(reader, asyncio.StreamWriter(transport, protocol, reader, loop))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._stopped:
            writer.close()
            return
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
            if link.broker_id is not None:
                self._check_candidates()  # a slave whose link closes leaves at once
                self._advance_confirmed()

    def shipped(self) -> None:
        """A link wrote everything the commit log had (group transfer: a new group for what follows)."""
        self._transfer.shipped()

    def acknowledged(self, link: SlaveLink, offset: int) -> None:
        end = self._store.replica_end()
        if link.broker_id is not None:
            now = time.monotonic()
            if offset >= end:
                link.caught_up_at = now
            else:
                link.caught_up_to(offset)
            self._maybe_join(link, now)
            self._check_candidates()
        if self._in_sync is None:
            self._transfer.acknowledge(offset)
        elif link.broker_id in self._others or link.broker_id in self._joining:
            self._transfer.acknowledge(self._in_sync_acked())
            self._advance_confirmed()
        gap = end - offset
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
        self.broker_id: int | None = None  # from the slave's hello; None for a slave without one
        # Opened with a hello: chunk headers carry the confirmed offset.
        self.handshake = False
        self.sent_confirmed = -1
        # (end, when): the sender had shipped all of the commit log, up to end, at that monotonic time;
        # a slave acknowledging that end had caught up then. More than the last such end: under a
        # steady stream of sends each acknowledgement arrives after the next message was shipped, and
        # the last end alone would never be reached.
        self._shipped: collections.deque[tuple[int, float]] = collections.deque(maxlen=2 * _SHIPPED_GRAINS)
        self._grain_s = config.max_time_slave_not_catchup_ms / 1000 / _SHIPPED_GRAINS
        self._grain_start = 0.0
        self.caught_up_at: float | None = None
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
                self._server.refused(self.addr, f"it sent bytes that are not offset reports: {exc}")
            elif isinstance(exc, OSError):
                log.info("slave %s: %s", self.addr, exc)
            elif exc is not None:
                log.error("slave %s: the HA link failed", self.addr, exc_info=exc)

    def close(self) -> None:
        self._writer.close()

    def shipped_all(self, end: int) -> None:
        """The sender has shipped the whole commit log, up to *end*."""
        shipped = self._shipped
        now = time.monotonic()
        if shipped and (shipped[-1][0] == end or now - self._grain_start < self._grain_s):
            shipped[-1] = (end, now)
        else:
            shipped.append((end, now))
            self._grain_start = now

    def caught_up_to(self, offset: int) -> None:
        """The slave acknowledged *offset* below this master's end: it caught up when this master's
        end, all shipped, was *offset* or less."""
        shipped = self._shipped
        at = None
        while shipped and shipped[0][0] <= offset:
            at = shipped.popleft()[1]
        if at is not None and (self.caught_up_at is None or at > self.caught_up_at):
            self.caught_up_at = at

    def caught_up(self, now: float) -> bool:
        """Whether the slave acknowledged an end this master had within haMaxTimeSlaveNotCatchup."""
        at = self.caught_up_at
        return at is not None and now - at <= self._config.max_time_slave_not_catchup_ms / 1000

    async def _read_reports(self) -> None:
        decoder = ReportDecoder()
        start: HelloDecoder | None = HelloDecoder()  # until the stream's start is known
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
            if start is not None:
                if not start.feed(data):
                    continue
                hello, data, start = start.hello, start.rest, None
                if self._server.verify_slave is not None:
                    if hello is None:
                        self._server.refused(
                            self.addr, "it sent no hello, so it cannot authenticate (aclEnable=true)"
                        )
                        return
                    authenticated = await self._authenticate(hello, data)
                    if authenticated is None:
                        return
                    data = authenticated
                if hello is not None:
                    answer = self._server.identified(self, hello.broker_id, hello.expected_epoch)
                    if answer is None:
                        return
                    self._writer.write(answer)  # before any chunk: the sender waits for a report
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
                self._writer.write(self._header(end, 0))
                with contextlib.suppress(OSError):
                    await self._writer.drain()
                return
            if self.request_offset < 0:
                self.request_offset = offset
                self._first_report.set()
            self.ack_offset = offset
            self._server.acknowledged(self, offset)

    async def _authenticate(self, hello: Hello, data: bytes) -> bytes | None:
        """Challenge the slave that sent *hello* (*data*: the bytes that came after it) and check its
        answer: the bytes after the answer if the slave may replicate, else None (refused, logged)."""
        verify = self._server.verify_slave
        assert verify is not None
        nonce = secrets.token_bytes(AUTH_NONCE_SIZE)
        self._writer.write(encode_auth_challenge(nonce))
        decoder = AuthDecoder()
        async with asyncio.timeout(self._config.housekeeping_interval_ms / 1000):
            auth = decoder.feed(data)
            while auth is None:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    return None
                auth = decoder.feed(data)
        why = verify(self.addr, auth.access_key, auth_content(nonce, auth.nonce, hello), auth.signature)
        if why is not None:
            self._server.refused(self.addr, f"brokerId {hello.broker_id}: {why}")
            return None
        return decoder.rest

    def _header(self, offset: int, body_size: int) -> bytes:
        if not self.handshake:
            return encode_chunk_header(offset, body_size)
        confirmed = self.sent_confirmed = self._server.confirmed_offset()
        return encode_confirmed_chunk_header(offset, body_size, confirmed)

    async def _send_chunks(self) -> None:
        await self._first_report.wait()
        store = self._store
        # RocketMQ: an empty slave starts at the master's last segment, not at its first.
        next_offset = store.ha_start_for_empty_slave() if self.request_offset == 0 else self.request_offset
        self.next_offset = next_offset
        batch = self._config.transfer_batch_size
        heartbeat_s = self._config.heartbeat_interval_ms / 1000
        writer = self._writer
        header = self._header
        server = self._server
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
                        parts += (header(next_offset + size, chunk), view)
                    del view
                    if not chunk:
                        break
                    size += chunk
            except ReplicaOffsetError as exc:
                if not parts:  # else the chunks before it go first, and the next round meets it again
                    if self._server.refused_starts.due(self.addr) is not None:
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
                    self.shipped_all(next_offset + size)
                next_offset += size
                self.next_offset = next_offset
                self.drained_to = -1
                self.rate.total += size
                last_write = loop.time()
                await writer.drain()
                continue
            self.drained_to = next_offset
            self.shipped_all(next_offset)
            wait = last_write + heartbeat_s - loop.time()
            if wait <= 0 or (self.handshake and server.confirmed_offset() > self.sent_confirmed):
                writer.write(header(next_offset, 0))  # heartbeat, or the confirmed offset rose
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
