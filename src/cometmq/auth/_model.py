"""Users, resources, policies and ACLs of RocketMQ 5's access control (ACL 2.0), as values.

The JSON shapes are RocketMQ's ``UserInfo`` and ``AclInfo``: what AUTH_CREATE_USER … AUTH_LIST_ACL
carry in their bodies and what ``auth.json`` stores.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any, Self

from cometmq.errors import AuthError
from cometmq.protocol import fastjson
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX


class _Named(enum.Enum):
    """An enum whose wire form is its value; parsed case-insensitively, as RocketMQ's ``getByName``."""

    @classmethod
    def parse(cls, text: str, what: str) -> Self:
        for member in cls:
            if member.value.lower() == text.strip().lower():
                return member
        allowed = ", ".join(member.value for member in cls)
        raise invalid_parameter(f"{what} {text!r} is not one of {allowed}")

    @classmethod
    def parse_optional(cls, value: Any, what: str) -> Self | None:
        """A JSON value that may be absent (None or empty: None)."""
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise invalid_parameter(f"{what} is not a string")
        return cls.parse(value, what)


class UserType(_Named):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    ENABLE = "enable"
    DISABLE = "disable"


class ResourceType(_Named):
    ANY = "Any"
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(_Named):
    """How a resource key names resources: all of its type (``Topic:*``), those whose name starts
    with a prefix (``Topic:a*``), or one (``Topic:a``)."""

    ANY = "Any"
    PREFIXED = "Prefixed"
    LITERAL = "Literal"


class Action(_Named):
    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class Decision(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(_Named):
    CUSTOM = "Custom"
    DEFAULT = "Default"


def invalid_parameter(remark: str) -> AuthError:
    """A refusal of something malformed (RocketMQ 5's INVALID_PARAMETER)."""
    return AuthError(ResponseCode.INVALID_PARAMETER, remark)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid_parameter(f"{what} is not a JSON object")
    return value


def _string(obj: Mapping[str, Any], key: str, what: str, default: str | None = None) -> str:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise invalid_parameter(f"{what} has no {key}")
        return default
    if not isinstance(value, str):
        raise invalid_parameter(f"{what}'s {key} is not a string")
    return value


def json_list(obj: Mapping[str, Any], key: str, what: str) -> list[Any]:
    """A JSON array, absent or null meaning empty."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_parameter(f"{what}'s {key} is not a list")
    return value


def _strings(obj: Mapping[str, Any], key: str, what: str) -> list[str]:
    value = json_list(obj, key, what)
    if not all(isinstance(item, str) for item in value):
        raise invalid_parameter(f"{what}'s {key} is not a list of strings")
    return value


def _parse_json(text: str | bytes, what: str) -> Any:
    try:
        return fastjson.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_parameter(f"{what} is not valid JSON: {exc}") from None


def group_of_retry_topic(name: str) -> str:
    """The group whose retry topic *name* is (``%RETRY%g`` → ``g``), other names as they are: access
    to a group's retry topic is access to the group."""
    return name[len(RETRY_GROUP_TOPIC_PREFIX) :] if name.startswith(RETRY_GROUP_TOPIC_PREFIX) else name


_NAMED_TYPES = {
    kind.value.lower(): kind for kind in (ResourceType.CLUSTER, ResourceType.TOPIC, ResourceType.GROUP)
}


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A resource an ACL entry names, or a request needs.

    An entry's resource may name many (``*``, ``Topic:*``, ``Topic:a*``); a need's names one
    (LITERAL), or, when the request did not name it (a missing header field), none in particular:
    ``name`` None with pattern ANY, which only ``*`` and ``<Type>:*`` entries match.
    """

    type: ResourceType
    name: str | None
    pattern: ResourcePattern

    @classmethod
    def of(cls, resource_type: ResourceType, name: str | None) -> Resource:
        """The one resource of *resource_type* called *name* (a group's retry topic names its group);
        None: the request named none."""
        if name is None:
            return cls(resource_type, None, ResourcePattern.ANY)
        if resource_type is ResourceType.GROUP:
            name = group_of_retry_topic(name)
        return cls(resource_type, name, ResourcePattern.LITERAL)

    @classmethod
    def parse(cls, key: str) -> Resource:
        """The resource of a key: ``*``, ``Cluster:c``, ``Topic:a``, ``Topic:a*``, ``Topic:*``,
        ``Group:g``… (type names in any case)."""
        text = key.strip()
        if text == "*":
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        type_name, colon, name = text.partition(":")
        resource_type = _NAMED_TYPES.get(type_name.strip().lower())
        if not colon or resource_type is None:
            raise invalid_parameter(f"resource {key!r} is not '*' or <Type>:<name> (Cluster, Topic or Group)")
        if not name:
            raise invalid_parameter(f"resource {key!r} names nothing after the colon")
        if name == "*":
            return cls(resource_type, None, ResourcePattern.ANY)
        if name.endswith("*"):
            prefix = name[:-1]
            if "*" in prefix:
                raise invalid_parameter(f"resource {key!r}: '*' may only end a name")
            return cls(resource_type, prefix, ResourcePattern.PREFIXED)
        if "*" in name:
            raise invalid_parameter(f"resource {key!r}: '*' may only end a name")
        return cls.of(resource_type, name)

    @property
    def key(self) -> str:
        """The key of this resource, as :meth:`parse` reads it."""
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{self.type.value}:{self.name}*"
        return f"{self.type.value}:{self.name}"

    def __str__(self) -> str:
        return self.key

    def matches(self, wanted: Resource) -> bool:
        """Whether this (an entry's) resource covers *wanted* (a need's)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not wanted.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if wanted.name is None or self.name is None:
            return False
        if self.pattern is ResourcePattern.PREFIXED:
            return wanted.name.startswith(self.name)
        return wanted.name == self.name


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    """A user of ACL 2.0. Its repr never shows the password."""

    username: str
    password: str = dataclasses.field(repr=False)
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE

    def to_dict(self, *, with_password: bool = True) -> dict[str, Any]:
        """RocketMQ's UserInfo; answers to GET_USER and LIST_USER leave the password out."""
        info: dict[str, Any] = {"username": self.username}
        if with_password:
            info["password"] = self.password
        info["userType"] = self.user_type.value
        info["userStatus"] = self.user_status.value
        return info

    def to_json(self, *, with_password: bool = True) -> str:
        return json.dumps(self.to_dict(with_password=with_password))

    @classmethod
    def from_dict(cls, value: Any) -> User:
        """A user from a UserInfo; userType defaults to Normal, userStatus to enable, a missing
        password to the empty one."""
        info = _object(value, "UserInfo")
        return cls(
            _string(info, "username", "UserInfo", ""),
            _string(info, "password", "UserInfo", ""),
            UserType.parse_optional(info.get("userType"), "userType") or UserType.NORMAL,
            UserStatus.parse_optional(info.get("userStatus"), "userStatus") or UserStatus.ENABLE,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> User:
        return cls.from_dict(_parse_json(text, "UserInfo"))


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One rule: *decision* for any of *actions* on *resource*, from *source_ips* (address patterns,
    as plain_acl.yml's; empty: from anywhere)."""

    resource: Resource
    actions: tuple[Action, ...]
    source_ips: tuple[str, ...] = ()
    decision: Decision = Decision.ALLOW

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource.key,
            "actions": [action.value for action in self.actions],
            "sourceIps": list(self.source_ips),
            "decision": self.decision.value,
        }

    @classmethod
    def from_dict(cls, value: Any) -> PolicyEntry:
        info = _object(value, "a policy entry")
        actions = tuple(Action.parse(text, "action") for text in _strings(info, "actions", "a policy entry"))
        if not actions:
            raise invalid_parameter("a policy entry lists no actions")
        return cls(
            Resource.parse(_string(info, "resource", "a policy entry")),
            actions,
            tuple(_strings(info, "sourceIps", "a policy entry")),
            Decision.parse_optional(info.get("decision"), "decision") or Decision.ALLOW,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    policy_type: PolicyType
    entries: tuple[PolicyEntry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"policyType": self.policy_type.value, "entries": [entry.to_dict() for entry in self.entries]}

    @classmethod
    def from_dict(cls, value: Any) -> Policy:
        info = _object(value, "a policy")
        return cls(
            PolicyType.parse_optional(info.get("policyType"), "policyType") or PolicyType.CUSTOM,
            tuple(PolicyEntry.from_dict(entry) for entry in json_list(info, "entries", "a policy")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Acl:
    """The policies of one subject (``User:<name>``)."""

    subject: str
    policies: tuple[Policy, ...]

    def policy(self, policy_type: PolicyType) -> Policy | None:
        return next((policy for policy in self.policies if policy.policy_type is policy_type), None)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "policies": [policy.to_dict() for policy in self.policies]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, value: Any) -> Acl:
        info = _object(value, "AclInfo")
        policies = json_list(info, "policies", "AclInfo")
        return cls(_string(info, "subject", "AclInfo", ""), tuple(Policy.from_dict(p) for p in policies))

    @classmethod
    def from_json(cls, text: str | bytes) -> Acl:
        return cls.from_dict(_parse_json(text, "AclInfo"))


@dataclasses.dataclass(frozen=True, slots=True)
class Need:
    """What a request needs on one resource: any one of *actions*."""

    resource: Resource
    actions: frozenset[Action]

    @classmethod
    def of(cls, resource: Resource, actions: Iterable[Action]) -> Need:
        return cls(resource, frozenset(actions))
