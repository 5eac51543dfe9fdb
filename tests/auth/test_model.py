"""Resources, users and ACLs as values: resource keys and RocketMQ's UserInfo/AclInfo JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.auth import (
    Acl,
    Action,
    AuthError,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
    UserType,
)
from cometmq.protocol.codes import ResponseCode

NAMES = st.text(
    st.characters(blacklist_characters="*", blacklist_categories=["Cs"]), min_size=1, max_size=12
).filter(lambda name: name == name.strip() and not name.startswith("%RETRY%"))
TYPES = st.sampled_from([ResourceType.CLUSTER, ResourceType.TOPIC, ResourceType.GROUP])


@st.composite
def resources(draw: st.DrawFn) -> Resource:
    kind = draw(st.sampled_from(["any", "all", "prefix", "literal"]))
    if kind == "any":
        return Resource(ResourceType.ANY, None, ResourcePattern.ANY)
    resource_type = draw(TYPES)
    if kind == "all":
        return Resource(resource_type, None, ResourcePattern.ANY)
    name = draw(NAMES)
    return Resource(
        resource_type, name, ResourcePattern.PREFIXED if kind == "prefix" else ResourcePattern.LITERAL
    )


@given(resources())
def test_a_resource_key_parses_back_to_the_resource(resource: Resource) -> None:
    assert Resource.parse(resource.key) == resource


@given(st.text(max_size=20))
def test_any_text_parses_or_is_refused_with_invalid_parameter(text: str) -> None:
    try:
        resource = Resource.parse(text)
    except AuthError as exc:
        assert exc.code == ResponseCode.INVALID_PARAMETER
        assert repr(text) in exc.remark
    else:
        assert Resource.parse(resource.key) == resource


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("*", Resource(ResourceType.ANY, None, ResourcePattern.ANY)),
        ("Topic:*", Resource(ResourceType.TOPIC, None, ResourcePattern.ANY)),
        ("topic:a*", Resource(ResourceType.TOPIC, "a", ResourcePattern.PREFIXED)),
        ("Group:g", Resource(ResourceType.GROUP, "g", ResourcePattern.LITERAL)),
        ("Group:%RETRY%g", Resource(ResourceType.GROUP, "g", ResourcePattern.LITERAL)),
        ("Cluster:DefaultCluster", Resource(ResourceType.CLUSTER, "DefaultCluster", ResourcePattern.LITERAL)),
    ],
)
def test_resource_keys(key: str, expected: Resource) -> None:
    assert Resource.parse(key) == expected


@pytest.mark.parametrize("key", ["Topic", "Queue:a", "Topic:", "Topic:a*b", "Topic:**", "Any:a", ""])
def test_resource_keys_refused(key: str) -> None:
    with pytest.raises(AuthError, match="resource"):
        Resource.parse(key)


def test_what_a_resource_covers() -> None:
    topic_a = Resource.of(ResourceType.TOPIC, "a1")
    unnamed_topic = Resource.of(ResourceType.TOPIC, None)

    assert Resource.parse("*").matches(topic_a)
    assert Resource.parse("Topic:*").matches(topic_a)
    assert Resource.parse("Topic:a*").matches(topic_a)
    assert Resource.parse("Topic:a1").matches(topic_a)
    assert not Resource.parse("Topic:a1x").matches(topic_a)
    assert not Resource.parse("Group:a1").matches(topic_a)
    assert Resource.parse("Topic:*").matches(unnamed_topic)
    assert not Resource.parse("Topic:a*").matches(unnamed_topic)
    assert not Resource.parse("Topic:a1").matches(unnamed_topic)


users = st.builds(
    User,
    NAMES,
    st.text(max_size=10),
    st.sampled_from(list(UserType)),
    st.sampled_from(list(UserStatus)),
)
entries = st.builds(
    PolicyEntry,
    resources(),
    st.lists(
        st.sampled_from([a for a in Action if a is not Action.ANY]), min_size=1, max_size=3, unique=True
    ).map(tuple),
    st.lists(st.sampled_from(["10.0.0.0/8", "192.168.1.*", "::1"]), max_size=2).map(tuple),
    st.sampled_from(list(Decision)),
)
acls = st.builds(
    Acl,
    NAMES.map(lambda name: f"User:{name}"),
    st.lists(
        st.builds(Policy, st.sampled_from(list(PolicyType)), st.lists(entries, max_size=3).map(tuple)),
        max_size=2,
    ).map(tuple),
)


@given(users)
def test_user_info_round_trip(user: User) -> None:
    assert User.from_json(user.to_json()) == user


@given(acls)
def test_acl_info_round_trip(acl: Acl) -> None:
    assert Acl.from_json(acl.to_json()) == acl


def test_user_info_in_rocketmq_shape_without_the_password_when_asked() -> None:
    user = User("alice", "s3cret", UserType.SUPER, UserStatus.DISABLE)

    assert json.loads(user.to_json()) == {
        "username": "alice",
        "password": "s3cret",
        "userType": "Super",
        "userStatus": "disable",
    }
    assert "password" not in user.to_dict(with_password=False)
    assert "s3cret" not in repr(user)


def test_acl_info_in_rocketmq_shape() -> None:
    text = (
        '{"subject":"User:bob","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:t*",'
        '"actions":["Pub","Sub"],"sourceIps":["10.0.0.0/8"],"decision":"Deny"}]}]}'
    )
    acl = Acl.from_json(text)

    assert acl == Acl(
        "User:bob",
        (
            Policy(
                PolicyType.CUSTOM,
                (
                    PolicyEntry(
                        Resource.parse("Topic:t*"), (Action.PUB, Action.SUB), ("10.0.0.0/8",), Decision.DENY
                    ),
                ),
            ),
        ),
    )
    assert json.loads(acl.to_json()) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"username": "a", "userType": "Root"}', "userType 'Root' is not one of Super, Normal"),
        ("[1]", "UserInfo is not a JSON object"),
        ("{", "UserInfo is not valid JSON"),
    ],
)
def test_bad_user_info(text: str, problem: str) -> None:
    with pytest.raises(AuthError, match=problem) as caught:
        User.from_json(text)
    assert caught.value.code == ResponseCode.INVALID_PARAMETER


def test_enum_names_are_read_in_any_case() -> None:
    user = User.from_json('{"username": "a", "password": "p", "userType": "super", "userStatus": "ENABLE"}')

    assert (user.user_type, user.user_status) == (UserType.SUPER, UserStatus.ENABLE)
