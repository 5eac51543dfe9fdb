"""The RemotingCommand value object: one request or response of the RocketMQ remoting protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cometmq.remoting.codes import (
    CURRENT_VERSION,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class RemotingCommand:
    """A request or response.

    ``ext_fields`` holds the "custom header" as Java sees it: every value a string. ``body`` is the
    payload; a response may instead carry ``body_parts`` (for instance memoryviews of stored
    records) that are written to the socket one after the other without being joined.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    body_parts: Sequence[Buffer] | None = None
    language: str = "PYTHON"
    version: int = CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @property
    def body_length(self) -> int:
        if self.body_parts is None:
            return len(self.body)
        return sum(len(part) for part in self.body_parts)

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
