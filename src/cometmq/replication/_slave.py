"""The slave's side of the HA link: ``HAClient`` copies the master's commit log into the slave's store.

A slave given its brokerId opens each link with a hello (``cometmq.protocol.ha``): the master answers
with its epoch history, and the slave cuts the tail of its log that a deposed master wrote and no
other broker holds, then takes the master's history as its own. A master with access control on
challenges the hello first: the slave answers with an HMAC keyed from its credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import secrets
import ssl
import time
from collections.abc import Callable

from cometmq.auth import Credentials
from cometmq.errors import CometMQError, ProtocolError
from cometmq.protocol.ha import (
    AUTH_NONCE_SIZE,
    AuthChallenge,
    ChunkDecoder,
    Hello,
    HelloAnswer,
    HelloAnswerDecoder,
    auth_content,
    encode_auth,
    encode_hello,
    encode_report,
)
from cometmq.protocol.ha_status import HAClientRuntimeInfo, HARuntimeInfo
from cometmq.remoting.tls import handshake_failure
from cometmq.replication._config import ReplicationConfig
from cometmq.replication._rate import ByteRate
from cometmq.store import EpochEntry, MessageStore, ReplicaOffsetError, consistent_end

log = logging.getLogger("cometmq.replication")

# The most one read takes, and (as the stream's limit) about what the transport buffers before it
# pauses reading: a read then holds several chunks, appended in one call.
_READ_SIZE = 1024 * 1024
# RocketMQ's HAClient: the wait before connecting again, and the connect timeout.
RECONNECT_INTERVAL_S = 5.0
CONNECT_TIMEOUT_S = 5.0
# The first wait after the master changed, doubled per failure up to RECONNECT_INTERVAL_S: a new master
# may not have begun its epoch yet (its link closes on the hello) or bound its HA port, for a moment.
QUICK_RETRY_S = 0.05
# A link up for this long has settled: the quick retries are for a master still starting.
SETTLED_LINK_S = 1.0


class _Refused(CometMQError):
    """The master refused this slave (its credentials, or their absence): a person must act."""


class _Outcome(enum.Enum):
    RECONNECT = enum.auto()
    STOP = enum.auto()  # the logs do not line up: replicating further would corrupt the slave's


def _millis() -> int:
    return time.time_ns() // 1_000_000


def _runs(chunks: list[tuple[int, bytes]], segment_size: int) -> list[tuple[int, bytes, int]]:
    """*chunks* with the bodies that continue one another in one segment joined, as ``(offset, body,
    size of its last chunk's body)``: one ``append_replica`` per read rather than one per chunk of
    haTransferBatchSize (bench/replication.py, the new slave's copy). A heartbeat stays on its own."""
    runs: list[tuple[int, bytes, int]] = []
    start = end = 0
    bodies: list[bytes] = []
    for offset, body in chunks:
        if bodies and (offset != end or not body or offset % segment_size == 0):
            runs.append((start, b"".join(bodies) if len(bodies) > 1 else bodies[0], len(bodies[-1])))
            bodies = []
        if not body:
            runs.append((offset, body, 0))
            continue
        if not bodies:
            start = offset
        bodies.append(body)
        end = offset + len(body)
    if bodies:
        runs.append((start, b"".join(bodies) if len(bodies) > 1 else bodies[0], len(bodies[-1])))
    return runs


class HAClient:
    """Connects to the master's HA port, reports the slave's commit-log end, appends what comes.

    *master_ha_addr* gives the master's HA address as the slave's registration learned it (None while
    unknown); ``haMasterAddress``, when set, is used instead. With *broker_id* the client opens each
    link with a hello naming it and the master epoch *expected_epoch* gives (0 or no callable: any),
    truncates a diverged tail and adopts the master's epoch history; without it, it speaks as a
    RocketMQ 4.x slave. *credentials* answer a master's challenge (``innerClientAuthenticationCredentials``),
    and with *ssl_context* the link speaks TLS.
    """

    def __init__(
        self,
        store: MessageStore,
        config: ReplicationConfig,
        master_ha_addr: Callable[[], str | None],
        *,
        broker_id: int | None = None,
        expected_epoch: Callable[[], int] | None = None,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._store = store
        self._credentials = credentials
        self._ssl_context = ssl_context
        self._config = config
        self._master_ha_addr = master_ha_addr
        self._broker_id = broker_id
        self._expected_epoch = expected_epoch
        self._task: asyncio.Task[None] | None = None
        self._addr = ""
        self._connected = False
        self._master_offset = 0  # the end of the last chunk received
        self._last_read_ms = 0
        self._last_write_ms = 0
        self._rate = ByteRate()
        self._last_failure = ""  # the last failure to connect or replicate, logged once
        self._wake = asyncio.Event()  # set when the master's address is learned: try it now
        self._retry_s = QUICK_RETRY_S  # the wait after the next failure
        # The master's confirmed offset as its chunk headers last said (-1: none yet; a link without a
        # hello carries none), and who hears that it changed.
        self.confirmed = -1
        self.on_confirmed: Callable[[int], None] | None = None

    def master_changed(self) -> None:
        """The master's HA address was learned or changed: a client waiting to reconnect tries it at once
        rather than after its reconnect interval (a SYNC_MASTER's sends wait for this slave)."""
        self._retry_s = QUICK_RETRY_S
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def runtime_info(self) -> HARuntimeInfo:
        epochs = self._store.epochs()
        return HARuntimeInfo(
            master=False,
            epoch=epochs[-1].epoch if epochs else 0,
            master_commit_log_max_offset=self._master_offset,
            ha_client_runtime_info=HAClientRuntimeInfo(
                master_addr=self._addr,
                transferred_byte_in_second=self._rate.per_second(),
                max_offset=self._store.replica_end(),
                last_read_timestamp=self._last_read_ms,
                last_write_timestamp=self._last_write_ms,
                is_activated=self._connected,
            ),
        )

    async def _run(self) -> None:
        while True:
            addr = self._config.master_address or self._master_ha_addr()
            if addr:
                self._addr = addr
                try:
                    outcome = await self._replicate(addr)
                except (OSError, TimeoutError, ValueError, ProtocolError, CometMQError) as exc:
                    failure = f"HA link to the master {addr}: {exc or type(exc).__name__}"
                    if failure != self._last_failure:  # once, not every 5 s while the master is away
                        self._last_failure = failure
                        log.log(
                            logging.WARNING if isinstance(exc, _Refused) else logging.INFO,
                            "%s; connecting again, every %g s at most",
                            failure,
                            RECONNECT_INTERVAL_S,
                        )
                    outcome = _Outcome.RECONNECT
                except Exception as exc:  # a fault in this code must not end replication unnoticed
                    failure = f"HA link to the master {addr} failed: {type(exc).__name__}: {exc}"
                    if failure != self._last_failure:
                        self._last_failure = failure
                        log.exception(
                            "%s; connecting again, every %g s at most", failure, RECONNECT_INTERVAL_S
                        )
                    outcome = _Outcome.RECONNECT
                if outcome is _Outcome.STOP:
                    return
            # Soon after the master changed (a failed hello or connect: the new master is still starting),
            # then every RECONNECT_INTERVAL_S as RocketMQ's HAClient.
            wait = RECONNECT_INTERVAL_S
            if addr:
                wait, self._retry_s = self._retry_s, min(self._retry_s * 2, RECONNECT_INTERVAL_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def _replicate(self, addr: str) -> _Outcome:
        host, _, port = addr.rpartition(":")
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, int(port), limit=_READ_SIZE)
        if self._ssl_context is not None:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await writer.start_tls(self._ssl_context, server_hostname=host)
            except (OSError, TimeoutError) as exc:
                writer.close()
                raise ConnectionError(
                    f"TLS handshake failed: {handshake_failure(exc)} (is TLS on at the master's HA port?)"
                ) from None
        store = self._store
        self._connected = True
        self._last_failure = ""
        try:
            after_hello = b""
            if self._broker_id is not None:
                answer, after_hello = await self._hello(addr, self._broker_id, reader, writer)
                if self._follow(addr, answer) is _Outcome.STOP:
                    return _Outcome.STOP
            reported = store.replica_end()
            log.info("connected to the master %s (HA), replicating from commit-log offset %d", addr, reported)
            writer.write(encode_report(reported))  # at once, not after a heartbeat interval (RocketMQ 4.9)
            self._last_write_ms = _millis()
            linked_at = time.monotonic()
            try:
                return await self._receive(addr, reader, writer, reported, after_hello)
            finally:
                # A link that lasted: a later failure is no start-up. One cut at once is (a new master
                # replaces its HA server as it takes over, closing what its old one accepted): soon again.
                if time.monotonic() - linked_at >= SETTLED_LINK_S:
                    self._retry_s = RECONNECT_INTERVAL_S
        finally:
            self._connected = False
            writer.close()
            log.info(
                "disconnected from the master %s (HA) at commit-log offset %d", addr, store.replica_end()
            )

    async def _hello(
        self, addr: str, broker_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[HelloAnswer, bytes]:
        """Send the hello (and answer the master's challenge); the master's answer and the bytes that
        came after it."""
        expected = self._expected_epoch() if self._expected_epoch is not None else 0
        hello = Hello(broker_id, expected)
        writer.write(encode_hello(broker_id, expected))
        decoder = HelloAnswerDecoder()
        challenged = False
        async with asyncio.timeout(self._config.housekeeping_interval_ms / 1000):
            while True:
                data = await reader.read(_READ_SIZE)
                if not data:
                    if challenged:
                        user = self._credentials.access_key if self._credentials is not None else "?"
                        raise _Refused(
                            f"the master refused this slave's AUTH as user {user} (the master's log says "
                            "why: a wrong secret key, an unknown or disabled user, or one that may not "
                            "update the cluster)"
                        )
                    raise ConnectionError(
                        "the master closed the link before answering the hello"
                        + (f" (this slave expects master epoch {expected})" if expected else "")
                    )
                answer = decoder.feed(data)
                if isinstance(answer, AuthChallenge):
                    challenged = True
                    if self._credentials is None:
                        raise _Refused(
                            "the master requires its slaves to authenticate (aclEnable=true): set "
                            "innerClientAuthenticationCredentials"
                        )
                    # A nonce of its own: what it answers is not wholly of the master's choosing.
                    nonce = secrets.token_bytes(AUTH_NONCE_SIZE)
                    signature = self._credentials.digest(auth_content(answer.nonce, nonce, hello))
                    writer.write(encode_auth(self._credentials.access_key, nonce, signature))
                    answer = decoder.feed(b"")
                if isinstance(answer, HelloAnswer):
                    return answer, decoder.rest

    def _follow(self, addr: str, answer: HelloAnswer) -> _Outcome | None:
        """Cut the tail of this slave's log that the master's history does not hold, and take that
        history; STOP when the slave's log is longer than a master that is not newer."""
        store = self._store
        local = store.epochs()
        local_end = store.replica_end()
        master = [EpochEntry(epoch, start) for epoch, start in answer.entries]
        if local and master:  # a log without a history has nothing to compare: the offsets decide
            end = consistent_end(local, local_end, master, answer.end)
            if end < local_end:
                if master[-1].epoch <= local[-1].epoch:
                    # A master whose history is not newer than this slave's: a mistake (a wiped disk,
                    # a stale master), not a tail to cut.
                    if answer.end < local_end:
                        return self._mismatch(addr, answer.end, local_end)
                    log.error(
                        "this slave's commit log parts from the master %s's at offset %d, and the "
                        "master's history (epoch %d) is not newer than this slave's (epoch %d); "
                        "replication stops, this broker keeps serving reads. Move its data directory "
                        "away to start it as an empty slave.",
                        addr,
                        end,
                        master[-1].epoch,
                        local[-1].epoch,
                    )
                    return _Outcome.STOP
                removed = store.truncate_to(end)
                log.warning(
                    "cut this slave's commit log from offset %d back to %d (%d bytes) where it parts from "
                    "the master %s's: that tail was written in epoch %d, the master is at epoch %d",
                    local_end,
                    end,
                    removed,
                    addr,
                    local[-1].epoch,
                    master[-1].epoch,
                )
        if master:
            store.adopt_epochs(master)
        return None

    async def _receive(
        self,
        addr: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        reported: int,
        pending: bytes = b"",
    ) -> _Outcome:
        store = self._store
        config = self._config
        decoder = ChunkDecoder(confirmed=self._broker_id is not None)
        loop = asyncio.get_running_loop()
        heartbeat_s = config.heartbeat_interval_ms / 1000
        quiet_s = config.housekeeping_interval_ms / 1000
        last_read = last_write = loop.time()
        caught_up = False
        while True:
            if pending:  # chunks that came with the hello's answer
                data, pending = pending, b""
            else:
                wait = min(last_write + heartbeat_s, last_read + quiet_s) - loop.time()
                try:
                    async with asyncio.timeout(max(wait, 0.0)):
                        data = await reader.read(_READ_SIZE)
                except TimeoutError:
                    now = loop.time()
                    if now - last_read >= quiet_s:
                        log.info(
                            "the master %s sent nothing for %d ms (haHousekeepingInterval): reconnecting",
                            addr,
                            config.housekeeping_interval_ms,
                        )
                        return _Outcome.RECONNECT
                    if now - last_write >= heartbeat_s:
                        reported = store.replica_end()
                        writer.write(encode_report(reported))
                        last_write = now
                        self._last_write_ms = _millis()
                    continue
                if not data:
                    log.info("the master %s closed the HA link", addr)
                    return _Outcome.RECONNECT
            last_read = loop.time()
            self._last_read_ms = _millis()
            self._rate.total += len(data)
            short_chunk = False
            for offset, body, last_size in _runs(decoder.feed(data), config.segment_size):
                end = store.replica_end()
                if end and offset != end:
                    return self._mismatch(addr, offset, end)
                if body:
                    try:
                        store.append_replica(offset, body)
                    except ReplicaOffsetError as exc:
                        log.error(
                            "this slave's commit log does not line up with the master %s's at offset %d "
                            "(slave end %d): %s; replication stops, this broker keeps serving reads",
                            addr,
                            offset,
                            end,
                            exc,
                        )
                        return _Outcome.STOP
                chunk_end = self._master_offset = offset + len(body)
                # Shorter than a batch, and not cut by a segment's end: all the master had to send.
                short_chunk = last_size < config.transfer_batch_size and chunk_end % config.segment_size != 0
            if decoder.confirmed >= 0 and decoder.confirmed != self.confirmed:  # after the bytes it covers
                self.confirmed = decoder.confirmed
                if self.on_confirmed is not None:
                    self.on_confirmed(decoder.confirmed)
            end = store.replica_end()
            if end > reported:  # the acknowledgement, once per read (not per chunk)
                reported = end
                writer.write(encode_report(end))
                last_write = loop.time()
                self._last_write_ms = _millis()
            if short_chunk and not decoder.buffered and not caught_up:
                caught_up = True
                log.info("caught up with the master %s at commit-log offset %d", addr, end)

    def _mismatch(self, addr: str, offset: int, end: int) -> _Outcome:
        if offset < end:
            log.error(
                "this slave's commit log ends at offset %d, beyond the master %s's end at %d: it is "
                "longer than the master's (was this broker the slave of another master, or did the "
                "master lose data?); replication stops, this broker keeps serving reads. Move its data "
                "directory away to start it as an empty slave.",
                end,
                addr,
                offset,
            )
            return _Outcome.STOP
        log.warning(
            "the master %s sent commit-log offset %d where this slave's log ends at %d; reconnecting",
            addr,
            offset,
            end,
        )
        return _Outcome.RECONNECT
