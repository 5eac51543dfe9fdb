"""The gate in front of a server's dispatcher: who signed a request, and may they do what it asks.

Authentication. A request from an address of the plain file's ``globalWhiteRemoteAddresses`` passes
whatever it carries (4.x). Any other must carry an ``AccessKey`` naming a known user (a stored user
first, then a plain account of that name) that is enabled, and a ``Signature`` that the user's secret
gives over the request (:mod:`cometmq.auth._signature`). A plain account whose ``whiteRemoteAddress``
matches the client skips the signature check only: it is still authorized below (4.x skipped both).
A request whose ``CometMQRequestCode`` field (signed with it) is not its code is refused: its
signature was made for another request. Only an authenticated request has its body read.

Authorization. A Super user may do anything. Otherwise each of the request's needs
(:func:`~cometmq.auth.needs_of`) must pass, a need passing if any one of its actions is allowed:

- a stored user: ACL 2.0. The entries of its Custom policy that match (the resource covers the need's,
  the entry lists one of the need's actions or All, and its source IPs, if any, hold the client's IP)
  are consulted, and only if none matches, those of its Default policy. Of the matches the most
  specific decides: a typed resource over ``*``, then one name over a prefix over all names, then the
  longer prefix; at equal specificity Deny wins. No match: refused.
- a plain account: 4.x's rules. A need on a topic or group that Pub or Sub would pass takes the
  account's permission for that name if it lists one, else its default; DENY refuses. Of other needs,
  Get and List are allowed; Create, Update, Delete and any Cluster Update are for admins only. An
  admin (``admin: true``) passes every need, but one that lists topicPerms or groupPerms is held to
  them for Pub and Sub, as 4.x holds it.

Remarks name the user, the action and the resource, never a secret.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from cometmq.auth._addresses import AddressPattern, IpAddress, client_ip
from cometmq.auth._model import (
    Acl,
    Action,
    Decision,
    Need,
    PolicyEntry,
    PolicyType,
    ResourcePattern,
    ResourceType,
    UserStatus,
    UserType,
)
from cometmq.auth._needs import SUB_GET, TABLE, needs_of, on_topic
from cometmq.auth._plain import PlainAccount, PlainAcl, load_plain_acl
from cometmq.auth._signature import ACCESS_KEY, REQUEST_CODE, SIGNATURE, peer_digest, signature_of, utf8
from cometmq.auth._store import AuthStore
from cometmq.errors import ConfigError, RequestRefused
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.command import RemotingCommand
from cometmq.protocol.naming import TRACE_TOPIC

log = logging.getLogger("cometmq.auth")

_PATTERN_RANK = {ResourcePattern.ANY: 0, ResourcePattern.PREFIXED: 1, ResourcePattern.LITERAL: 2}
_POLICY_ORDER = (PolicyType.CUSTOM, PolicyType.DEFAULT)
# What a plain account that is not an admin may do with no permission to consult.
_PLAIN_ALWAYS = frozenset((Action.GET, Action.LIST))
_PLAIN_PERMS = frozenset((Action.PUB, Action.SUB))
# How often a fault inside the check gets an error line.
FAULT_LOG_INTERVAL_S: Final = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Principal:
    """Whoever an access key names: a stored user, or else a plain account."""

    name: str
    secret: str = dataclasses.field(repr=False)
    enabled: bool
    superuser: bool
    acl: Acl | None = None
    plain: PlainAccount | None = None


def _specificity(entry: PolicyEntry) -> tuple[bool, int, int, bool]:
    resource = entry.resource
    return (
        resource.type is not ResourceType.ANY,
        _PATTERN_RANK[resource.pattern],
        len(resource.name or ""),
        entry.decision is Decision.DENY,
    )


def _entry_matches(entry: PolicyEntry, need: Need, ip: IpAddress | None) -> bool:
    if not entry.resource.matches(need.resource):
        return False
    if Action.ALL not in entry.actions and need.actions.isdisjoint(entry.actions):
        return False
    return not entry.source_ips or any(
        AddressPattern.parse(source).matches(ip) for source in entry.source_ips
    )


def acl_decision(acl: Acl | None, need: Need, ip: IpAddress | None) -> Decision | None:
    """What a stored user's ACL decides for *need* from *ip*; None if no entry matches."""
    if acl is None:
        return None
    for policy_type in _POLICY_ORDER:
        policy = acl.policy(policy_type)
        if policy is None:
            continue
        matches = [entry for entry in policy.entries if _entry_matches(entry, need, ip)]
        if matches:
            return max(matches, key=_specificity).decision
    return None


def plain_decision(account: PlainAccount, need: Need) -> Decision | None:
    """What 4.x's rules decide for a plain account: ALLOW, DENY (its permission for the resource is
    DENY), or None (nothing allows it)."""
    resource = need.resource
    if need.actions.isdisjoint(_PLAIN_PERMS) or resource.type not in (ResourceType.TOPIC, ResourceType.GROUP):
        # Get and List, when neither Pub nor Sub would also do: reading what a Pub or Sub need guards
        # (QUERY_MESSAGE's Sub or Get) is for the permission to decide.
        if account.admin or not need.actions.isdisjoint(_PLAIN_ALWAYS):
            return Decision.ALLOW
        return None
    if account.admin and not account.topic_perms and not account.group_perms:
        return Decision.ALLOW  # 4.x: an admin listing no permissions is not checked against any
    if resource.type is ResourceType.TOPIC and resource.name == TRACE_TOPIC and Action.PUB in need.actions:
        # 4.x lets every account write message traces, whatever its permissions say of the topic.
        return Decision.ALLOW
    if resource.type is ResourceType.TOPIC:
        perms, default = account.topic_perms, account.default_topic_perm
    else:
        perms, default = account.group_perms, account.default_group_perm
    perm = default if resource.name is None else perms.get(resource.name, default)
    if not perm:
        return Decision.DENY
    return None if need.actions.isdisjoint(perm) else Decision.ALLOW


class _FaultLog:
    """At most one error line per *interval* about the check failing on a request (a fault of the
    check, not of the request), counting those not logged since: a request that trips it, sent in a
    loop, cannot flood the log."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._not_logged = 0

    def note(self, request: RemotingCommand, remote_address: str, exc: Exception) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self._not_logged += 1
            return
        self._last, not_logged, self._not_logged = now, self._not_logged, 0
        log.error(
            "the access check failed on request code %d from %s, which is refused: %s: %s%s",
            request.code,
            remote_address or "?",
            type(exc).__name__,
            exc,
            f" ({not_logged} more not logged)" if not_logged else "",
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )


class AccessControl:
    """Authenticates and authorizes requests against the users and ACLs of *store* and the accounts
    of a 4.x *plain_acl_file* (read now: a file that cannot be used is a ConfigError). *cluster* is
    the broker's cluster name, None at a name server."""

    def __init__(self, store: AuthStore, cluster: str | None, plain_acl_file: Path | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.plain_acl_file = plain_acl_file
        self._plain = PlainAcl()
        self._plain_stamp: tuple[int, int] | None = None
        self._faults = _FaultLog(FAULT_LOG_INTERVAL_S)
        if plain_acl_file is not None:
            self._plain_stamp = self._stamp(plain_acl_file)
            self._use_plain(load_plain_acl(plain_acl_file))

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _use_plain(self, plain: PlainAcl) -> None:
        for name in plain.accounts:
            if self.store.get_user(name) is not None:
                log.warning(
                    "user %s is both a stored user and an account of %s: the stored user is used",
                    name,
                    self.plain_acl_file,
                )
        self._plain = plain

    def reload_if_changed(self) -> None:
        """Re-read the plain ACL file if its modification time or size changed; a file that cannot be
        used keeps the accounts read before (one error line for each change)."""
        path = self.plain_acl_file
        if path is None:
            return
        stamp = self._stamp(path)
        if stamp == self._plain_stamp:
            return
        self._plain_stamp = stamp
        try:
            plain = load_plain_acl(path)
        except ConfigError as exc:
            log.error("%s; the accounts read before stay in use", exc)
            return
        self._use_plain(plain)
        log.info("plain ACL file %s read: %d accounts", path, len(plain.accounts))

    def has_users(self) -> bool:
        """Whether any request could ever be authenticated: a stored user or a plain account."""
        return self.store.has_users() or bool(self._plain.accounts)

    def _principal(self, name: str) -> _Principal | None:
        user = self.store.get_user(name)
        if user is not None:
            return _Principal(
                name,
                user.password,
                user.user_status is UserStatus.ENABLE,
                user.user_type is UserType.SUPER,
                acl=self.store.acl_of_user(name),
            )
        account = self._plain.accounts.get(name)
        if account is not None:
            return _Principal(name, account.secret_key, True, account.admin, plain=account)
        return None

    def is_super(self, access_key: str) -> bool:
        """Whether *access_key* names a Super user or an admin plain account."""
        principal = self._principal(access_key)
        return principal is not None and principal.superuser

    def is_plain_admin(self, name: str) -> bool:
        """Whether *name* is an admin account of the plain ACL file (whether or not a stored user of
        that name hides it)."""
        account = self._plain.accounts.get(name)
        return account is not None and account.admin

    def _globally_trusted(self, ip: IpAddress | None) -> bool:
        return any(pattern.matches(ip) for pattern in self._plain.global_white_addresses)

    def _known(self, name: str) -> _Principal | str:
        """The enabled principal *name* names, or why not."""
        principal = self._principal(name)
        if principal is None:
            return f"user {name} is not known here"
        if not principal.enabled:
            return f"user {name} is disabled"
        return principal

    def _refusal(self, principal: _Principal, needs: Sequence[Need], ip: IpAddress | None) -> str | None:
        """Why *principal* may not have *needs* from *ip*, or None if it may."""
        if principal.superuser and principal.plain is None:
            return None
        for need in needs:
            if principal.plain is not None:
                decision = plain_decision(principal.plain, need)
            else:
                decision = acl_decision(principal.acl, need, ip)
            if decision is Decision.ALLOW:
                continue
            actions = " or ".join(action.value for action in sorted(need.actions, key=_action_order))
            why = "a policy denies it" if decision is Decision.DENY else "no policy allows it"
            source = "an unknown address" if ip is None else ip
            return f"user {principal.name} may not {actions} on {need.resource.key} (from {source}): {why}"
        return None

    def check(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        """None if *request* from *remote_address* (``host:port``) may be served, else the response to
        send (NO_PERMISSION, or the refusal of a body the table cannot read). A code the table does
        not have is not checked: the server does not serve it. Whoever sends it, the check answers:
        a fault inside it refuses the request (logged, rate-limited)."""
        if request.code not in TABLE:
            return None
        try:
            return self._check(remote_address, request)
        except Exception as exc:
            self._faults.note(request, remote_address, exc)
            return request.response(
                ResponseCode.NO_PERMISSION, "the access check failed on this request (the server logs why)"
            )

    def _check(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        ip = client_ip(remote_address)
        if self._globally_trusted(ip):
            return None
        # Who sent it first: an unauthenticated request costs no more than its signature.
        principal = self._authenticated(request, ip)
        if isinstance(principal, str):
            return request.response(ResponseCode.NO_PERMISSION, principal)
        try:
            needs = needs_of(request, self.cluster) or []
        except RequestRefused as exc:
            return request.response(exc.code, exc.remark)
        why = self._refusal(principal, needs, ip)
        return None if why is None else request.response(ResponseCode.NO_PERMISSION, why)

    def may_read(self, remote_address: str, request: RemotingCommand, topic: str) -> str | None:
        """None if the sender of *request* (which the check let through) may read a message of
        *topic* (Sub or Get on it, see :func:`~cometmq.auth._needs.on_topic`), else why not: what a
        handler asks of a message it found by a commit-log offset the request named."""
        ip = client_ip(remote_address)
        if self._globally_trusted(ip):
            return None
        principal = self._authenticated(request, ip)
        if isinstance(principal, str):
            return principal
        return self._refusal(principal, on_topic(topic, SUB_GET), ip)

    def _authenticated(self, request: RemotingCommand, ip: IpAddress | None) -> _Principal | str:
        """The principal that signed *request*, or why it is refused."""
        fields = request.ext_fields
        name = fields.get(ACCESS_KEY)
        if not name:
            return (
                f"request code {request.code} is not signed: this server requires an AccessKey and "
                "Signature (aclEnable=true)"
            )
        signed_code = fields.get(REQUEST_CODE)
        if signed_code is not None and signed_code != str(request.code):
            return (
                f"request code {request.code} carries the {REQUEST_CODE} {signed_code}: its signature was "
                "made for another request"
            )
        principal = self._known(name)
        if isinstance(principal, str):
            return principal
        trusted = principal.plain is not None and principal.plain.white_remote_address.matches(ip)
        if not trusted:
            signature = fields.get(SIGNATURE)
            if not signature:
                return f"request code {request.code} of user {name} carries no Signature"
            expected = signature_of(request, principal.secret)
            if not hmac.compare_digest(utf8(expected), utf8(signature)):
                return _mismatch(name)
        return principal

    def verify_peer(
        self, remote_address: str, access_key: str, content: bytes, signature: bytes, needs: Sequence[Need]
    ) -> str | None:
        """None if user *access_key* exists, is enabled, *signature* is its answer over *content* (the
        HA link's AUTH: :func:`~cometmq.auth._signature.peer_digest`) and it is allowed *needs* from
        *remote_address*; else why not."""
        principal = self._known(access_key)
        if isinstance(principal, str):
            return principal
        if not hmac.compare_digest(peer_digest(principal.secret, content), signature):
            return _mismatch(access_key)
        return self._refusal(principal, needs, client_ip(remote_address))

    def verify_grpc(
        self, remote_address: str, access_key: str, date_time: str, signature: str, needs: Sequence[Need]
    ) -> str | None:
        """None if user *access_key* exists, is enabled, *signature* is its RocketMQ 5 gRPC signature
        (hex HMAC-SHA1 of the request's ``x-mq-date-time`` keyed with its secret key, as the 5.x clients
        sign every call to a proxy) and it is allowed *needs* from *remote_address*; else why not."""
        ip = client_ip(remote_address)
        if self._globally_trusted(ip):
            return None
        principal = self._known(access_key)
        if isinstance(principal, str):
            return principal
        expected = hmac.digest(utf8(principal.secret), utf8(date_time), "sha1").hex()
        if not hmac.compare_digest(utf8(expected), utf8(signature.lower())):
            return _mismatch(access_key)
        return self._refusal(principal, needs, ip)


def _mismatch(name: str) -> str:
    return (
        f"the signature of user {name} does not match (wrong secret key, or the request was changed on "
        "the way)"
    )


_ACTION_ORDER = {action: index for index, action in enumerate(Action)}


def _action_order(action: Action) -> int:
    return _ACTION_ORDER[action]
