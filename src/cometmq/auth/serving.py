"""Access control as a broker or a name server runs it, from the keys both read:

- ``aclEnable``: every request of a code the server serves is checked (:meth:`AccessControl.check`)
  before its handler sees it;
- ``plainAclFile``: a 4.x ``plain_acl.yml``, re-read when it changes (checked every 2 s);
- ``authConfigPath``: the directory of ``auth.json``, the users and ACLs created over the wire;
- ``initAuthenticationUser``: a super user created at start unless a stored user has its name.

The users and ACLs requests (3001-3010) are served whether or not ``aclEnable`` is on, so that users
can be made before access control is turned on; while it is off, only to clients on this machine
(anyone else could make themselves a Super user, ready for when it is turned on).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cometmq.auth import AccessControl, AuthStore, User, UserStatus, UserType, auth_admin_handlers
from cometmq.auth._addresses import client_ip
from cometmq.errors import AuthError, CometMQError, ConfigError
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.remoting import Connection, RequestGate, RequestHandler
from cometmq.remoting.tls import TlsMode
from cometmq.remoting.transport import HandlerResult

log = logging.getLogger("cometmq.auth")

# How often a plain_acl.yml is looked at for a change (RocketMQ 4.x watches its file as often).
PLAIN_ACL_CHECK_INTERVAL_S: Final = 2.0

# What a client on another machine is answered to a users or ACLs request while aclEnable is off.
LOCAL_ONLY_REMARK: Final = "user and ACL requests are accepted only from this machine while aclEnable=false"


@dataclass(frozen=True, slots=True)
class AclSettings:
    """The access-control keys of a broker's or a name server's configuration."""

    enabled: bool = False
    plain_acl_file: str = ""
    auth_config_path: Path = field(default_factory=Path)
    # Raw JSON {"username": .., "password": ..}; kept out of the repr, it holds a password.
    init_authentication_user: str = field(default="", repr=False)


def _init_user(text: str) -> User | None:
    """The user ``initAuthenticationUser`` names, or None when it is empty. ConfigError naming the key
    (never the value: it holds a password) when it is not that JSON."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("username"), str)
        or not value["username"].strip()
        or not isinstance(value.get("password"), str)
    ):
        raise ConfigError(
            'initAuthenticationUser is not JSON {"username": "..", "password": ".."} with a username'
        )
    return User(
        username=value["username"],
        password=value["password"],
        user_type=UserType.SUPER,
        user_status=UserStatus.ENABLE,
    )


class ServerAccess:
    """The users and ACLs a server keeps, and the check of every request when ``aclEnable`` is on.

    Made once per server, or once for the name server and the broker of ``cometmq standalone``, which
    share it. ConfigError for settings that cannot work: an ``initAuthenticationUser`` that is not its
    JSON, or ``aclEnable`` with no user that could ever be authenticated.

    *cluster* names the ``Cluster`` resource of the requests that need one (a broker's
    ``brokerClusterName``; None at a name server, where only ``Cluster:*`` and ``*`` match).
    """

    def __init__(self, settings: AclSettings, cluster: str | None) -> None:
        self.settings = settings
        self.store = AuthStore(settings.auth_config_path)
        init_user = _init_user(settings.init_authentication_user)
        if init_user is not None and self.store.get_user(init_user.username) is None:
            self.store.create_user(init_user)
            log.info("created the super user %s (initAuthenticationUser)", init_user.username)
        plain_file = Path(settings.plain_acl_file).expanduser() if settings.plain_acl_file else None
        self._access = AccessControl(self.store, cluster, plain_file)
        if settings.enabled and not self._access.has_users():
            raise ConfigError(
                "aclEnable=true, but no user could ever be authenticated: give plainAclFile or "
                f"initAuthenticationUser (no user is stored in {settings.auth_config_path}, and no "
                "account is in a plain ACL file)"
            )
        if settings.enabled:
            # Who may do anything here, for the operator to check (one made while access control was
            # off, say).
            supers = [user.username for user in self.store.list_users() if user.user_type is UserType.SUPER]
            log.info(
                "aclEnable=true; the Super users stored in %s: %s",
                settings.auth_config_path,
                ", ".join(supers) if supers else "none",
            )
        self._users = 0  # servers started with it (standalone: two)
        self._reload: asyncio.Task[None] | None = None

    @property
    def access_control(self) -> AccessControl | None:
        """What checks each request: None while ``aclEnable`` is off."""
        return self._access if self.settings.enabled else None

    def gate(self) -> RequestGate | None:
        """The dispatcher's gate (None while ``aclEnable`` is off): a request the access control
        refuses is answered NO_PERMISSION before its handler sees it."""
        access = self.access_control
        if access is None:
            return None

        def check(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
            return access.check(conn.remote_address, request)

        return check

    def admin_handlers(self) -> dict[int, RequestHandler]:
        """The handlers of the users and ACLs requests (3001-3010); while ``aclEnable`` is off they
        answer clients on this machine only."""
        handlers = auth_admin_handlers(self.store, self._access)
        if self.settings.enabled:
            return handlers
        return {code: _from_this_machine(handler) for code, handler in handlers.items()}

    async def start(self) -> None:
        """Watch the plain ACL file (if any) while at least one server using this runs."""
        self._users += 1
        if self._reload is None and self.settings.plain_acl_file:
            self._reload = asyncio.create_task(self._reload_forever(), name="plain-acl-reload")

    async def stop(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users > 0 or self._reload is None:
            return
        task, self._reload = self._reload, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(PLAIN_ACL_CHECK_INTERVAL_S)
            try:
                self._access.reload_if_changed()
            except CometMQError as exc:  # the loader logs a file that does not parse; this is a fault
                log.error("checking %s for changes failed: %s", self.settings.plain_acl_file, exc)
            except Exception:
                log.exception("checking %s for changes failed", self.settings.plain_acl_file)


def _from_this_machine(handler: RequestHandler) -> RequestHandler:
    def handle(conn: Connection, request: RemotingCommand) -> HandlerResult:
        ip = client_ip(conn.remote_address)
        if ip is None or not ip.is_loopback:
            raise AuthError(ResponseCode.NO_PERMISSION, LOCAL_ONLY_REMARK)
        return handler(conn, request)

    return handle


def is_loopback(host: str) -> bool:
    """Whether *host* (an address to bind, or ``localhost``) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, or "" (every address)
        return False


def warn_if_open(server: str, host: str, port: int, acl_enabled: bool, tls_mode: TlsMode) -> None:
    """One warning when a server listens beyond this machine with access control off (anyone who can
    reach the port may do anything, including what only an administrator should), or on without TLS
    enforced (a signed request seen on the way can be sent again: a signature binds no connection)."""
    if is_loopback(host):
        return
    if not acl_enabled:
        log.warning(
            "the %s listens on %s:%d, reachable from other machines, with aclEnable=false: anyone who "
            "can reach it may read, write and administer everything (set aclEnable=true, or bind "
            "127.0.0.1)",
            server,
            host or "every address",
            port,
        )
    elif tls_mode is not TlsMode.ENFORCING:
        log.warning(
            "the %s listens on %s:%d, reachable from other machines, with tls.server.mode=%s: signed "
            "requests can be captured and replayed without TLS (set tls.server.mode=enforcing)",
            server,
            host or "every address",
            port,
            tls_mode.value,
        )
