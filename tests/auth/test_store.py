"""The user and ACL store: RocketMQ 5's rules for creating, changing and deleting, and auth.json
kept across a reopen."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cometmq.auth import (
    Acl,
    Action,
    AuthError,
    AuthStore,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
)
from cometmq.errors import ConfigError
from cometmq.protocol import ResponseCode


def entry(resource: str, *actions: Action, decision: Decision = Decision.ALLOW) -> PolicyEntry:
    return PolicyEntry(Resource.parse(resource), actions, (), decision)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def store(directory: Path) -> AuthStore:
    store = AuthStore(directory)
    store.create_user(User("alice", "pw-a"))
    store.create_user(User("bob", "pw-b", UserType.SUPER))
    return store


def test_users_and_acls_survive_a_reopen(store: AuthStore, directory: Path) -> None:
    acl = Acl("User:alice", (Policy(PolicyType.CUSTOM, (entry("Topic:t*", Action.PUB, Action.SUB),)),))
    store.create_acl(acl)
    store.update_user("alice", user_status=UserStatus.DISABLE)

    reopened = AuthStore(directory)

    assert reopened.get_user("alice") == User("alice", "pw-a", UserType.NORMAL, UserStatus.DISABLE)
    assert reopened.get_user("bob") == User("bob", "pw-b", UserType.SUPER)
    assert reopened.get_acl("User:alice") == acl
    assert reopened.list_users() == store.list_users()


def test_the_file_is_readable_by_its_owner_only(store: AuthStore) -> None:
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_the_file_is_never_readable_by_others(store: AuthStore, monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[int] = []
    replace = os.replace

    def watched_replace(source: Path, target: Path) -> None:
        modes.append(stat.S_IMODE(os.stat(source).st_mode))  # the new content, before it takes the name
        replace(source, target)

    monkeypatch.setattr("cometmq.atomic_file.os.replace", watched_replace)
    store.create_user(User("carol", "carol-secret"))

    assert modes == [0o600]


def test_a_store_with_no_file_is_empty(directory: Path) -> None:
    store = AuthStore(directory)

    assert store.list_users() == [] and store.list_acls() == [] and not store.has_users()


def test_a_file_that_is_not_json_is_a_config_error(directory: Path) -> None:
    directory.mkdir()
    (directory / "auth.json").write_text("{")

    with pytest.raises(ConfigError, match=r"auth\.json is not valid JSON"):
        AuthStore(directory)


def test_creating_a_user_that_exists_is_refused(store: AuthStore) -> None:
    with pytest.raises(AuthError, match="user alice exists already") as caught:
        store.create_user(User("alice", "other"))

    assert caught.value.code == ResponseCode.NO_PERMISSION


@pytest.mark.parametrize(
    ("user", "problem"), [(User(" ", "p"), "the username is blank"), (User("c", " "), "password")]
)
def test_a_blank_name_or_password_is_an_invalid_parameter(store: AuthStore, user: User, problem: str) -> None:
    with pytest.raises(AuthError, match=problem) as caught:
        store.create_user(user)

    assert caught.value.code == ResponseCode.INVALID_PARAMETER


def test_updating_changes_only_what_is_given(store: AuthStore) -> None:
    store.update_user("bob", password=" ")
    assert store.get_user("bob") == User("bob", "pw-b", UserType.SUPER)

    updated = store.update_user("bob", password="new", user_type=UserType.NORMAL)

    assert updated == User("bob", "new", UserType.NORMAL) == store.get_user("bob")


def test_updating_a_user_that_does_not_exist_is_refused(store: AuthStore) -> None:
    with pytest.raises(AuthError, match="user carol does not exist"):
        store.update_user("carol", password="x")


def test_deleting_a_user_deletes_its_acl_and_a_missing_user_is_no_error(
    store: AuthStore, directory: Path
) -> None:
    store.create_acl(Acl("User:alice", (Policy(PolicyType.CUSTOM, (entry("*", Action.ALL),)),)))

    store.delete_user("alice")
    store.delete_user("nobody")

    reopened = AuthStore(directory)
    assert reopened.get_user("alice") is None
    assert reopened.acl_of_user("alice") is None


def test_list_users_filters_by_part_of_the_name(store: AuthStore) -> None:
    store.create_user(User("alison", "p"))

    assert [user.username for user in store.list_users("ali")] == ["alice", "alison"]
    assert [user.username for user in store.list_users(" ")] == ["alice", "alison", "bob"]


def test_an_acl_of_an_unknown_user_is_refused(store: AuthStore) -> None:
    with pytest.raises(AuthError, match="the subject User:carol is not a known user") as caught:
        store.create_acl(Acl("User:carol", (Policy(PolicyType.CUSTOM, (entry("*", Action.ALL),)),)))

    assert caught.value.code == ResponseCode.NO_PERMISSION


@pytest.mark.parametrize(
    ("acl", "problem"),
    [
        (Acl("Group:x", (Policy(PolicyType.CUSTOM, (entry("*", Action.ALL),)),)), "not User:<name>"),
        (Acl("User:alice", ()), "has no policies"),
        (Acl("User:alice", (Policy(PolicyType.CUSTOM, ()),)), "has no entries"),
        (Acl("User:alice", (Policy(PolicyType.CUSTOM, (entry("*", Action.ANY),)),)), "the action Any"),
        (
            Acl(
                "User:alice",
                (Policy(PolicyType.CUSTOM, (PolicyEntry(Resource.parse("*"), (Action.PUB,), ("1.2.3",)),)),),
            ),
            "address pattern",
        ),
    ],
)
def test_a_malformed_acl_is_an_invalid_parameter(store: AuthStore, acl: Acl, problem: str) -> None:
    with pytest.raises(AuthError, match=problem) as caught:
        store.create_acl(acl)

    assert caught.value.code == ResponseCode.INVALID_PARAMETER


def test_an_acl_is_laid_over_the_one_stored(store: AuthStore) -> None:
    store.create_acl(
        Acl(
            "User:alice",
            (Policy(PolicyType.CUSTOM, (entry("Topic:a", Action.PUB), entry("Topic:b", Action.SUB))),),
        )
    )

    store.update_acl(
        Acl(
            "user:alice",
            (
                Policy(
                    PolicyType.CUSTOM,
                    (entry("Topic:a", Action.SUB, decision=Decision.DENY), entry("Topic:c", Action.GET)),
                ),
                Policy(PolicyType.DEFAULT, (entry("*", Action.GET),)),
            ),
        )
    )

    assert store.get_acl("User:alice") == Acl(
        "User:alice",
        (
            Policy(
                PolicyType.CUSTOM,
                (
                    entry("Topic:a", Action.SUB, decision=Decision.DENY),
                    entry("Topic:b", Action.SUB),
                    entry("Topic:c", Action.GET),
                ),
            ),
            Policy(PolicyType.DEFAULT, (entry("*", Action.GET),)),
        ),
    )


def test_deleting_one_entry_then_the_last(store: AuthStore) -> None:
    store.create_acl(
        Acl(
            "User:alice",
            (Policy(PolicyType.CUSTOM, (entry("Topic:a", Action.PUB), entry("Topic:b", Action.SUB))),),
        )
    )

    store.delete_acl("User:alice", None, Resource.parse("Topic:a"))
    assert store.get_acl("User:alice") == Acl(
        "User:alice", (Policy(PolicyType.CUSTOM, (entry("Topic:b", Action.SUB),)),)
    )

    store.delete_acl("User:alice", PolicyType.DEFAULT, Resource.parse("Topic:b"))
    assert store.get_acl("User:alice") is not None

    store.delete_acl("User:alice", PolicyType.CUSTOM, Resource.parse("Topic:b"))
    assert store.get_acl("User:alice") is None
    with pytest.raises(AuthError, match="User:alice has no ACL"):
        store.delete_acl("User:alice")


def test_list_acls_filters_subjects_and_entries(store: AuthStore) -> None:
    store.create_acl(
        Acl(
            "User:alice",
            (Policy(PolicyType.CUSTOM, (entry("Topic:orders", Action.PUB), entry("Group:g", Action.SUB))),),
        )
    )
    store.create_acl(Acl("User:bob", (Policy(PolicyType.CUSTOM, (entry("Group:g", Action.SUB),)),)))

    assert [acl.subject for acl in store.list_acls()] == ["User:alice", "User:bob"]
    assert [acl.subject for acl in store.list_acls("ali")] == ["User:alice"]
    only_orders = store.list_acls(None, "orders")
    assert only_orders == [
        Acl("User:alice", (Policy(PolicyType.CUSTOM, (entry("Topic:orders", Action.PUB),)),))
    ]


def test_a_failed_write_changes_nothing(store: AuthStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(path: Path, data: bytes, mode: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cometmq.auth._store.write_atomic", full_disk)

    with pytest.raises(OSError):
        store.create_user(User("carol", "p"))
    assert store.get_user("carol") is None
