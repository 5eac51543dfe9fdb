"""What a slave does apart from copying its master's commit log: it keeps its master's metadata
(RocketMQ's SlaveSynchronize) and refuses the writes only a master may take.

SlaveSynchronize asks the master, over the broker's remoting client, for its topics
(GET_ALL_TOPIC_CONFIG), consumer offsets (GET_ALL_CONSUMER_OFFSET), delay offsets (GET_ALL_DELAY_OFFSET)
and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), in RocketMQ's order, a few seconds after
start and then every 10 s, whenever the NameServer names a master (docs/operations.md, "Roles"):

- topics and groups replace the slave's tables when their dataVersion differs, and are written;
- consumer offsets are merged: the master's entry for a ``topic@group`` wins, the slave keeps the
  others (what consumers committed to it while the master was away);
- delay offsets (and a CometMQ master's timer progress) replace the slave's delayOffset.json (and
  timerProgress.json) once the slave's commit log holds every copy they count as delivered; until
  then the slave keeps its own, so that, made a master, it delivers again what it never received.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cometmq.broker._timer import DELIVERED_END_KEY, TIMER_PROGRESS_KEY
from cometmq.errors import CometMQError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.namesrv_headers import RegisterBrokerResponseHeader
from cometmq.protocol.route import DataVersion
from cometmq.remoting import Connection, RemotingClient, RequestHandler

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

# A broker's processor table: request code → handler.
ProcessorTable = dict[int, RequestHandler]

# RocketMQ's schedule of SlaveSynchronize (BrokerController.handleSlaveSynchronize).
SLAVE_SYNC_FIRST_S: Final = 3.0
SLAVE_SYNC_PERIOD_S: Final = 10.0
# Each request's timeout, as RocketMQ's BrokerOuterAPI.
_REQUEST_TIMEOUT_S: Final = 3.0

# Requests a slave refuses: the sends (which only a master stores) and the admin writes of topics and
# groups (which a slave takes from its master), with RocketMQ's codes.
_SENDS = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
)
_ADMIN_WRITES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
)


def master_named(answer: RemotingCommand) -> tuple[str | None, str | None]:
    """The master's remoting and HA addresses in a NameServer's answer to REGISTER_BROKER (None for
    what it does not name); HeaderError for a malformed answer."""
    header = RegisterBrokerResponseHeader.decode(answer.ext_fields)
    return header.master_addr or None, header.ha_server_addr or None


def slave_refusals(broker: Broker) -> ProcessorTable:
    """The handlers a slave's processor table has for the requests only a master serves: sends are
    answered SERVICE_NOT_AVAILABLE (14), END_TRANSACTION SLAVE_NOT_AVAILABLE (11, RocketMQ's), topic
    and group changes SYSTEM_ERROR (1), each with a remark naming the master (as last heard from the
    NameServer) to send them to."""

    def slave_of() -> str:
        master = broker.master_addr or "an unknown master"
        return f"broker {broker.config.broker_name} at {broker.config.broker_addr} is a slave of {master}"

    def refuse_send(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SERVICE_NOT_AVAILABLE,
            f"{slave_of()}: a slave stores no messages sent to it; send them to the master",
        )

    def refuse_end_transaction(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SLAVE_NOT_AVAILABLE,
            f"{slave_of()}: a slave cannot end a transaction; send END_TRANSACTION to the master",
        )

    def refuse_admin_write(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"{slave_of()}: topics and subscription groups cannot be changed on a slave; "
            "run the command on the master",
        )

    return {
        **{code: refuse_send for code in _SENDS},
        **{code: refuse_admin_write for code in _ADMIN_WRITES},
        RequestCode.END_TRANSACTION: refuse_end_transaction,
    }


class SlaveSynchronize:
    """A slave's copy of its master's metadata, refreshed by one task on the broker's loop."""

    def __init__(
        self,
        broker: Broker,
        client: RemotingClient,
        first_s: float = SLAVE_SYNC_FIRST_S,
        period_s: float = SLAVE_SYNC_PERIOD_S,
    ) -> None:
        self._broker = broker
        self._client = client
        self._first_s = first_s
        self._period_s = period_s
        # What went wrong with each request at its last round, so that a master answering the same
        # error round after round is logged once, and once more when it answers again.
        self._failures: dict[str, str] = {}

    async def run(self) -> None:
        await asyncio.sleep(self._first_s)
        while True:
            try:
                await self.sync_all()
            except Exception:  # a bug must not end the copying for good; the next round tries again
                log.exception("copying the master's metadata failed")
            await asyncio.sleep(self._period_s)

    async def sync_all(self) -> None:
        """One round: the four requests, in RocketMQ's order, to the master the NameServer named."""
        broker = self._broker
        master = broker.master_addr
        if master is None or master == broker.config.broker_addr:
            return
        source = f"the master {master}"
        # Each step applies the answer, and says whether a table was replaced (None: merged, as
        # offsets are every round, not worth a line each time).
        steps: tuple[tuple[str, RequestCode, Callable[[dict[str, Any], str], bool | None]], ...] = (
            ("topics", RequestCode.GET_ALL_TOPIC_CONFIG, self._adopt_topics),
            ("consumer offsets", RequestCode.GET_ALL_CONSUMER_OFFSET, self._merge_offsets),
            ("delay offsets", RequestCode.GET_ALL_DELAY_OFFSET, self._adopt_delay_offsets),
            ("subscription groups", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._adopt_groups),
        )
        for what, code, apply in steps:
            body = await self._fetch(master, what, code)
            if body is None:
                continue
            try:
                changed = apply(body, source)
            except (TypeError, ValueError) as exc:
                self._failed(what, master, f"its answer cannot be used: {exc}")
                continue
            if self._failures.pop(what, None) is not None:
                log.info("copying %s from %s works again", what, source)
            if changed:
                log.info("%s copied from %s", what, source)
        write = broker.offsets.persist_later()
        if write is not None:
            await asyncio.get_running_loop().run_in_executor(None, write)

    async def _fetch(self, master: str, what: str, code: RequestCode) -> dict[str, Any] | None:
        """The master's answer to *code*, parsed; None (logged once per kind of failure) when there is
        none to use."""
        try:
            response = await self._client.invoke(master, RemotingCommand(code=code), _REQUEST_TIMEOUT_S)
        except (CometMQError, OSError) as exc:
            self._failed(what, master, f"the request failed: {exc}")
            return None
        if response.code != ResponseCode.SUCCESS:
            self._failed(what, master, f"it answered code {response.code}: {response.remark}")
            return None
        try:
            body = fastjson.loads(response.body)
        except (ValueError, UnicodeDecodeError) as exc:
            self._failed(what, master, f"its answer is not JSON: {exc}")
            return None
        if not isinstance(body, dict):
            self._failed(what, master, "its answer is not a JSON object")
            return None
        return body

    def _failed(self, what: str, master: str, reason: str) -> None:
        if self._failures.get(what) != reason:
            log.warning("cannot copy %s from the master %s: %s", what, master, reason)
            self._failures[what] = reason

    def _adopt_topics(self, body: dict[str, Any], source: str) -> bool:
        version = DataVersion.from_json(body.get("dataVersion") or {})
        return self._broker.topics.adopt(version, body.get("topicConfigTable") or {}, source)

    def _merge_offsets(self, body: dict[str, Any], source: str) -> None:
        self._broker.offsets.merge(body.get("offsetTable") or {}, source)

    def _adopt_delay_offsets(self, body: dict[str, Any], source: str) -> None:
        delivered_end = body.get(DELIVERED_END_KEY)
        if isinstance(delivered_end, int) and self._broker.store.commitlog_max_offset < delivered_end:
            return  # the delivered copies have not all reached this slave yet: next round
        self._broker.schedule.adopt(body.get("offsetTable") or {}, source)
        progress = body.get(TIMER_PROGRESS_KEY)
        if progress is not None:  # a CometMQ master's
            self._broker.timer.adopt(progress, source)

    def _adopt_groups(self, body: dict[str, Any], source: str) -> bool:
        version = DataVersion.from_json(body.get("dataVersion") or {})
        return self._broker.groups.adopt(version, body.get("subscriptionGroupTable") or {}, source)
