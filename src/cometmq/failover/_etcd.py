"""A small asyncio client for etcd v3, over its JSON gateway (``/v3/...``).

The maintained gRPC client packages for etcd v3 are stale or pin an old protobuf; the JSON gateway is
etcd's stable public API (the one Patroni talks to as well), and it needs nothing beyond httpx. In the
gateway's JSON, keys and values are base64 and 64-bit integers are strings; a field holding its default
(0, false, PUT) is left out.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from cometmq.errors import CometMQError

__all__ = [
    "Compare",
    "Delete",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailable",
    "EventType",
    "KeyValue",
    "Put",
    "WatchEvent",
]


class EtcdError(CometMQError):
    """etcd answered a request with an error (such as "requested lease not found")."""


class EtcdUnavailable(EtcdError):
    """No etcd endpoint answered (or none that answered could serve the request, e.g. for lack of quorum)."""


# gRPC status codes etcd answers when another member might serve the request: CANCELLED,
# DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE (no leader, not enough started members, a member stopping).
_RETRY_ELSEWHERE = frozenset({1, 4, 13, 14})


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int


class EventType(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    # For a DELETE, the value is empty and only the key and mod_revision are meaningful.
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction: *target* of *key* compared to *value* (etcd's Compare)."""

    key: str
    target: Literal["VERSION", "CREATE", "MOD", "VALUE", "LEASE"]
    value: int | bytes
    result: Literal["EQUAL", "GREATER", "LESS", "NOT_EQUAL"] = "EQUAL"

    @classmethod
    def absent(cls, key: str) -> Compare:
        # A key that does not exist has create_revision 0.
        return cls(key, "CREATE", 0)

    @classmethod
    def mod_revision(cls, key: str, revision: int) -> Compare:
        return cls(key, "MOD", revision)

    def to_json(self) -> dict[str, Any]:
        field = {
            "VERSION": "version",
            "CREATE": "create_revision",
            "MOD": "mod_revision",
            "VALUE": "value",
            "LEASE": "lease",
        }[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": self.result, field: value}


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0

    def to_json(self) -> dict[str, Any]:
        put: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            put["lease"] = str(self.lease)
        return {"request_put": put}


@dataclass(frozen=True, slots=True)
class Delete:
    key: str

    def to_json(self) -> dict[str, Any]:
        return {"request_delete_range": {"key": _b64(self.key)}}


Operation = Put | Delete


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def _prefix_end(prefix: str) -> str:
    """The range end that makes [prefix, end) every key starting with *prefix* (etcd's convention)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return base64.b64encode(bytes(raw)).decode("ascii")
        raw.pop()
    return _b64(b"\0")


def _key_value(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=base64.b64decode(kv["key"]).decode(),
        value=base64.b64decode(kv.get("value", "")),
        mod_revision=int(kv.get("mod_revision", 0)),
        create_revision=int(kv.get("create_revision", 0)),
        lease=int(kv.get("lease", 0)),
    )


class EtcdClient:
    """Calls etcd at the first of *endpoints* (``host:port``) that answers, moving to the next when one
    does not; :class:`EtcdUnavailable` when none does within *timeout_s* each."""

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = 2.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        self._timeout = httpx.Timeout(timeout_s)
        self._http = httpx.AsyncClient(timeout=self._timeout)
        self._current = 0

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last_error = "no endpoint tried"
        for attempt in range(len(self.endpoints)):
            index = (self._current + attempt) % len(self.endpoints)
            endpoint = self.endpoints[index]
            try:
                response = await self._http.post(f"{endpoint}/v3/{path}", json=body)
            except httpx.HTTPError as e:
                last_error = f"{endpoint}: {e!r}"
                continue
            try:
                answer: dict[str, Any] = response.json()
            except ValueError:
                last_error = f"{endpoint}: HTTP {response.status_code}, not JSON"
                continue
            if response.status_code != 200:
                message = f"{endpoint}: {answer.get('message') or answer}"
                if answer.get("code") not in _RETRY_ELSEWHERE:
                    raise EtcdError(message)
                last_error = message
                continue
            self._current = index
            return answer
        raise EtcdUnavailable(f"etcd unavailable ({last_error})")

    async def grant(self, ttl_s: int) -> int:
        """A new lease of *ttl_s* seconds; returns its id."""
        answer = await self._call("lease/grant", {"TTL": str(ttl_s)})
        return int(answer["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renews *lease*; returns its remaining TTL in seconds, 0 when etcd no longer has it."""
        answer = await self._call("lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """Ends *lease* and deletes every key put under it (no error if it is gone already)."""
        try:
            await self._call("lease/revoke", {"ID": str(lease)})
        except EtcdError as e:
            if isinstance(e, EtcdUnavailable) or "lease not found" not in str(e):
                raise

    async def get(self, key: str) -> KeyValue | None:
        answer = await self._call("kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs", [])
        return _key_value(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key starting with *prefix*, sorted by key, and the store's revision they were read at."""
        answer = await self._call("kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)})
        return [_key_value(kv) for kv in answer.get("kvs", [])], int(answer["header"]["revision"])

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> None:
        await self.txn([], [Put(key, value, lease)], [])

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[Operation], failure: Sequence[Operation]
    ) -> bool:
        """Runs *success* if every comparison holds, else *failure*, atomically; returns which."""
        answer = await self._call(
            "kv/txn",
            {
                "compare": [c.to_json() for c in compare],
                "success": [op.to_json() for op in success],
                "failure": [op.to_json() for op in failure],
            },
        )
        return bool(answer.get("succeeded", False))

    async def watch(
        self, key_or_prefix: str, *, prefix: bool = False, start_revision: int = 0
    ) -> AsyncIterator[WatchEvent]:
        """The changes of one key (or of every key under a prefix) from *start_revision* (0: from now)
        on, until the caller stops iterating; EtcdUnavailable when the stream cannot start or breaks."""
        request: dict[str, Any] = {"key": _b64(key_or_prefix)}
        if prefix:
            request["range_end"] = _prefix_end(key_or_prefix)
        if start_revision:
            request["start_revision"] = str(start_revision)
        endpoint = self.endpoints[self._current]
        # A watch stays open for as long as nothing changes: no read timeout.
        timeout = httpx.Timeout(self._timeout.connect, read=None)
        try:
            async with self._http.stream(
                "POST", f"{endpoint}/v3/watch", json={"create_request": request}, timeout=timeout
            ) as response:
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    message = json.loads(line)
                    result = message.get("result")
                    if result is None:
                        raise EtcdUnavailable(f"etcd watch at {endpoint} failed: {message}")
                    if result.get("canceled"):
                        raise EtcdUnavailable(f"etcd watch at {endpoint} canceled: {result}")
                    for event in result.get("events", []):
                        yield WatchEvent(EventType(event.get("type", "PUT")), _key_value(event["kv"]))
        except httpx.HTTPError as e:
            self._current = (self._current + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"etcd watch at {endpoint} broke: {e!r}") from e
        # The server ended the stream (it is stopping): to the watcher, as good as unreachable.
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"etcd watch at {endpoint} ended")
