"""Request signatures of RocketMQ 4.x's ACL (``AclClientRPCHook`` on the client, checked by the
server), which RocketMQ 5 keeps for remoting clients.

A client adds the ext fields ``AccessKey`` (and ``SecurityToken`` if it has one), then ``Signature``:
Base64 of HMAC-SHA1 keyed with the secret key's UTF-8 over the *content*: the UTF-8 of the values of
every ext field but ``Signature`` and ``_UNIQUE_KEY_QUERY``, in the order of their keys, followed by
the body. The server computes the same over what it received. (Java sorts the keys in a ``TreeMap``,
by UTF-16 units; ext-field keys are ASCII, where that is the order of Python's ``sorted``.)

RocketMQ's signature does not cover the request code, so a request seen on the wire could be sent
again under another code. :func:`sign` also adds ``CometMQRequestCode``, the code, signed like any
field: a CometMQ server refuses a request whose field is not its code, and other servers ignore a
field they do not know (and still verify the signature, which covers it).
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
from typing import Final

from cometmq.errors import ConfigError
from cometmq.protocol.codes import UNIQUE_KEY_QUERY_FLAG
from cometmq.protocol.command import RemotingCommand
from cometmq.protocol.ha import AUTH_LABEL

ACCESS_KEY: Final = "AccessKey"
SECURITY_TOKEN: Final = "SecurityToken"
SIGNATURE: Final = "Signature"
REQUEST_CODE: Final = "CometMQRequestCode"

_UNSIGNED_FIELDS: Final = frozenset((SIGNATURE, UNIQUE_KEY_QUERY_FLAG))


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """An access key and its secret (and, for RocketMQ's STS users, a security token) to sign
    requests with. Its repr shows the access key only."""

    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    security_token: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_json(cls, text: str) -> Credentials:
        """Credentials from ``{"accessKey": .., "secretKey": ..[, "securityToken": ..]}`` (RocketMQ 5's
        ``innerClientAuthenticationCredentials``); ConfigError says what is wrong, never the secret."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"credentials are not valid JSON ({exc.__class__.__name__})") from None
        if not isinstance(value, dict):
            raise ConfigError('credentials are not a JSON object {"accessKey": .., "secretKey": ..}')
        access_key = value.get("accessKey")
        secret_key = value.get("secretKey")
        token = value.get("securityToken")
        if not isinstance(access_key, str) or not access_key:
            raise ConfigError("credentials have no accessKey (a non-empty string)")
        if not isinstance(secret_key, str):
            raise ConfigError("credentials have no secretKey (a string)")
        if token is not None and not isinstance(token, str):
            raise ConfigError("the credentials' securityToken is not a string")
        return cls(access_key, secret_key, token or None)

    def digest(self, content: bytes | bytearray | memoryview) -> bytes:
        """The HA link's AUTH answer over *content* (:func:`peer_digest`)."""
        return peer_digest(self.secret_key, content)


def utf8(text: str) -> bytes:
    """Java's ``getBytes(UTF_8)``: a lone surrogate (JSON may carry one, escaped) becomes ``?``."""
    return text.encode("utf-8", "replace")


def hmac_sha1(secret_key: str, content: bytes | bytearray | memoryview) -> bytes:
    return hmac.digest(utf8(secret_key), content, "sha1")


def peer_digest(secret_key: str, content: bytes | bytearray | memoryview) -> bytes:
    """The raw HMAC-SHA1 of *content* keyed with HMAC-SHA1(*secret_key*, ``AUTH_LABEL``), the HA link's
    AUTH answer (:mod:`cometmq.protocol.ha`). Keyed so, and not with the secret key, it is never a
    request's Signature, whatever content a peer makes a slave answer."""
    return hmac.digest(hmac_sha1(secret_key, AUTH_LABEL), content, "sha1")


def signature_of(request: RemotingCommand, secret_key: str) -> str:
    """The Signature a request carrying its present ext fields and body has under *secret_key*."""
    fields = request.ext_fields
    # The values joined, then encoded once: UTF-8 of a concatenation is the concatenation of the
    # UTF-8s. The body is fed as it is, neither copied nor joined to them.
    values = "".join([fields[key] for key in sorted(fields) if key not in _UNSIGNED_FIELDS])
    mac = hmac.new(utf8(secret_key), utf8(values), "sha1")
    if request.body_parts is not None:
        for part in request.body_parts:
            mac.update(part)
    else:
        mac.update(request.body_buffer)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(request: RemotingCommand, credentials: Credentials) -> None:
    """Add AccessKey (and SecurityToken), CometMQRequestCode and the Signature over the request as it
    now is."""
    fields = request.ext_fields
    fields.pop(SIGNATURE, None)
    fields[ACCESS_KEY] = credentials.access_key
    fields[REQUEST_CODE] = str(request.code)
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    fields[SIGNATURE] = signature_of(request, credentials.secret_key)
