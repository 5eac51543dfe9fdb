"""The handlers of AUTH_CREATE_USER ... AUTH_LIST_ACL (3001-3010), the same on brokers and name servers.

As RocketMQ 5's: the header names the user (or the subject), the body is a UserInfo or an AclInfo
(JSON), and the answers are SUCCESS with a UserInfo, an AclInfo or a JSON array of them. Getting a
user or an ACL that does not exist answers SUCCESS with no body. Unlike RocketMQ's, an answer never
carries a password, and the answer to a list is ``[]`` when nothing is listed.

Only a Super user (or an admin plain account) may create, change or delete a Super user, or a user
named as an admin plain account (which the stored user would hide); a request with no AccessKey
reached the handler because access control is off (or its address is trusted), and counts as one
(RocketMQ's rule). RocketMQ answers SYSTEM_ERROR there; this answers NO_PERMISSION.
"""

from __future__ import annotations

import json
from typing import Any

from cometmq.auth._access import AccessControl
from cometmq.auth._model import Acl, PolicyType, Resource, User, UserStatus, UserType, invalid_parameter
from cometmq.auth._signature import ACCESS_KEY
from cometmq.auth._store import AuthStore, subject_of, username_of
from cometmq.errors import AuthError
from cometmq.protocol import fastjson
from cometmq.protocol.auth_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from cometmq.protocol.codes import RequestCode, ResponseCode
from cometmq.protocol.command import RemotingCommand
from cometmq.remoting import Connection, RequestHandler


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _username(request: RemotingCommand) -> str:
    username = UserRequestHeader.decode(request.ext_fields).username
    if username is None or not username.strip():
        raise invalid_parameter("the username is blank")
    return username


def _body(request: RemotingCommand, what: str) -> Any:
    try:
        return fastjson.loads(request.body_buffer) if request.body_length else {}
    except (ValueError, UnicodeDecodeError):
        raise invalid_parameter(f"the {what} body is not JSON") from None


def _user_info(request: RemotingCommand) -> tuple[str | None, UserType | None, UserStatus | None]:
    """The password, type and status a UserInfo body gives (None: not given)."""
    info = _body(request, "UserInfo")
    if not isinstance(info, dict):
        raise invalid_parameter("the UserInfo body is not a JSON object")
    password = info.get("password")
    if password is not None and not isinstance(password, str):
        raise invalid_parameter("the UserInfo's password is not a string")
    return (
        password or None,
        UserType.parse_optional(info.get("userType"), "userType"),
        UserStatus.parse_optional(info.get("userStatus"), "userStatus"),
    )


class _AuthAdmin:
    def __init__(self, store: AuthStore, access: AccessControl) -> None:
        self._store = store
        self._access = access

    def _check_may_touch_super(
        self, request: RemotingCommand, username: str, *types: UserType | None
    ) -> None:
        # A stored user hides a plain account of its name: one named as a plain admin account would
        # lock that admin out, so touching it is touching a Super user.
        if UserType.SUPER in types:
            what = f"the Super user {username}"
        elif self._access.is_plain_admin(username):
            what = f"a user named as the admin account {username} of the plain ACL file"
        else:
            return
        caller = request.ext_fields.get(ACCESS_KEY)
        if caller and not self._access.is_super(caller):
            raise AuthError(
                ResponseCode.NO_PERMISSION, f"user {caller} may not change {what}: only a Super user may"
            )

    # users ------------------------------------------------------------------------------------------

    def create_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        username = _username(request)
        password, user_type, user_status = _user_info(request)
        user = User(username, password or "", user_type or UserType.NORMAL, user_status or UserStatus.ENABLE)
        self._check_may_touch_super(request, username, user.user_type)
        self._store.create_user(user)
        return request.response()

    def update_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        username = _username(request)
        password, user_type, user_status = _user_info(request)
        old = self._store.get_user(username)
        self._check_may_touch_super(request, username, user_type, old.user_type if old else None)
        self._store.update_user(username, password=password, user_type=user_type, user_status=user_status)
        return request.response()

    def delete_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        username = _username(request)
        old = self._store.get_user(username)
        self._check_may_touch_super(request, username, old.user_type if old else None)
        self._store.delete_user(username)
        return request.response()

    def get_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        user = self._store.get_user(_username(request))
        return request.response(body=b"" if user is None else _json(user.to_dict(with_password=False)))

    def list_users(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        users = self._store.list_users(ListUsersRequestHeader.decode(request.ext_fields).filter)
        return request.response(body=_json([user.to_dict(with_password=False) for user in users]))

    # ACLs -------------------------------------------------------------------------------------------

    def _acl_of_request(self, request: RemotingCommand) -> Acl:
        subject = AclRequestHeader.decode(request.ext_fields).subject
        acl = Acl.from_dict(_body(request, "AclInfo"))
        # The body's subject if it names one, else the header's (RocketMQ's).
        return Acl(subject_of(username_of(acl.subject or subject)), acl.policies)

    def create_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._store.create_acl(self._acl_of_request(request))
        return request.response()

    def update_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._store.update_acl(self._acl_of_request(request))
        return request.response()

    def delete_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteAclRequestHeader.decode(request.ext_fields)
        policy_type = PolicyType.parse_optional(header.policy_type, "policyType")
        resource = Resource.parse(header.resource) if header.resource else None
        self._store.delete_acl(subject_of(username_of(header.subject)), policy_type, resource)
        return request.response()

    def get_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        acl = self._store.get_acl(
            subject_of(username_of(AclRequestHeader.decode(request.ext_fields).subject))
        )
        return request.response(body=b"" if acl is None else _json(acl.to_dict()))

    def list_acls(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ListAclsRequestHeader.decode(request.ext_fields)
        acls = self._store.list_acls(header.subject_filter, header.resource_filter)
        return request.response(body=_json([acl.to_dict() for acl in acls]))


def auth_admin_handlers(store: AuthStore, access: AccessControl) -> dict[int, RequestHandler]:
    """A dispatch table entry for each of the codes 3001-3010."""
    admin = _AuthAdmin(store, access)
    return {
        RequestCode.AUTH_CREATE_USER: admin.create_user,
        RequestCode.AUTH_UPDATE_USER: admin.update_user,
        RequestCode.AUTH_DELETE_USER: admin.delete_user,
        RequestCode.AUTH_GET_USER: admin.get_user,
        RequestCode.AUTH_LIST_USER: admin.list_users,
        RequestCode.AUTH_CREATE_ACL: admin.create_acl,
        RequestCode.AUTH_UPDATE_ACL: admin.update_acl,
        RequestCode.AUTH_DELETE_ACL: admin.delete_acl,
        RequestCode.AUTH_GET_ACL: admin.get_acl,
        RequestCode.AUTH_LIST_ACL: admin.list_acls,
    }
