"""The users and ACLs created over the wire or with the CLI, kept in ``<directory>/auth.json``.

The file is one JSON object, ``{"users": [UserInfo, ...], "acls": [AclInfo, ...]}``, rewritten whole
(and atomically, readable by its owner only: it holds passwords) on every change.

What each method refuses, and the codes it refuses with, are RocketMQ 5's (its authentication and
authorization metadata managers): a request that is malformed (a blank name, an ACL with no
policies) is INVALID_PARAMETER; one that conflicts with what is stored (a user that exists already,
an ACL of an unknown user) is NO_PERMISSION, as RocketMQ answers every refusal of those managers.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Final

from cometmq.atomic_file import write_atomic
from cometmq.auth._addresses import AddressPattern
from cometmq.auth._model import (
    Acl,
    Action,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    invalid_parameter,
    json_list,
)
from cometmq.errors import AuthError, ConfigError
from cometmq.protocol.codes import ResponseCode

AUTH_FILE_NAME: Final = "auth.json"
SUBJECT_PREFIX: Final = "User:"


def _refused(remark: str) -> AuthError:
    return AuthError(ResponseCode.NO_PERMISSION, remark)


def subject_of(username: str) -> str:
    return SUBJECT_PREFIX + username


def username_of(subject: str | None) -> str:
    """The user a subject names (``User:<name>``, the type in any case); INVALID_PARAMETER otherwise."""
    kind, colon, name = (subject or "").strip().partition(":")
    if not colon or kind.strip().lower() != "user" or not name.strip():
        raise invalid_parameter(f"the subject {subject!r} is not User:<name>")
    return name.strip()


def _check_username(username: str | None) -> None:
    if username is None or not username.strip():
        raise invalid_parameter("the username is blank")


def _check_entry(entry: PolicyEntry) -> None:
    if not entry.actions:
        raise invalid_parameter(f"the entry on {entry.resource} lists no actions")
    if Action.ANY in entry.actions:
        raise invalid_parameter(f"the entry on {entry.resource} lists the action Any, which an entry may not")
    for source in entry.source_ips:
        if not source.strip():
            raise invalid_parameter(f"the entry on {entry.resource} has a blank source IP")
        AddressPattern.parse(source)


def _checked_policies(acl: Acl) -> tuple[Policy, ...]:
    if not acl.policies:
        raise invalid_parameter(f"the ACL of {acl.subject} has no policies")
    for policy in acl.policies:
        if not policy.entries:
            raise invalid_parameter(f"the {policy.policy_type.value} policy of {acl.subject} has no entries")
        for entry in policy.entries:
            _check_entry(entry)
    return acl.policies


def _merged(old: Acl, policies: tuple[Policy, ...]) -> Acl:
    """*old* with *policies* laid over it: an entry on a resource the policy of its type has already
    replaces that one; others are added (RocketMQ's ``Acl.updatePolicy``)."""
    merged = {policy.policy_type: list(policy.entries) for policy in old.policies}
    for policy in policies:
        entries = merged.setdefault(policy.policy_type, [])
        for entry in policy.entries:
            index = next((i for i, kept in enumerate(entries) if kept.resource == entry.resource), None)
            if index is None:
                entries.append(entry)
            else:
                entries[index] = entry
    return Acl(
        old.subject, tuple(Policy(kind, tuple(entries)) for kind, entries in merged.items() if entries)
    )


class AuthStore:
    """Users and ACLs, in memory and in ``<directory>/auth.json``. Methods refuse with
    :class:`~cometmq.errors.AuthError` (code and remark). Safe to share between threads and servers
    (a standalone's name server and broker share one)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / AUTH_FILE_NAME
        self._lock = threading.Lock()
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        self._load()

    def _load(self) -> None:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ConfigError(f"{self.path} cannot be read: {exc}") from None
        try:
            document = json.loads(text)
            if not isinstance(document, dict):
                raise invalid_parameter('not a JSON object {"users": [..], "acls": [..]}')
            users = [User.from_dict(info) for info in json_list(document, "users", "the file")]
            acls = [Acl.from_dict(info) for info in json_list(document, "acls", "the file")]
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path} is not valid JSON: {exc}") from None
        except AuthError as exc:
            raise ConfigError(f"{self.path}: {exc.remark}") from None
        self._users = {user.username: user for user in users}
        self._acls = {acl.subject: acl for acl in acls}

    def _commit(self, users: dict[str, User], acls: dict[str, Acl]) -> None:
        """Write *users* and *acls*, then hold them: a write that fails changes nothing."""
        document: dict[str, Any] = {
            "users": [user.to_dict() for user in users.values()],
            "acls": [acl.to_dict() for acl in acls.values()],
        }
        write_atomic(self.path, json.dumps(document, indent=2).encode(), mode=0o600)
        self._users = users
        self._acls = acls

    # users ------------------------------------------------------------------------------------------

    def create_user(self, user: User) -> None:
        _check_username(user.username)
        if not user.password.strip():
            raise invalid_parameter(f"the password of user {user.username} is blank")
        with self._lock:
            if user.username in self._users:
                raise _refused(f"user {user.username} exists already")
            self._commit({**self._users, user.username: user}, self._acls)

    def update_user(
        self,
        username: str,
        *,
        password: str | None = None,
        user_type: UserType | None = None,
        user_status: UserStatus | None = None,
    ) -> User:
        """Change what is given of a user (a blank password is not given); the user as it is now."""
        _check_username(username)
        with self._lock:
            old = self._users.get(username)
            if old is None:
                raise _refused(f"user {username} does not exist")
            user = User(
                username,
                password if password and password.strip() else old.password,
                user_type or old.user_type,
                user_status or old.user_status,
            )
            self._commit({**self._users, username: user}, self._acls)
            return user

    def delete_user(self, username: str) -> None:
        """Delete a user and its ACL; a user that does not exist is no error (RocketMQ's)."""
        _check_username(username)
        with self._lock:
            subject = subject_of(username)
            if username in self._users or subject in self._acls:
                users = {name: user for name, user in self._users.items() if name != username}
                self._commit(users, {key: acl for key, acl in self._acls.items() if key != subject})

    def get_user(self, username: str) -> User | None:
        return self._users.get(username)

    def list_users(self, filter: str | None = None) -> list[User]:
        """The users whose name contains *filter* (all if it is blank), by name."""
        users = sorted(self._users.values(), key=lambda user: user.username)
        if filter and filter.strip():
            return [user for user in users if filter in user.username]
        return users

    def has_users(self) -> bool:
        return bool(self._users)

    # ACLs -------------------------------------------------------------------------------------------

    def _known_subject(self, subject: str | None) -> str:
        username = username_of(subject)
        if username not in self._users:
            raise _refused(f"the subject {subject_of(username)} is not a known user")
        return subject_of(username)

    def create_acl(self, acl: Acl) -> None:
        """Store *acl*, or lay its policies over the subject's ACL if it has one (RocketMQ's)."""
        self.update_acl(acl)

    def update_acl(self, acl: Acl) -> None:
        """Lay *acl*'s policies over the subject's ACL (an entry replaces the one on its resource), or
        store it if the subject has none: as RocketMQ, the same as :meth:`create_acl`."""
        policies = _checked_policies(acl)
        with self._lock:
            subject = self._known_subject(acl.subject)
            merged = _merged(self._acls.get(subject, Acl(subject, ())), policies)
            self._commit(self._users, {**self._acls, subject: merged})

    def delete_acl(
        self, subject: str, policy_type: PolicyType | None = None, resource: Resource | None = None
    ) -> None:
        """Delete the subject's ACL, or only its entry on *resource* in the policy *policy_type*
        (Custom if None); an ACL left with no entries is deleted."""
        with self._lock:
            subject = self._known_subject(subject)
            acl = self._acls.get(subject)
            if acl is None:
                raise _refused(f"{subject} has no ACL")
            acls = {key: kept for key, kept in self._acls.items() if key != subject}
            if resource is not None:
                kind = policy_type or PolicyType.CUSTOM
                policies = (
                    Policy(
                        policy.policy_type,
                        tuple(
                            entry
                            for entry in policy.entries
                            if policy.policy_type is not kind or entry.resource != resource
                        ),
                    )
                    for policy in acl.policies
                )
                left = tuple(policy for policy in policies if policy.entries)
                if left:
                    acls[subject] = Acl(subject, left)
            self._commit(self._users, acls)

    def get_acl(self, subject: str) -> Acl | None:
        """The ACL of a known user's subject (None if it has none)."""
        return self._acls.get(self._known_subject(subject))

    def acl_of_user(self, username: str) -> Acl | None:
        """The ACL of user *username*, or None: what the access check reads, on every request."""
        return self._acls.get(SUBJECT_PREFIX + username)

    def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None) -> list[Acl]:
        """The ACLs whose subject contains *subject_filter*, each with only its entries whose resource
        key contains *resource_filter* (and none left out: the ACL is not listed); blank: no filter."""
        acls = []
        for subject in sorted(self._acls):
            if subject_filter and subject_filter.strip() and subject_filter not in subject:
                continue
            acl = self._acls[subject]
            if resource_filter and resource_filter.strip():
                policies = (
                    Policy(p.policy_type, tuple(e for e in p.entries if resource_filter in e.resource.key))
                    for p in acl.policies
                )
                acl = Acl(subject, tuple(policy for policy in policies if policy.entries))
            if acl.policies:
                acls.append(acl)
        return acls
