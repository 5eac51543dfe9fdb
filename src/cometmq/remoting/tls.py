"""TLS for servers and their clients, under RocketMQ's settings (its ``TlsSystemConfig`` keys).

A server's ``tls.server.mode`` is one of:

- ``disabled``: plaintext only. A client that starts a TLS handshake is closed (and logged).
- ``permissive``: TLS and plaintext on one port, told apart by the first byte a client sends: 0x16
  starts a TLS handshake record, a remoting frame never starts so (its length would exceed the frame
  limit).
- ``enforcing``: TLS only; a plaintext client is refused.

``tls.server.need.client.auth`` (none, optional, require) asks clients for a certificate signed by
``tls.server.trustCertPath``. ``tls.enable`` makes the process's own outgoing connections (a broker's
registration, a slave's HA link) use TLS with the ``tls.client.*`` settings. ``tls.config.file`` names
a properties file holding any of these keys; its values win over the ones given with it, as in
RocketMQ.

Two defaults differ from RocketMQ's on purpose: the mode is ``disabled`` (RocketMQ: permissive), and
``tls.client.authServer`` is true (RocketMQ: false), so an outgoing connection checks the server's
certificate chain and that it names the host connected to, as ``ssl.create_default_context`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from cometmq.errors import ConfigError
from cometmq.javaprops import read_properties

__all__ = [
    "FIRST_BYTE_TIMEOUT_S",
    "HANDSHAKE_TIMEOUT_S",
    "TLS_HANDSHAKE_BYTE",
    "TLS_KEYS",
    "ClientAuth",
    "TlsListener",
    "TlsMode",
    "TlsSettings",
    "handshake_failure",
]

log = logging.getLogger("cometmq.remoting")

_E = TypeVar("_E", bound=enum.Enum)

# How long a connection accepted by a server with TLS on may take to send its first byte (which tells
# TLS from plaintext), then to complete its TLS handshake.
FIRST_BYTE_TIMEOUT_S: Final = 30.0
HANDSHAKE_TIMEOUT_S: Final = 10.0
# At most one warning in this many seconds about failing accepts (out of file descriptors).
_WARN_EVERY_S: Final = 60.0

# The content type of a TLS handshake record: the first byte of every ClientHello.
TLS_HANDSHAKE_BYTE: Final = 0x16


class TlsMode(enum.Enum):
    """``tls.server.mode``."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(enum.Enum):
    """``tls.server.need.client.auth``: whether a TLS client must show a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


_MODE = "tls.server.mode"
_SERVER_CERT = "tls.server.certPath"
_SERVER_KEY = "tls.server.keyPath"
_SERVER_KEY_PASSWORD = "tls.server.keyPassword"
_CLIENT_AUTH = "tls.server.need.client.auth"
_SERVER_TRUST = "tls.server.trustCertPath"
_CLIENT_ENABLE = "tls.enable"
_CLIENT_CERT = "tls.client.certPath"
_CLIENT_KEY = "tls.client.keyPath"
_CLIENT_KEY_PASSWORD = "tls.client.keyPassword"
_CLIENT_TRUST = "tls.client.trustCertPath"
_AUTH_SERVER = "tls.client.authServer"
_CONFIG_FILE = "tls.config.file"

TLS_KEYS: Final = frozenset(
    {
        _MODE,
        _SERVER_CERT,
        _SERVER_KEY,
        _SERVER_KEY_PASSWORD,
        _CLIENT_AUTH,
        _SERVER_TRUST,
        _CLIENT_ENABLE,
        _CLIENT_CERT,
        _CLIENT_KEY,
        _CLIENT_KEY_PASSWORD,
        _CLIENT_TRUST,
        _AUTH_SERVER,
        _CONFIG_FILE,
    }
)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A process's TLS settings: the server side (``mode`` …) and its own outgoing connections
    (``client_enable`` …). Key passwords stay out of the repr."""

    mode: TlsMode = TlsMode.DISABLED
    server_cert_path: str = ""
    server_key_path: str = ""
    server_key_password: str = field(default="", repr=False)
    need_client_auth: ClientAuth = ClientAuth.NONE
    server_trust_cert_path: str = ""
    client_enable: bool = False
    client_cert_path: str = ""
    client_key_path: str = ""
    client_key_password: str = field(default="", repr=False)
    client_trust_cert_path: str = ""
    client_auth_server: bool = True

    def updated(self, values: Mapping[str, Any]) -> TlsSettings:
        """These settings, or the ones the ``tls.*`` keys of *values* give if it has any: the keys of
        one source (a file, the flags) are taken together, as RocketMQ reads them."""
        given = {key: str(value) for key, value in values.items() if key in TLS_KEYS and value is not None}
        return TlsSettings.from_properties(given) if given else self

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TlsSettings:
        """The settings the ``tls.*`` keys of *props* give (other keys are not looked at); ConfigError
        for a value that is not one of its key's, a ``tls.config.file`` that cannot be read, or a
        server mode other than disabled without a certificate and key."""
        values = {key: str(value).strip() for key, value in props.items() if key in TLS_KEYS}
        config_file = values.get(_CONFIG_FILE, "")
        if config_file:
            try:
                from_file = read_properties(config_file)
            except OSError as exc:
                raise ConfigError(
                    f"cannot read {_CONFIG_FILE}={config_file}: {exc.strerror or exc}"
                ) from None
            values.update({key: value for key, value in from_file.items() if key in TLS_KEYS})
        settings = cls(
            mode=_choice(TlsMode, _MODE, values.get(_MODE, TlsMode.DISABLED.value)),
            server_cert_path=values.get(_SERVER_CERT, ""),
            server_key_path=values.get(_SERVER_KEY, ""),
            server_key_password=values.get(_SERVER_KEY_PASSWORD, ""),
            need_client_auth=_choice(
                ClientAuth, _CLIENT_AUTH, values.get(_CLIENT_AUTH, ClientAuth.NONE.value)
            ),
            server_trust_cert_path=values.get(_SERVER_TRUST, ""),
            # Java's Boolean.parseBoolean: "true" in any case, anything else false.
            client_enable=values.get(_CLIENT_ENABLE, "false").lower() == "true",
            client_cert_path=values.get(_CLIENT_CERT, ""),
            client_key_path=values.get(_CLIENT_KEY, ""),
            client_key_password=values.get(_CLIENT_KEY_PASSWORD, ""),
            client_trust_cert_path=values.get(_CLIENT_TRUST, ""),
            client_auth_server=values.get(_AUTH_SERVER, "true").lower() == "true",
        )
        settings._check()
        return settings

    def _check(self) -> None:
        if self.mode is not TlsMode.DISABLED and not (self.server_cert_path and self.server_key_path):
            raise ConfigError(f"{_MODE}={self.mode.value} needs {_SERVER_CERT} and {_SERVER_KEY}")
        if self.need_client_auth is not ClientAuth.NONE and not self.server_trust_cert_path:
            # RocketMQ then trusts any client certificate; CometMQ asks for the CA that signs them.
            raise ConfigError(
                f"{_CLIENT_AUTH}={self.need_client_auth.value} needs {_SERVER_TRUST} (the CA certificates "
                "client certificates must be signed by)"
            )
        if bool(self.client_cert_path) != bool(self.client_key_path):
            raise ConfigError(f"{_CLIENT_CERT} and {_CLIENT_KEY} go together: give both or neither")

    def server_context(self) -> ssl.SSLContext | None:
        """The context a server's TLS connections use (None: mode disabled). ConfigError for a
        certificate, key or trust file that cannot be loaded."""
        if self.mode is TlsMode.DISABLED:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(context, self.server_cert_path, self.server_key_path, self.server_key_password, "server")
        if self.need_client_auth is not ClientAuth.NONE:
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.need_client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
            )
            _load_trust(context, self.server_trust_cert_path, _SERVER_TRUST)
        return context

    def client_context(self) -> ssl.SSLContext | None:
        """The context of the process's own outgoing connections (None: ``tls.enable`` is false).
        ConfigError for a file that cannot be loaded."""
        if not self.client_enable:
            return None
        if self.client_auth_server:
            context = ssl.create_default_context()
            if self.client_trust_cert_path:
                _load_trust(context, self.client_trust_cert_path, _CLIENT_TRUST)
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_path:
            _load_chain(
                context, self.client_cert_path, self.client_key_path, self.client_key_password, "client"
            )
        return context


def _choice(kind: type[_E], key: str, text: str) -> _E:
    for member in kind:
        if member.value == text.lower():
            return member
    raise ConfigError(f"{key}={text!r} is not one of {', '.join(m.value for m in kind)}")


def _load_chain(context: ssl.SSLContext, cert: str, key: str, password: str, side: str) -> None:
    try:
        context.load_cert_chain(cert, key, password or None)
    except (OSError, ssl.SSLError) as exc:
        # Neither the password nor the key's bytes go into the message.
        raise ConfigError(
            f"cannot load the TLS certificate tls.{side}.certPath={cert} with its key "
            f"tls.{side}.keyPath={key}: {getattr(exc, 'strerror', None) or exc.args[-1]}"
        ) from None


def _load_trust(context: ssl.SSLContext, path: str, key: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load the CA certificates {key}={path}: {getattr(exc, 'strerror', None) or exc.args[-1]}"
        ) from None


def handshake_failure(exc: BaseException) -> str:
    """Why a TLS handshake failed, in a few words (OpenSSL's reason when it gave one)."""
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class TlsListener:
    """The listening socket of a server with TLS on (permissive or enforcing). Each accepted socket
    waits for its first byte (at most FIRST_BYTE_TIMEOUT_S, then it is closed) and is handed
    to *serve* with whether that byte starts a TLS handshake; *serve* owns the socket from then on.
    *admit* is asked before the wait: False closes the socket at once (a server at its connection
    limit)."""

    def __init__(
        self,
        serve: Callable[[socket.socket, str, bool], Awaitable[None]],
        admit: Callable[[], bool] = lambda: True,
    ) -> None:
        self._serve = serve
        self._admit = admit
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self.pending: set[asyncio.Task[None]] = set()  # one per accepted socket being served
        self._last_warning = -math.inf

    @property
    def port(self) -> int:
        if self._socket is None:
            return 0
        port: int = self._socket.getsockname()[1]
        return port

    async def start(self, host: str, port: int, backlog: int = 1024) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        listening = socket.socket(family, socket.SOCK_STREAM)
        try:
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind(address)
            listening.listen(backlog)
            listening.setblocking(False)
        except BaseException:
            listening.close()
            raise
        self._socket = listening
        self._accepting = loop.create_task(self._accept_forever(listening), name="tls-accept")

    async def _accept_forever(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors, a connection reset before accept
                now = loop.time()
                if now - self._last_warning >= _WARN_EVERY_S:
                    self._last_warning = now
                    log.warning("accepting a connection on port %d failed: %s", self.port, exc)
                await asyncio.sleep(0.1)
                continue
            if not self._admit():
                sock.close()
                continue
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            task = loop.create_task(self._classify(sock, peer))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    async def _classify(self, sock: socket.socket, peer: str) -> None:
        try:
            first = await _first_byte(sock, FIRST_BYTE_TIMEOUT_S)
        except (OSError, TimeoutError):
            first = None
        except asyncio.CancelledError:  # the listener stops
            sock.close()
            raise
        if first is None:  # closed (or reset, or silent too long) before sending anything
            sock.close()
            return
        await self._serve(sock, peer, first == TLS_HANDSHAKE_BYTE)

    async def stop(self) -> None:
        accepting, self._accepting = self._accepting, None
        tasks = [*self.pending, *((accepting,) if accepting is not None else ())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._socket is not None:
            self._socket.close()
            self._socket = None


async def _first_byte(sock: socket.socket, timeout: float) -> int | None:
    """The first byte *sock* received, left in its buffer (MSG_PEEK); None when the peer closed first."""
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    try:
        async with asyncio.timeout(timeout):
            while True:
                await readable.wait()
                readable.clear()
                with contextlib.suppress(BlockingIOError):  # else a spurious wake-up: wait again
                    data = sock.recv(1, socket.MSG_PEEK)
                    return data[0] if data else None
    finally:
        loop.remove_reader(fd)
