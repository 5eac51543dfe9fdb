"""The users and ACLs created over the wire or with the CLI, kept in ``<directory>/auth.json``."""

from __future__ import annotations

from pathlib import Path

from cometmq.auth._model import Acl, PolicyType, Resource, User


class AuthStore:
    """Users and ACLs, in memory and in ``<directory>/auth.json`` (written whole and atomically on
    every change). Methods refuse with :class:`~cometmq.errors.AuthError` (code and remark)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        raise NotImplementedError

    def create_user(self, user: User) -> None:
        raise NotImplementedError

    def update_user(self, user: User) -> None:
        raise NotImplementedError

    def delete_user(self, username: str) -> None:
        raise NotImplementedError

    def get_user(self, username: str) -> User | None:
        raise NotImplementedError

    def list_users(self, filter: str | None = None) -> list[User]:
        raise NotImplementedError

    def create_acl(self, acl: Acl) -> None:
        raise NotImplementedError

    def update_acl(self, acl: Acl) -> None:
        raise NotImplementedError

    def delete_acl(
        self, subject: str, policy_type: PolicyType | None = None, resource: Resource | None = None
    ) -> None:
        raise NotImplementedError

    def get_acl(self, subject: str) -> Acl | None:
        raise NotImplementedError

    def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None) -> list[Acl]:
        raise NotImplementedError
