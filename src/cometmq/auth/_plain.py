"""RocketMQ 4.x's ``plain_acl.yml``: accounts with a secret, per-topic and per-group permissions, and
addresses trusted without a signature.

::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: ""
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB"]

A permission is DENY, PUB, SUB, PUB|SUB or SUB|PUB; anything else (a missing default too) is DENY, as
4.x reads it. A group's permission may name its retry topic (``%RETRY%g``): it is the group's.

Every scalar but null is read as the text it is (an unquoted ``secretKey: 012345`` is the secret
``012345``, not YAML 1.1's octal number), and ``admin`` is one of YAML 1.1's boolean words
(true/false, yes/no, on/off, in any case), as 4.x's reader binds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from cometmq.auth._addresses import AddressPattern
from cometmq.auth._model import Action, group_of_retry_topic
from cometmq.errors import AuthError, ConfigError

Perm = frozenset[Action]

DENY: Final[Perm] = frozenset()
_PERMS: Final[Mapping[str, Perm]] = {
    "DENY": DENY,
    "PUB": frozenset((Action.PUB,)),
    "SUB": frozenset((Action.SUB,)),
    "PUB|SUB": frozenset((Action.PUB, Action.SUB)),
    "SUB|PUB": frozenset((Action.PUB, Action.SUB)),
}


def parse_perm(text: object) -> Perm:
    """A 4.x permission: the actions it grants (none: DENY)."""
    return _PERMS.get(text.strip(), DENY) if isinstance(text, str) else DENY


NO_ADDRESS: Final = AddressPattern("")


@dataclasses.dataclass(frozen=True, slots=True)
class PlainAccount:
    """One account of the file; its repr never shows the secret."""

    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    white_remote_address: AddressPattern = NO_ADDRESS
    admin: bool = False
    default_topic_perm: Perm = DENY
    default_group_perm: Perm = DENY
    topic_perms: Mapping[str, Perm] = dataclasses.field(default_factory=dict)
    group_perms: Mapping[str, Perm] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class PlainAcl:
    global_white_addresses: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, PlainAccount] = dataclasses.field(default_factory=dict)


class PlainAclError(ValueError):
    """What is wrong with a plain ACL text (never a secret)."""


class _TextLoader(yaml.SafeLoader):
    """YAML with every scalar a string but null (an empty value, ``~``, ``null``): a quoted
    ``'null'`` stays text, which YAML's base loader could not tell from the null."""


_NULL_TAG: Final = "tag:yaml.org,2002:null"
_TextLoader.yaml_implicit_resolvers = {
    first: nulls
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    if (nulls := [(tag, pattern) for tag, pattern in resolvers if tag == _NULL_TAG])
}
_BOOLEANS: Final = {
    **dict.fromkeys(("true", "yes", "on"), True),
    **dict.fromkeys(("false", "no", "off"), False),
}


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    raise PlainAclError(f"{what} is not a string")


def _flag(value: Any, what: str) -> bool:
    if value is None:
        return False
    flag = _BOOLEANS.get(value.strip().lower()) if isinstance(value, str) else None
    if flag is None:
        raise PlainAclError(f"{what} is not true or false")
    return flag


def _pattern(value: Any, what: str) -> AddressPattern:
    try:
        return AddressPattern.parse(_text(value, what))
    except AuthError as exc:
        raise PlainAclError(f"{what}: {exc.remark}") from None


def _resource_perms(value: Any, what: str, *, groups: bool) -> dict[str, Perm]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise PlainAclError(f"{what} is not a list of 'name=PERM'")
    perms = {}
    for item in value:
        name, equals, perm = _text(item, what).partition("=")
        name = name.strip()
        if not equals or not name:
            raise PlainAclError(f"{what}: {item!r} is not 'name=PERM'")
        perms[group_of_retry_topic(name) if groups else name] = parse_perm(perm)
    return perms


def _account(value: Any, index: int) -> PlainAccount:
    what = f"accounts[{index}]"
    if not isinstance(value, dict):
        raise PlainAclError(f"{what} is not a mapping")
    access_key = _text(value.get("accessKey"), f"{what}.accessKey").strip()
    if not access_key:
        raise PlainAclError(f"{what}.accessKey is empty")
    what = f"the account {access_key}"
    secret = value.get("secretKey")
    if not secret:
        raise PlainAclError(f"{what} has no secretKey")
    white = value.get("whiteRemoteAddress")
    return PlainAccount(
        access_key,
        _text(secret, f"{what}'s secretKey"),
        _pattern("" if white is None else white, f"{what}'s whiteRemoteAddress"),
        _flag(value.get("admin"), f"{what}'s admin"),
        parse_perm(value.get("defaultTopicPerm")),
        parse_perm(value.get("defaultGroupPerm")),
        _resource_perms(value.get("topicPerms"), f"{what}'s topicPerms", groups=False),
        _resource_perms(value.get("groupPerms"), f"{what}'s groupPerms", groups=True),
    )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # Not str(exc): it quotes the lines around the problem, which may hold a secretKey.
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not valid YAML: {exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return "not valid YAML"


def parse_plain_acl(text: str) -> PlainAcl:
    """The accounts and trusted addresses of a plain_acl.yml text; :class:`PlainAclError` says what
    is wrong (an empty text has none)."""
    try:
        document = yaml.load(text, Loader=_TextLoader)
    except yaml.YAMLError as exc:
        raise PlainAclError(_yaml_problem(exc)) from None
    if document is None:
        return PlainAcl()
    if not isinstance(document, dict):
        raise PlainAclError("not a mapping with globalWhiteRemoteAddresses and accounts")
    white = document.get("globalWhiteRemoteAddresses")
    white = [] if white is None else white
    if not isinstance(white, list):
        raise PlainAclError("globalWhiteRemoteAddresses is not a list")
    raw_accounts = document.get("accounts")
    raw_accounts = [] if raw_accounts is None else raw_accounts
    if not isinstance(raw_accounts, list):
        raise PlainAclError("accounts is not a list")
    accounts: dict[str, PlainAccount] = {}
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, index)
        if account.access_key in accounts:
            raise PlainAclError(f"the accessKey {account.access_key} is given twice")
        accounts[account.access_key] = account
    return PlainAcl(
        tuple(_pattern(item, "globalWhiteRemoteAddresses") for item in white),
        accounts,
    )


def load_plain_acl(path: Path) -> PlainAcl:
    """The plain ACL file at *path*; ConfigError names the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"plain ACL file {path} cannot be read: {exc}") from None
    try:
        return parse_plain_acl(text)
    except PlainAclError as exc:
        raise ConfigError(f"plain ACL file {path}: {exc}") from None
