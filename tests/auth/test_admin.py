"""The handlers of AUTH_CREATE_USER ... AUTH_LIST_ACL, called as the dispatcher calls them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from cometmq.auth import (
    AccessControl,
    AuthError,
    AuthStore,
    Credentials,
    User,
    UserType,
    auth_admin_handlers,
    sign,
)
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.auth_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from cometmq.protocol.headers import Header
from cometmq.remoting import Connection, RequestHandler

C = RequestCode
NO_CONNECTION = cast(Connection, None)  # the handlers never look at the connection


@pytest.fixture
def store(tmp_path: Path) -> AuthStore:
    store = AuthStore(tmp_path)
    store.create_user(User("root", "root-secret", UserType.SUPER))
    store.create_user(User("alice", "alice-secret"))
    return store


@pytest.fixture
def handlers(store: AuthStore) -> dict[int, RequestHandler]:
    return auth_admin_handlers(store, AccessControl(store, "DefaultCluster"))


def call(
    handlers: dict[int, RequestHandler],
    code: int,
    header: Header,
    body: Any = None,
    credentials: Credentials | None = None,
) -> RemotingCommand:
    request = RemotingCommand(
        code, opaque=3, ext_fields=header.encode(), body=b"" if body is None else json.dumps(body).encode()
    )
    if credentials is not None:
        sign(request, credentials)
    response = handlers[code](NO_CONNECTION, request)
    assert isinstance(response, RemotingCommand)
    assert response.opaque == 3 and response.code == ResponseCode.SUCCESS
    return response


def test_every_auth_code_has_a_handler(handlers: dict[int, RequestHandler]) -> None:
    assert set(handlers) == set(range(3001, 3011))


def test_a_user_round_trip_never_answers_the_password(handlers: dict[int, RequestHandler]) -> None:
    call(
        handlers,
        C.AUTH_CREATE_USER,
        UserRequestHeader(username="carol"),
        {"password": "carol-pw", "userType": "Normal"},
    )
    call(handlers, C.AUTH_UPDATE_USER, UserRequestHeader(username="carol"), {"userStatus": "disable"})

    got = call(handlers, C.AUTH_GET_USER, UserRequestHeader(username="carol"))
    listed = call(handlers, C.AUTH_LIST_USER, ListUsersRequestHeader(filter="car"))

    assert json.loads(got.body) == {"username": "carol", "userType": "Normal", "userStatus": "disable"}
    assert json.loads(listed.body) == [json.loads(got.body)]
    assert b"pw" not in got.body + listed.body

    call(handlers, C.AUTH_DELETE_USER, UserRequestHeader(username="carol"))
    assert call(handlers, C.AUTH_GET_USER, UserRequestHeader(username="carol")).body == b""
    assert json.loads(call(handlers, C.AUTH_LIST_USER, ListUsersRequestHeader(filter="car")).body) == []


def test_the_header_names_the_user_not_the_body(
    handlers: dict[int, RequestHandler], store: AuthStore
) -> None:
    call(
        handlers, C.AUTH_CREATE_USER, UserRequestHeader(username="dave"), {"username": "eve", "password": "p"}
    )

    assert store.get_user("dave") is not None and store.get_user("eve") is None


@pytest.mark.parametrize(
    "code", [C.AUTH_CREATE_USER, C.AUTH_UPDATE_USER, C.AUTH_DELETE_USER, C.AUTH_GET_USER]
)
def test_a_blank_username_is_an_invalid_parameter(handlers: dict[int, RequestHandler], code: int) -> None:
    with pytest.raises(AuthError, match="the username is blank") as caught:
        call(handlers, code, UserRequestHeader(username=" "), {"password": "p"})

    assert caught.value.code == ResponseCode.INVALID_PARAMETER
    assert caught.value.code == 29  # RocketMQ 5's number


def test_only_a_super_user_may_make_or_change_a_super_user(
    handlers: dict[int, RequestHandler], store: AuthStore
) -> None:
    alice = Credentials("alice", "alice-secret")
    super_info = {"password": "p", "userType": "Super"}

    with pytest.raises(AuthError, match="only a Super user may") as caught:
        call(handlers, C.AUTH_CREATE_USER, UserRequestHeader(username="x"), super_info, alice)
    assert caught.value.code == ResponseCode.NO_PERMISSION
    with pytest.raises(AuthError, match="only a Super user may"):
        call(handlers, C.AUTH_UPDATE_USER, UserRequestHeader(username="root"), {"password": "mine"}, alice)
    with pytest.raises(AuthError, match="only a Super user may"):
        call(handlers, C.AUTH_DELETE_USER, UserRequestHeader(username="root"), None, alice)

    call(
        handlers,
        C.AUTH_CREATE_USER,
        UserRequestHeader(username="x"),
        super_info,
        Credentials("root", "root-secret"),
    )
    call(
        handlers, C.AUTH_CREATE_USER, UserRequestHeader(username="y"), super_info
    )  # unsigned: access control off
    call(handlers, C.AUTH_CREATE_USER, UserRequestHeader(username="z"), {"password": "p"}, alice)
    assert (
        store.get_user("x") is not None
        and store.get_user("y") is not None
        and store.get_user("z") is not None
    )


def test_only_a_super_user_may_make_a_user_named_as_a_plain_admin_account(
    store: AuthStore, tmp_path: Path
) -> None:
    plain = tmp_path / "plain_acl.yml"
    plain.write_text("accounts:\n  - accessKey: ops\n    secretKey: ops-secret\n    admin: true\n")
    handlers = auth_admin_handlers(store, AccessControl(store, "DefaultCluster", plain))
    alice = Credentials("alice", "alice-secret")

    # The stored user would hide the admin account of its name, locking that admin out.
    with pytest.raises(AuthError, match="may not change a user named as the admin account ops") as caught:
        call(handlers, C.AUTH_CREATE_USER, UserRequestHeader(username="ops"), {"password": "p"}, alice)
    assert caught.value.code == ResponseCode.NO_PERMISSION and store.get_user("ops") is None

    call(
        handlers,
        C.AUTH_CREATE_USER,
        UserRequestHeader(username="ops"),
        {"password": "p"},
        Credentials("root", "root-secret"),
    )
    with pytest.raises(AuthError, match="only a Super user may"):
        call(handlers, C.AUTH_DELETE_USER, UserRequestHeader(username="ops"), None, alice)
    assert store.get_user("ops") is not None


ACL_INFO: dict[str, Any] = {
    "subject": "User:alice",
    "policies": [
        {
            "policyType": "Custom",
            "entries": [
                {"resource": "Topic:orders", "actions": ["Pub"], "sourceIps": [], "decision": "Allow"},
                {
                    "resource": "Group:g*",
                    "actions": ["Sub", "Get"],
                    "sourceIps": ["10.0.0.0/8"],
                    "decision": "Deny",
                },
            ],
        }
    ],
}


def test_an_acl_round_trip(handlers: dict[int, RequestHandler]) -> None:
    call(handlers, C.AUTH_CREATE_ACL, AclRequestHeader(subject="User:alice"), ACL_INFO)

    got = call(handlers, C.AUTH_GET_ACL, AclRequestHeader(subject="User:alice"))
    listed = call(handlers, C.AUTH_LIST_ACL, ListAclsRequestHeader(resource_filter="orders"))

    assert json.loads(got.body) == ACL_INFO
    assert json.loads(listed.body)[0]["policies"][0]["entries"] == [ACL_INFO["policies"][0]["entries"][0]]

    call(
        handlers,
        C.AUTH_DELETE_ACL,
        DeleteAclRequestHeader(subject="User:alice", policy_type="Custom", resource="Topic:orders"),
    )
    remaining = json.loads(call(handlers, C.AUTH_GET_ACL, AclRequestHeader(subject="User:alice")).body)
    assert [e["resource"] for e in remaining["policies"][0]["entries"]] == ["Group:g*"]

    call(handlers, C.AUTH_DELETE_ACL, DeleteAclRequestHeader(subject="User:alice"))
    assert call(handlers, C.AUTH_GET_ACL, AclRequestHeader(subject="User:alice")).body == b""


def test_an_acl_body_without_a_subject_takes_the_headers(
    handlers: dict[int, RequestHandler], store: AuthStore
) -> None:
    call(handlers, C.AUTH_UPDATE_ACL, AclRequestHeader(subject="User:alice"), {**ACL_INFO, "subject": ""})

    assert store.acl_of_user("alice") is not None


@pytest.mark.parametrize(
    ("header", "body", "problem"),
    [
        (
            AclRequestHeader(subject="User:alice"),
            {"policies": [{"entries": [{"resource": "Queue:x", "actions": ["Pub"]}]}]},
            "resource",
        ),
        (
            AclRequestHeader(subject="User:alice"),
            {"policies": [{"entries": [{"resource": "*", "actions": ["Fly"]}]}]},
            "action",
        ),
        (AclRequestHeader(subject="alice"), {"policies": []}, "not User:<name>"),
    ],
)
def test_a_malformed_acl_is_refused(
    handlers: dict[int, RequestHandler], header: Header, body: Any, problem: str
) -> None:
    with pytest.raises(AuthError, match=problem) as caught:
        call(handlers, C.AUTH_CREATE_ACL, header, body)

    assert caught.value.code == ResponseCode.INVALID_PARAMETER


def test_a_body_that_is_not_json_is_refused(handlers: dict[int, RequestHandler]) -> None:
    request = RemotingCommand(C.AUTH_CREATE_USER, ext_fields={"username": "x"}, body=b"{nope")

    with pytest.raises(AuthError, match="not JSON"):
        handlers[C.AUTH_CREATE_USER](NO_CONNECTION, request)
