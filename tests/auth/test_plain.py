"""RocketMQ 4.x's plain_acl.yml: accounts, permissions and trusted addresses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cometmq.auth import Action
from cometmq.auth._plain import DENY, PlainAclError, load_plain_acl, parse_perm, parse_plain_acl
from cometmq.errors import ConfigError

PERM_TEXTS = ["DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB"]
KEYS = st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=10)
NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def accounts(draw: st.DrawFn, access_key: str) -> dict[str, Any]:
    return {
        "accessKey": access_key,
        "secretKey": draw(
            st.text(st.characters(whitelist_categories=("L", "N", "P")), min_size=1, max_size=12)
        ),
        "whiteRemoteAddress": draw(st.sampled_from(["", "192.168.1.*", "10.0.0.0/8", "127.0.0.1"])),
        "admin": draw(st.booleans()),
        "defaultTopicPerm": draw(st.sampled_from([*PERM_TEXTS, "WRONG"])),
        "defaultGroupPerm": draw(st.sampled_from(PERM_TEXTS)),
        "topicPerms": [
            f"{name}={perm}"
            for name, perm in draw(st.dictionaries(NAMES, st.sampled_from(PERM_TEXTS))).items()
        ],
        "groupPerms": [
            f"{name}={perm}"
            for name, perm in draw(st.dictionaries(NAMES, st.sampled_from(PERM_TEXTS))).items()
        ],
    }


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(KEYS, unique=True, max_size=4))
    return {
        "globalWhiteRemoteAddresses": draw(
            st.lists(st.sampled_from(["10.10.103.*", "192.168.0.{1,2}", "*"]), max_size=3)
        ),
        "accounts": [draw(accounts(key)) for key in keys],
    }


@given(documents())
def test_every_account_reads_as_written(document: dict[str, Any]) -> None:
    plain = parse_plain_acl(yaml.safe_dump(document))

    assert [p.text for p in plain.global_white_addresses] == document["globalWhiteRemoteAddresses"]
    assert list(plain.accounts) == [raw["accessKey"] for raw in document["accounts"]]
    for raw in document["accounts"]:
        account = plain.accounts[raw["accessKey"]]
        assert account.secret_key == raw["secretKey"]
        assert account.white_remote_address.text == raw["whiteRemoteAddress"]
        assert account.admin is raw["admin"]
        assert account.default_topic_perm == parse_perm(raw["defaultTopicPerm"])
        assert account.topic_perms == {
            item.split("=")[0]: parse_perm(item.split("=")[1]) for item in raw["topicPerms"]
        }
        assert len(account.group_perms) == len(raw["groupPerms"])


@pytest.mark.parametrize(
    ("text", "actions"),
    [
        ("DENY", set()),
        ("PUB", {Action.PUB}),
        ("SUB", {Action.SUB}),
        ("PUB|SUB", {Action.PUB, Action.SUB}),
        (" SUB|PUB ", {Action.PUB, Action.SUB}),
        ("pub", set()),
        ("ANY", set()),
        (None, set()),
    ],
)
def test_perms_as_4x_reads_them(text: str | None, actions: set[Action]) -> None:
    assert parse_perm(text) == actions


def test_the_rocketmq_sample_file() -> None:
    plain = parse_plain_acl(
        """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - "%RETRY%groupC=SUB"
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""
    )

    account = plain.accounts["RocketMQ"]
    assert account.secret_key == "12345678"
    assert account.default_topic_perm == DENY
    assert account.default_group_perm == {Action.SUB}
    assert account.topic_perms["topicB"] == {Action.PUB, Action.SUB}
    assert account.group_perms["groupC"] == {Action.SUB}
    assert plain.accounts["rocketmq2"].admin
    assert "12345678" not in repr(plain)


def test_every_scalar_is_read_as_written() -> None:
    plain = parse_plain_acl(
        """
accounts:
  - {accessKey: 0755, secretKey: 012345, whiteRemoteAddress: ~, topicPerms: [1e3=PUB]}
  - {accessKey: b, secretKey: 'null', admin: Yes}
  - {accessKey: c, secretKey: 12:30, admin: off}
  - {accessKey: d, secretKey: 0x1F, admin: }
"""
    )

    # YAML 1.1 would read an octal 5349, a float, a sexagesimal 750 and a hexadecimal 31.
    assert plain.accounts["0755"].secret_key == "012345"
    assert plain.accounts["0755"].white_remote_address.text == ""
    assert set(plain.accounts["0755"].topic_perms) == {"1e3"}
    assert plain.accounts["b"].secret_key == "null" and plain.accounts["b"].admin
    assert plain.accounts["c"].secret_key == "12:30" and not plain.accounts["c"].admin
    assert plain.accounts["d"].secret_key == "0x1F" and not plain.accounts["d"].admin


def test_an_empty_file_has_no_accounts() -> None:
    assert not parse_plain_acl("").accounts
    assert not parse_plain_acl("accounts:\n").accounts


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("accounts: {}", "accounts is not a list"),
        ("accounts:\n  - secretKey: s3cret-value", "accessKey"),
        ("accounts:\n  - accessKey: a\n", "the account a has no secretKey"),
        (
            "accounts:\n  - {accessKey: a, secretKey: s3cret-value}\n  - {accessKey: a, secretKey: x}",
            "given twice",
        ),
        ("accounts:\n  - {accessKey: a, secretKey: s3cret-value, topicPerms: [t]}", "'t' is not 'name=PERM'"),
        (
            "accounts:\n  - {accessKey: a, secretKey: s3cret-value, whiteRemoteAddress: 1.2.3}",
            "whiteRemoteAddress",
        ),
        (
            "accounts:\n  - {accessKey: a, secretKey: s3cret-value, admin: maybe}",
            "admin is not true or false",
        ),
        ("accounts:\n  - accessKey: a\n    secretKey: s3cret-value\n   bad: [", "not valid YAML"),
        ("[1, 2]", "not a mapping"),
    ],
)
def test_what_is_wrong_is_said_without_the_secret(text: str, problem: str) -> None:
    with pytest.raises(PlainAclError, match=problem) as caught:
        parse_plain_acl(text)

    assert "s3cret-value" not in str(caught.value)


def test_loading_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: 3\n")

    with pytest.raises(ConfigError, match=f"plain ACL file {path}: accounts is not a list"):
        load_plain_acl(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_plain_acl(tmp_path / "missing.yml")
