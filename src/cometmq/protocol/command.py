"""The RemotingCommand value object: one request or response of the RocketMQ remoting protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cometmq.protocol.codes import (
    CURRENT_VERSION,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

Buffer = bytes | bytearray | memoryview


class RemotingCommand:
    """A request or response.

    ``ext_fields`` holds the "custom header" as Java sees it: every value a string. ``body`` is the
    payload; a response may instead carry ``body_parts`` (for instance memoryviews of stored
    records) that are written to the socket one after the other without being joined.

    A large received frame keeps its body in the frame's own receive buffer: ``body_buffer`` is that
    buffer without a copy (a read-only memoryview), and ``body`` copies it into ``bytes`` on first use
    only. Code that just needs the bytes' contents (length, ``struct``, ``pyarrow.py_buffer``,
    ``zlib``, writing them on) should read ``body_buffer``.
    """

    # A hand-written class rather than a dataclass: ``body`` is a property that copies a received view
    # on first use, which a dataclass field cannot be. Same constructor, repr and equality otherwise.
    __slots__ = (
        "_body",
        "body_parts",
        "code",
        "ext_fields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview = b"",
        body_parts: Sequence[Buffer] | None = None,
        language: str = "PYTHON",
        version: int = CURRENT_VERSION,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, str] = {} if ext_fields is None else ext_fields
        self._body = body
        self.body_parts = body_parts
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @property
    def body(self) -> bytes:
        body = self._body
        if isinstance(body, bytes):
            return body
        # Copied once; the bytes replace the view, so the frame's buffer is freed with the view.
        copied = self._body = bytes(body)
        return copied

    @body.setter
    def body(self, value: bytes | memoryview) -> None:
        self._body = value

    @property
    def body_buffer(self) -> bytes | memoryview:
        """The body without copying it: ``bytes``, or a read-only view of the received frame."""
        return self._body

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @property
    def body_length(self) -> int:
        if self.body_parts is None:
            return len(self._body)
        return sum(map(len, self.body_parts))

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _FIELD_NAMES)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        fields = zip(_FIELD_NAMES, self._fields(), strict=True)
        shown = ", ".join(f"{name}={value!r}" for name, value in fields)
        return f"RemotingCommand({shown})"

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        body_parts: Sequence[Buffer] | None = None,
    ) -> RemotingCommand:
        """A response to this request: same opaque, response flag, same serialization."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            body_parts=body_parts,
            language="JAVA",
            version=CURRENT_VERSION,
            serialize_type=self.serialize_type,
        )


_FIELD_NAMES = (
    "code",
    "opaque",
    "flag",
    "remark",
    "ext_fields",
    "body",
    "body_parts",
    "language",
    "version",
    "serialize_type",
)


def language_name(value: object) -> str:
    """The LanguageCode name for a JSON ``language`` value (a name, or an ordinal from lenient peers)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        try:
            return LanguageCode(value).name
        except ValueError:
            return "OTHER"
    return "OTHER"
