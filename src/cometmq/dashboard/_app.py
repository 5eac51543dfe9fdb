"""The dashboard's pages: server-rendered HTML over an :class:`AdminClient` (and a producer for test
messages), plain forms that POST and redirect, and JSON for the charts.

Everything shown passes through Jinja2's autoescaping: topic and group names, message properties
and bodies come from clients. Actions check that a form was posted from the dashboard's own pages
(the Origin header), so that another site open in the same browser cannot make them, and every
request must name the dashboard by one of its allowed host names (the Host header), so that a site
whose name is made to resolve to the dashboard's address (DNS rebinding) is refused too.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cometmq.client import AdminClient, Message, MessageQueue, Producer, PullStatus
from cometmq.client.message import SYSFLAG_COMPRESSED
from cometmq.console import counted, plural
from cometmq.dashboard._history import DEFAULT_INTERVAL_S, Sampler
from cometmq.errors import BrokerError, CometMQError, RecordError
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import (
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_GROUPS,
    TOOLS_CONSUMER_GROUP,
    TRACE_TOPIC,
    perm_text,
    topic_kind,
)
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_records, host_text, inflate_body
from cometmq.protocol.subscription import SubscriptionData
from cometmq.protocol.trace import trace_event

_HERE = Path(__file__).parent
MAX_MESSAGES = 100  # the most messages a search or a dead-letter list shows
_PULL_BATCH = 32
_FLASHES_KEPT = 100
MAX_FORM_BYTES = 1 << 20  # the largest form a POST may carry
# The most dead letters one click resends: they are read and resent a pull's batch at a time.
MAX_RESEND = 1000


class DashboardState:
    """What the pages share: the admin client, the producer for test messages (started on first use),
    the sampler behind the charts, and the notices waiting to be shown after a redirect."""

    def __init__(
        self, admin: AdminClient, producer_factory: Callable[[], Producer], sample_interval_s: float
    ) -> None:
        self.admin = admin
        self.sampler = Sampler(admin, sample_interval_s)
        self._producer_factory = producer_factory
        self._producer: Producer | None = None
        self._producer_lock = asyncio.Lock()
        self._flashes: OrderedDict[str, tuple[str, str]] = OrderedDict()

    async def producer(self) -> Producer:
        async with self._producer_lock:
            if self._producer is None:
                producer = self._producer_factory()
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
            self._producer = None

    def flash(self, kind: Literal["ok", "error"], text: str) -> str:
        """Keep a notice for the page a redirect leads to; returns its token. Only tokens travel in
        URLs, so a link cannot make the dashboard show a text of someone else's choosing."""
        token = secrets.token_urlsafe(8)
        self._flashes[token] = (kind, text)
        while len(self._flashes) > _FLASHES_KEPT:
            self._flashes.popitem(last=False)
        return token

    def take_flash(self, token: str | None) -> tuple[str, str] | None:
        return self._flashes.pop(token, None) if token else None


# formatting, for the templates -----------------------------------------------------------------


def format_time(ms: int | float | None) -> str:
    """Local time with milliseconds; "-" for none (0)."""
    if not ms:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{int(ms) % 1000:03d}"


def body_text(rec: DecodedRecord) -> tuple[str, str]:
    """(what the body is, the body for display): UTF-8 text as it is, anything else as hex escapes; a
    compressed body inflated first."""
    body, note = rec.body, ""
    if rec.sys_flag & SYSFLAG_COMPRESSED:
        try:
            body, note = inflate_body(rec.body), f"zlib-compressed, {len(rec.body)} bytes stored; "
        except RecordError:
            note = "marked compressed but does not inflate, shown as stored; "
    try:
        text = body.decode("utf-8")
        if all(ch.isprintable() or ch in "\n\r\t" for ch in text):
            return f"{note}{len(body)} bytes, text", text
    except UnicodeDecodeError:
        pass
    escaped = "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in body)
    return f"{note}{len(body)} bytes, binary as hex escapes", escaped


def message_id(rec: DecodedRecord) -> str:
    """The id clients show: UNIQ_KEY, else the offset message id."""
    return decode_properties(rec.properties).get("UNIQ_KEY") or rec.offset_msg_id


def _parse_local_time(text: str, what: str) -> int:
    """A ``datetime-local`` field (local time) as ms since the epoch."""
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise CometMQError(f"{what}: {text!r} is not a date and time") from None


def _int_field(form: FormData, name: str, least: int, default: int | None = None) -> int:
    raw = str(form.get(name) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise CometMQError(f"{name}: {raw!r} is not a whole number") from None
    if value < least:
        raise CometMQError(f"{name}: {value} is less than {least}")
    return value


def _text_field(form: FormData, name: str) -> str:
    value = str(form.get(name) or "").strip()
    if not value:
        raise CometMQError(f"{name} is missing")
    return value


_PERMS = {"RW": PERM_READ | PERM_WRITE, "R": PERM_READ, "W": PERM_WRITE}


def _perm_field(form: FormData) -> int:
    """The topic permission a form's ``perm`` field names (RW, R, W); read and write when it names none."""
    return _PERMS.get(str(form.get("perm") or "RW"), PERM_READ | PERM_WRITE)


# the application ------------------------------------------------------------------------------


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["time"] = format_time
    env.filters["perm"] = perm_text
    env.filters["plural"] = plural
    env.globals.update(
        urlencode=urlencode,
        message_id=message_id,
        tags_of=lambda rec: decode_properties(rec.properties).get("TAGS", ""),
        keys_of=lambda rec: decode_properties(rec.properties).get("KEYS", ""),
    )
    return env


Page = Callable[[Request], Awaitable[dict[str, Any]]]


class _NotFound(CometMQError):
    """What a page shows does not exist in the cluster (answered 404, not as a cluster failure)."""


def create_app(
    admin: AdminClient,
    producer_factory: Callable[[], Producer],
    *,
    allowed_hosts: Collection[str],
    sample_interval_s: float = DEFAULT_INTERVAL_S,
) -> Starlette:
    """The dashboard for the cluster ``admin`` (started) talks to. ``producer_factory`` makes the
    producer that sends test messages, when one is first sent. Requests must name one of
    ``allowed_hosts`` in their Host header (and a posted form's Origin one of them too). The charts'
    samples are taken while ``app.state.dashboard.sampler.run()`` runs
    (:func:`cometmq.dashboard.start_dashboard` runs it)."""
    allowed = frozenset(name.lower() for name in allowed_hosts)
    state = DashboardState(admin, producer_factory, sample_interval_s)
    env = _templates()

    def page(template: str) -> Callable[[Page], Callable[[Request], Awaitable[Response]]]:
        """A GET page: the function gathers the template's context; a cluster that refuses or cannot
        be reached shows as an error on the page."""

        def wrap(gather: Page) -> Callable[[Request], Awaitable[Response]]:
            @functools.wraps(gather)
            async def endpoint(request: Request) -> Response:
                status = 200
                try:
                    context = await gather(request)
                except _NotFound as exc:
                    context, status = {"error": str(exc)}, 404
                except (CometMQError, OSError) as exc:
                    context, status = {"error": _error_text(exc)}, 502
                context.setdefault("error", None)
                context["flash"] = state.take_flash(request.query_params.get("flash"))
                context["nav"] = template.split(".")[0]
                query = [(k, v) for k, v in request.query_params.multi_items() if k != "flash"]
                context["here"] = request.url.path + (f"?{urlencode(query)}" if query else "")
                context["interval_ms"] = int(state.sampler.interval_s * 1000)
                context["retry"] = status == 502
                html = env.get_template(template if status == 200 else "error.html").render(context)
                return HTMLResponse(html, status)

            return endpoint

        return wrap

    def action(
        gather: Callable[[FormData, Request], Awaitable[tuple[str, str]]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST action: does its work, then redirects to the page it names with a notice of what
        happened (or why it failed, then back to the page it came from)."""

        @functools.wraps(gather)
        async def endpoint(request: Request) -> Response:
            _check_origin(request, allowed)
            form = await _form(request)
            back = str(form.get("back") or "/")
            if not back.startswith("/") or back.startswith("//"):
                back = "/"
            try:
                target, notice = await gather(form, request)
                token = state.flash("ok", notice)
            except (CometMQError, OSError) as exc:
                target, token = back, state.flash("error", _error_text(exc))
            separator = "&" if "?" in target else "?"
            return RedirectResponse(f"{target}{separator}flash={token}", status_code=303)

        return endpoint

    # cluster ----------------------------------------------------------------------------------

    @page("cluster.html")
    async def cluster(request: Request) -> dict[str, Any]:
        info = await admin.cluster_info()
        rows: list[dict[str, Any]] = []
        for cluster_name, names in sorted(info.cluster_addr_table.items()):
            for name in sorted(names):
                broker = info.broker_addr_table.get(name)
                if broker is None:
                    continue
                for broker_id, addr in sorted(broker.broker_addrs.items()):
                    # The label names the broker's series in /api/rates, as the sampler does.
                    label = f"{name} {addr}"
                    rows.append(
                        {"cluster": cluster_name, "name": name, "id": broker_id, "addr": addr, "label": label}
                    )
        answers = await asyncio.gather(
            *(admin.broker_runtime_info(row["addr"]) for row in rows), return_exceptions=True
        )
        for row, answer in zip(rows, answers, strict=True):
            if isinstance(answer, BaseException):
                row["runtime"] = None
                row["problem"] = _error_text(answer)
                continue
            row["runtime"] = answer
            row["role"] = answer.get("brokerRole") or ("MASTER" if row["id"] == 0 else "SLAVE")
            row["in_tps"] = (answer.get("putTps") or "-").split()[0]
            out = answer.get("getTransferedTps") or answer.get("getTransferredTps") or "-"
            row["out_tps"] = out.split()[0]
        return {"rows": rows, "namesrv": ";".join(admin.namesrv_addrs)}

    async def rates(request: Request) -> Response:
        return JSONResponse({label: s.to_json() for label, s in state.sampler.broker_rates.items()})

    # topics -----------------------------------------------------------------------------------

    @page("topics.html")
    async def topics(request: Request) -> dict[str, Any]:
        show_system = request.query_params.get("system") == "1"
        info = await admin.cluster_info()
        names = set(info.cluster_addr_table) | set(info.broker_addr_table)
        listed = [(topic, topic_kind(topic, names)) for topic in await admin.topic_list()]
        shown = [row for row in listed if show_system or row[1] == "user"]
        return {
            "topics": shown,
            "hidden": len(listed) - len(shown),
            "show_system": show_system,
            "clusters": sorted(info.cluster_addr_table),
        }

    @action
    async def create_topic(form: FormData, request: Request) -> tuple[str, str]:
        topic = _text_field(form, "topic")
        queues = _int_field(form, "queues", 1, 8)
        perm = _perm_field(form)
        brokers = await admin.create_topic(topic, queues, str(form.get("cluster") or "") or None, perm)
        where = ", ".join(b.broker_name for b in brokers)
        return f"/topics/{_quote(topic)}", f"topic {topic} created with {queues} queues on {where}"

    @page("topic.html")
    async def topic(request: Request) -> dict[str, Any]:
        name = request.path_params["topic"]
        try:
            route = await admin.topic_route(name)
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            raise _NotFound(f"topic {name} does not exist") from None
        status = await admin.topic_status(name)
        return {
            "topic": name,
            "route": sorted(route.queue_datas, key=lambda q: q.broker_name),
            "queues": status,
            "total": sum(q.messages for q in status),
        }

    @action
    async def update_topic(form: FormData, request: Request) -> tuple[str, str]:
        name = request.path_params["topic"]
        queues = _int_field(form, "queues", 1)
        perm = _perm_field(form)
        route = await admin.topic_route(name)
        fewer = any(queues < max(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas)
        taken = any(q.perm & (PERM_READ | PERM_WRITE) & ~perm for q in route.queue_datas)
        if (fewer or taken) and form.get("confirm") != name:
            what = "fewer queues" if fewer else "less permission"
            raise CometMQError(f"type the topic's name ({name}) to give it {what}")
        await admin.create_topic(name, queues, perm=perm)
        return f"/topics/{_quote(name)}", f"topic {name} now has {queues} queues, {perm_text(perm)}"

    @action
    async def delete_topic(form: FormData, request: Request) -> tuple[str, str]:
        name = request.path_params["topic"]
        if form.get("confirm") != name:
            raise CometMQError(f"type the topic's name ({name}) to delete it")
        await admin.delete_topic(name)
        return "/topics", f"topic {name} deleted"

    @action
    async def send_message(form: FormData, request: Request) -> tuple[str, str]:
        name = request.path_params["topic"]
        msg = Message(
            name,
            str(form.get("body") or "").encode(),
            tags=str(form.get("tags") or "").strip() or None,
            keys=str(form.get("keys") or "").split() or None,
        )
        result = await (await state.producer()).send(msg)
        return (
            f"/topics/{_quote(name)}",
            f"sent message {result.msg_id} to {result.queue} at offset {result.queue_offset} "
            f"({result.status.name})",
        )

    # consumer groups ---------------------------------------------------------------------------

    @page("groups.html")
    async def groups(request: Request) -> dict[str, Any]:
        show_system = request.query_params.get("system") == "1"
        info = await admin.cluster_info()
        rows = []
        hidden = 0
        for cluster_name in sorted(info.cluster_addr_table):
            for group, per_broker in (await admin.list_groups(cluster_name)).items():
                if group in SYSTEM_GROUPS and not show_system:
                    hidden += 1
                    continue
                config = next(iter(per_broker.values()))
                lag = state.sampler.group_lag.get(group)
                rows.append(
                    {
                        "group": group,
                        "cluster": cluster_name,
                        "brokers": sorted(per_broker),
                        "config": config,
                        "lag": lag.columns["lag"][-1] if lag and lag.times else None,
                    }
                )
        return {"groups": rows, "hidden": hidden, "show_system": show_system}

    @page("group.html")
    async def group(request: Request) -> dict[str, Any]:
        name = request.path_params["group"]
        cluster_name = request.query_params.get("cluster") or None
        try:
            members = await admin.consumer_connections(name, cluster_name)
        except BrokerError as exc:
            if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise
            members = None
        progress = await admin.consume_progress(name, cluster=cluster_name)
        if cluster_name is None:
            cluster_name = (await admin.masters_of())[0]
        if members is None and not progress.queues and not await admin.get_group(name, cluster_name):
            raise _NotFound(f"group {name} does not exist on any broker of cluster {cluster_name}")
        state.sampler.follow(name, cluster_name)
        topics = sorted(
            {q.topic for q in progress.queues if not q.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)}
        )
        if members is not None:
            topics = sorted(set(topics) | {t for t in members.subscriptions if not t.startswith("%")})
        return {
            "group": name,
            "cluster": cluster_name,
            "members": members,
            "progress": progress,
            "topics": topics,
        }

    async def group_lag(request: Request) -> Response:
        name = request.path_params["group"]
        state.sampler.keep_following(name)  # its chart is open
        series = state.sampler.group_lag.get(name)
        return JSONResponse(series.to_json() if series is not None else {"t": [], "lag": []})

    @action
    async def reset_offsets(form: FormData, request: Request) -> tuple[str, str]:
        name = request.path_params["group"]
        if form.get("confirm") != name:
            raise CometMQError(f"type the group's name ({name}) to reset its offsets")
        topic_name = _text_field(form, "topic")
        to = str(form.get("to") or "")
        if to in ("earliest", "latest"):
            result = await admin.reset_offsets(
                name, topic_name, to="earliest" if to == "earliest" else "latest"
            )
            where = to
        elif to == "time":
            timestamp = _parse_local_time(_text_field(form, "time"), "time")
            result = await admin.reset_offsets(name, topic_name, timestamp=timestamp)
            where = format_time(timestamp)
        else:
            raise CometMQError("say where to reset to: earliest, latest or a time")
        back = f"/groups/{_quote(name)}"
        if form.get("cluster"):
            back += "?" + urlencode({"cluster": form.get("cluster")})
        return (
            back,
            f"offsets of {name} on {topic_name} reset to {where}: {counted(len(result.queues), 'queue')}, "
            f"{counted(result.consumers_notified, 'consumer')} told",
        )

    # messages -----------------------------------------------------------------------------------

    @page("messages.html")
    async def messages(request: Request) -> dict[str, Any]:
        query = request.query_params
        by = query.get("by") or "key"
        topic_name = (query.get("topic") or "").strip()
        value = (query.get("value") or "").strip()
        found: list[DecodedRecord] | None = None
        error = None
        if "by" in query and by in ("key", "time") and not topic_name:
            error = f"a search by {by} needs a topic"
        elif by == "id" and value:
            found = await admin.view_message(value, topic_name or None)
        elif by == "key" and topic_name and value:
            found = await admin.query_message(topic_name, value, max_num=MAX_MESSAGES)
        elif by == "time" and topic_name:
            begin = _parse_local_time(query.get("begin") or "", "from") if query.get("begin") else 0
            end = _parse_local_time(query.get("end") or "", "to") if query.get("end") else None
            found = await _read_time_range(admin, topic_name, begin, end)
        return {
            "by": by,
            "topic": topic_name,
            "value": value,
            "begin": query.get("begin") or "",
            "end": query.get("end") or "",
            "found": found,
            "limit": MAX_MESSAGES,
            "error": error,
        }

    @page("message.html")
    async def message(request: Request) -> dict[str, Any]:
        msg_id = request.query_params.get("id") or ""
        topic_name = request.query_params.get("topic") or None
        records = await admin.view_message(msg_id, topic_name) if msg_id else []
        if not records:
            raise CometMQError(
                f"no message with the id {msg_id!r}" + (f" in {topic_name}" if topic_name else "")
            )
        rec = records[0]
        kind, body = body_text(rec)
        return {
            "rec": rec,
            "msg_id": message_id(rec),
            "props": sorted(decode_properties(rec.properties).items()),
            "born_host": host_text(rec.born_host),
            "store_host": host_text(rec.store_host),
            "body_kind": kind,
            "body": body,
        }

    @action
    async def resend_message(form: FormData, request: Request) -> tuple[str, str]:
        msg_id = _text_field(form, "id")
        group_name = _text_field(form, "group")
        records = await admin.view_message(msg_id, str(form.get("topic") or "") or None)
        if not records:
            raise CometMQError(f"no message with the id {msg_id}")
        resent = await admin.resend_to_group(records[0], group_name)
        back = "/messages/view?" + urlencode({"id": msg_id, "topic": form.get("topic") or ""})
        return back, f"message {msg_id} resent to group {group_name} ({resent.topic}, copy {resent.msg_id})"

    # dead letters -------------------------------------------------------------------------------

    @page("dlq.html")
    async def dead_letters(request: Request) -> dict[str, Any]:
        group_name = (request.query_params.get("group") or "").strip()
        records = await admin.dead_letters(group_name, max_num=MAX_MESSAGES) if group_name else None
        rows = []
        for rec in records or ():
            props = decode_properties(rec.properties)
            rows.append(
                {
                    "id": message_id(rec),
                    "offset_id": rec.offset_msg_id,
                    "original_topic": props.get("RETRY_TOPIC", "-"),
                    "failures": rec.reconsume_times,
                    "stored": rec.store_timestamp,
                    "preview": body_text(rec)[1][:80],
                }
            )
        return {"group": group_name, "rows": rows if records is not None else None, "limit": MAX_MESSAGES}

    @action
    async def resend_dead_letters(form: FormData, request: Request) -> tuple[str, str]:
        group_name = _text_field(form, "group")
        wanted = str(form.get("id") or "")  # empty: every dead letter
        force = form.get("force") == "1"
        back = f"/dlq?{urlencode({'group': group_name})}"
        looked_at = resent = skipped = 0
        async with contextlib.aclosing(admin.dead_letter_batches(group_name)) as batches:
            async for batch in batches:
                for rec in batch:
                    if wanted and rec.offset_msg_id != wanted:
                        continue
                    if resent == MAX_RESEND:
                        break
                    looked_at += 1
                    if not force and await admin.resent_copies(rec):
                        skipped += 1
                        continue
                    await admin.resend_dead_letter(rec)
                    resent += 1
                if resent == MAX_RESEND or (wanted and looked_at):
                    break
        if wanted and not looked_at:
            raise CometMQError(f"group {group_name} has no dead letter {wanted}")
        notice = f"resent {resent} of {looked_at} dead letters of {group_name}"
        if skipped:
            notice += f", {skipped} skipped (resent before; tick 'again' to resend them too)"
        if resent == MAX_RESEND:
            notice += f"; one click resends {MAX_RESEND} at most: click again for the rest"
        return back, notice

    # message trace ------------------------------------------------------------------------------

    @page("trace.html")
    async def trace(request: Request) -> dict[str, Any]:
        msg_id = (request.query_params.get("id") or "").strip()
        trace_topic = (request.query_params.get("trace_topic") or "").strip() or TRACE_TOPIC
        contexts = None
        if msg_id:
            try:
                contexts = await admin.message_trace(msg_id, trace_topic)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                contexts = []  # no client has traced into that topic yet
        return {
            "msg_id": msg_id,
            "trace_topic": trace_topic,
            "events": [trace_event(ctx) for ctx in contexts] if contexts is not None else None,
        }

    routes = [
        Route("/", cluster),
        Route("/api/rates", rates),
        Route("/topics", topics),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{topic}", topic),
        Route("/topics/{topic}/update", update_topic, methods=["POST"]),
        Route("/topics/{topic}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{topic}/send", send_message, methods=["POST"]),
        Route("/groups", groups),
        Route("/groups/{group}", group),
        Route("/groups/{group}/reset", reset_offsets, methods=["POST"]),
        Route("/api/groups/{group}/lag", group_lag),
        Route("/messages", messages),
        Route("/messages/view", message),
        Route("/messages/resend", resend_message, methods=["POST"]),
        Route("/dlq", dead_letters),
        Route("/dlq/resend", resend_dead_letters, methods=["POST"]),
        Route("/trace", trace),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=sorted(allowed))]
    )
    app.state.dashboard = state
    return app


def _quote(name: str) -> str:
    return quote(name, safe="")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, BrokerError):
        return f"{exc.remark or 'request failed'} (response code {exc.code})"
    return str(exc) or type(exc).__name__


async def _form(request: Request) -> FormData:
    """The fields of a posted form. The pages' forms are all URL-encoded (no file uploads), which the
    standard library reads; Starlette's own form parser would need python-multipart. A body over
    MAX_FORM_BYTES is refused, and not read further than that."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise HTTPException(415, "a dashboard form is posted as application/x-www-form-urlencoded")
    too_large = HTTPException(413, f"a dashboard form is at most {MAX_FORM_BYTES} bytes")
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise too_large
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(400, "a form's fields must be UTF-8") from None
    fields: list[tuple[str, str | UploadFile]] = list(parse_qsl(text, keep_blank_values=True))
    return FormData(fields)


def _check_origin(request: Request, allowed_hosts: frozenset[str]) -> None:
    """Refuse a form posted from another site: browsers send the posting page's Origin (else its
    Referer) with every form, which must name an allowed host and the port served; a request with
    neither comes from no browser (curl, a script)."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return
    try:
        posted_from = urlsplit(origin)
        host = posted_from.hostname or ""
        named = f"[{host}]" if ":" in host else host  # an IPv6 address is allowed in brackets
        from_here = named in allowed_hosts and posted_from.port == request.url.port
    except ValueError:  # not a URL, or a port out of range
        from_here = False
    if not from_here:
        raise HTTPException(403, "a form of the dashboard must be posted from the dashboard")


async def _read_time_range(
    admin: AdminClient, topic: str, begin_ms: int, end_ms: int | None
) -> list[DecodedRecord]:
    """Messages of ``topic`` stored in ``[begin_ms, end_ms]``, oldest first, at most MAX_MESSAGES: each
    queue read from its first message at or after ``begin_ms`` with pulls that commit nothing."""
    found: list[DecodedRecord] = []
    subscription = SubscriptionData(topic)
    for queue in await admin.readable_queues(topic):
        found += await _read_queue(admin, queue, subscription, begin_ms, end_ms)
    found.sort(key=lambda rec: rec.store_timestamp)
    return found[:MAX_MESSAGES]


async def _read_queue(
    admin: AdminClient, queue: MessageQueue, subscription: SubscriptionData, begin_ms: int, end_ms: int | None
) -> list[DecodedRecord]:
    bounds = await admin.offset_bounds(queue)
    offset = await admin.first_offset_at(queue, begin_ms, group=TOOLS_CONSUMER_GROUP, bounds=bounds)
    records: list[DecodedRecord] = []
    while offset < bounds[1] and len(records) < MAX_MESSAGES:
        result = await admin.pull_records(
            queue, offset, _PULL_BATCH, group=TOOLS_CONSUMER_GROUP, subscription=subscription
        )
        if result.status is not PullStatus.FOUND:
            break
        for rec in decode_records(result.body):
            if end_ms is not None and rec.store_timestamp > end_ms:
                return records
            records.append(rec)
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return records
