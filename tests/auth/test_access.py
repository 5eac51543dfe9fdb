"""The access check: authentication (signatures, unknown and disabled users, trusted addresses) and
authorization (ACL 2.0 for stored users, 4.x rules for plain accounts)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.auth import (
    ACCESS_KEY,
    SIGNATURE,
    AccessControl,
    Acl,
    Action,
    AuthStore,
    Credentials,
    Decision,
    Need,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourceType,
    User,
    UserStatus,
    UserType,
    _access,
    sign,
    signature_of,
)
from cometmq.auth._needs import TABLE
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.naming import TRACE_TOPIC

CLUSTER = "DefaultCluster"
CLIENT = "10.1.2.3:50000"


def entry(
    resource: str, *actions: Action, decision: Decision = Decision.ALLOW, ips: tuple[str, ...] = ()
) -> PolicyEntry:
    return PolicyEntry(Resource.parse(resource), actions, ips, decision)


def custom(*entries: PolicyEntry) -> Policy:
    return Policy(PolicyType.CUSTOM, entries)


def default(*entries: PolicyEntry) -> Policy:
    return Policy(PolicyType.DEFAULT, entries)


@pytest.fixture
def store(tmp_path: Path) -> AuthStore:
    store = AuthStore(tmp_path / "config")
    store.create_user(User("alice", "alice-secret"))
    store.create_user(User("root", "root-secret", UserType.SUPER))
    store.create_user(User("off", "off-secret", user_status=UserStatus.DISABLE))
    return store


@pytest.fixture
def access(store: AuthStore) -> AccessControl:
    return AccessControl(store, CLUSTER)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> AccessControl:
    """An access check with a user of every kind and a policy, shared by the examples of a property."""
    store = AuthStore(tmp_path_factory.mktemp("gate"))
    store.create_user(User("alice", "alice-secret"))
    store.create_user(User("root", "root-secret", UserType.SUPER))
    store.update_acl(
        Acl("User:alice", (custom(entry("Topic:t*", Action.PUB), entry("Group:*", Action.SUB)),))
    )
    return AccessControl(store, CLUSTER)


def send(topic: str, credentials: Credentials | None, body: bytes = b"hello") -> RemotingCommand:
    request = RemotingCommand(
        RequestCode.SEND_MESSAGE, opaque=7, ext_fields={"topic": topic, "producerGroup": "pg"}, body=body
    )
    if credentials is not None:
        sign(request, credentials)
    return request


ALICE = Credentials("alice", "alice-secret")


def refusal(access: AccessControl, request: RemotingCommand, remote: str = CLIENT) -> str | None:
    response = access.check(remote, request)
    if response is None:
        return None
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.opaque == request.opaque and response.is_response
    return response.remark


def allow(store: AuthStore, *policies: Policy) -> None:
    store.update_acl(Acl("User:alice", policies))


# authentication ---------------------------------------------------------------------------------


def test_an_unsigned_request_is_refused(access: AccessControl) -> None:
    assert refusal(access, send("t", None)) == (
        "request code 10 is not signed: this server requires an AccessKey and Signature (aclEnable=true)"
    )


def test_an_empty_access_key_counts_as_unsigned(access: AccessControl) -> None:
    request = send("t", None)
    request.ext_fields[ACCESS_KEY] = ""

    assert "is not signed" in (refusal(access, request) or "")


def test_an_unknown_user_is_refused(access: AccessControl) -> None:
    assert refusal(access, send("t", Credentials("mallory", "x"))) == "user mallory is not known here"


def test_a_disabled_user_is_refused(access: AccessControl) -> None:
    assert refusal(access, send("t", Credentials("off", "off-secret"))) == "user off is disabled"


def test_a_request_without_signature_is_refused(access: AccessControl) -> None:
    request = send("t", ALICE)
    del request.ext_fields[SIGNATURE]

    assert refusal(access, request) == "request code 10 of user alice carries no Signature"


MISMATCH = (
    "the signature of user alice does not match (wrong secret key, or the request was changed on the way)"
)


def test_a_wrong_secret_is_refused_without_telling_the_secret(access: AccessControl) -> None:
    remark = refusal(access, send("t", Credentials("alice", "guess")))

    assert remark == MISMATCH
    assert "alice-secret" not in remark


def test_a_changed_body_or_field_is_refused(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:*", Action.PUB)))
    changed_body = send("t", ALICE)
    changed_body.body = b"changed"
    changed_field = send("t", ALICE)
    changed_field.ext_fields["topic"] = "u"

    assert refusal(access, send("t", ALICE)) is None
    assert refusal(access, changed_body) == MISMATCH
    assert refusal(access, changed_field) == MISMATCH


def test_a_signature_replayed_on_another_request_is_refused(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:*", Action.PUB)))
    original = send("t", ALICE, b"one")
    replayed = send("t", None, b"two")
    replayed.ext_fields.update({ACCESS_KEY: "alice", SIGNATURE: original.ext_fields[SIGNATURE]})

    assert refusal(access, replayed) == MISMATCH


def test_codes_not_in_the_table_are_not_checked(access: AccessControl) -> None:
    assert access.check(CLIENT, RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)) is None


def test_a_malformed_body_the_table_reads_is_answered_with_its_refusal(access: AccessControl) -> None:
    request = RemotingCommand(RequestCode.HEART_BEAT, body=b"nope")
    sign(request, ALICE)

    response = access.check(CLIENT, request)

    assert response is not None and response.code == ResponseCode.SYSTEM_ERROR


def test_only_an_authenticated_request_has_its_body_read(
    access: AccessControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []
    monkeypatch.setattr(_access, "needs_of", lambda request, cluster: read.append(request.code) or [])
    heartbeat = b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "t"}]}]}'
    unsigned = RemotingCommand(RequestCode.HEART_BEAT, body=heartbeat)
    wrong_secret = RemotingCommand(RequestCode.HEART_BEAT, body=heartbeat)
    sign(wrong_secret, Credentials("alice", "guess"))
    signed = RemotingCommand(RequestCode.HEART_BEAT, body=heartbeat)
    sign(signed, ALICE)

    assert "is not signed" in (refusal(access, unsigned) or "")
    assert refusal(access, wrong_secret) == MISMATCH
    assert read == []
    assert refusal(access, signed) is None
    assert read == [RequestCode.HEART_BEAT]


def test_a_signature_made_for_another_code_is_refused(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:*", Action.GET, Action.DELETE)))
    stats = RemotingCommand(RequestCode.GET_TOPIC_STATS_INFO, ext_fields={"topic": "t"})
    sign(stats, ALICE)
    replayed = RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields=dict(stats.ext_fields))

    assert refusal(access, stats) is None
    assert refusal(access, replayed) == (
        f"request code {RequestCode.DELETE_TOPIC_IN_BROKER} carries the CometMQRequestCode "
        f"{RequestCode.GET_TOPIC_STATS_INFO}: its signature was made for another request"
    )


def test_a_fault_inside_the_check_refuses_the_request_with_one_log_line(
    access: AccessControl, store: AuthStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(name: str) -> User | None:
        raise RuntimeError("the store broke")

    monkeypatch.setattr(store, "get_user", broken)
    with caplog.at_level(logging.DEBUG, "cometmq.auth"):
        remarks = [refusal(access, send("t", ALICE)) for _ in range(3)]

    assert remarks == ["the access check failed on this request (the server logs why)"] * 3
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "RuntimeError: the store broke" in errors[0].getMessage()


# ACL 2.0 ----------------------------------------------------------------------------------------


def test_a_user_with_no_acl_may_do_nothing(access: AccessControl) -> None:
    assert (
        refusal(access, send("t", ALICE))
        == "user alice may not Pub on Topic:t (from 10.1.2.3): no policy allows it"
    )


def test_a_super_user_may_do_anything(access: AccessControl) -> None:
    assert refusal(access, send("t", Credentials("root", "root-secret"))) is None
    request = RemotingCommand(RequestCode.UPDATE_BROKER_CONFIG)
    sign(request, Credentials("root", "root-secret"))
    assert refusal(access, request) is None


def test_an_allowing_entry_allows(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.PUB)))

    assert refusal(access, send("t", ALICE)) is None
    assert refusal(access, send("u", ALICE)) is not None


def test_all_covers_every_action(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.ALL)))

    assert refusal(access, send("t", ALICE)) is None


def test_an_entry_for_other_actions_does_not_match(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.SUB)))

    assert "no policy allows it" in (refusal(access, send("t", ALICE)) or "")


def test_deny_wins_at_equal_specificity(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t*", Action.PUB), entry("Topic:t*", Action.PUB, decision=Decision.DENY)))

    assert (
        refusal(access, send("t1", ALICE))
        == "user alice may not Pub on Topic:t1 (from 10.1.2.3): a policy denies it"
    )


@pytest.mark.parametrize(
    ("specific", "general"),
    [
        ("Topic:t1", "Topic:t*"),  # literal over prefixed
        ("Topic:t*", "Topic:*"),  # prefixed over any name
        ("Topic:t1*", "Topic:t*"),  # the longer prefix first
        ("Topic:*", "*"),  # a typed resource over any resource
    ],
)
def test_the_most_specific_match_decides(
    access: AccessControl, store: AuthStore, specific: str, general: str
) -> None:
    allow(store, custom(entry(general, Action.PUB, decision=Decision.DENY), entry(specific, Action.PUB)))
    assert refusal(access, send("t1", ALICE)) is None

    store.delete_acl("User:alice")
    allow(store, custom(entry(general, Action.PUB), entry(specific, Action.PUB, decision=Decision.DENY)))
    assert "a policy denies it" in (refusal(access, send("t1", ALICE)) or "")


def test_default_entries_only_when_no_custom_entry_matches(access: AccessControl, store: AuthStore) -> None:
    allow(
        store,
        custom(entry("Topic:t1", Action.PUB, decision=Decision.DENY)),
        default(entry("Topic:*", Action.PUB)),
    )

    assert "denies" in (refusal(access, send("t1", ALICE)) or "")
    assert refusal(access, send("t2", ALICE)) is None


def test_a_custom_match_hides_a_more_specific_default(access: AccessControl, store: AuthStore) -> None:
    allow(
        store,
        custom(entry("Topic:*", Action.PUB, decision=Decision.DENY)),
        default(entry("Topic:t1", Action.PUB)),
    )

    assert "denies" in (refusal(access, send("t1", ALICE)) or "")


def test_source_ips_limit_an_entry(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.PUB, ips=("10.1.0.0/16",))))

    assert refusal(access, send("t", ALICE), "10.1.2.3:1") is None
    assert refusal(access, send("t", ALICE), "10.2.2.3:1") == (
        "user alice may not Pub on Topic:t (from 10.2.2.3): no policy allows it"
    )


def test_any_one_action_of_a_need_passes(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.GET)))
    route = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "t"})
    sign(route, ALICE)

    assert refusal(access, route) is None


def test_every_need_must_pass(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:t", Action.SUB)))
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields={"topic": "t", "consumerGroup": "g"})
    sign(pull, ALICE)

    assert refusal(access, pull) == "user alice may not Sub on Group:g (from 10.1.2.3): no policy allows it"
    allow(store, custom(entry("Group:g", Action.SUB)))
    assert refusal(access, pull) is None


def test_a_retry_group_entry_names_the_group(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Group:%RETRY%g", Action.SUB)))
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields={"topic": "%RETRY%g", "consumerGroup": "g"})
    sign(pull, ALICE)

    assert refusal(access, pull) is None


def test_a_cluster_need_at_a_broker_and_at_a_name_server(store: AuthStore) -> None:
    allow(store, custom(entry(f"Cluster:{CLUSTER}", Action.GET)))
    info = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO)
    sign(info, ALICE)

    assert refusal(AccessControl(store, CLUSTER), info) is None
    assert refusal(AccessControl(store, None), info) == (
        "user alice may not Get on Cluster:* (from 10.1.2.3): no policy allows it"
    )
    allow(store, custom(entry("Cluster:*", Action.GET)))
    assert refusal(AccessControl(store, None), info) is None


# plain_acl.yml ----------------------------------------------------------------------------------

PLAIN = """
globalWhiteRemoteAddresses: ["192.168.9.*"]
accounts:
  - accessKey: plainuser
    secretKey: plain-secret
    whiteRemoteAddress: 10.9.9.9
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms: ["pubonly=PUB", "closed=DENY", "both=PUB|SUB"]
    groupPerms: ["g=SUB"]
  - accessKey: plainadmin
    secretKey: admin-secret
    admin: true
  - accessKey: alice
    secretKey: plain-alice-secret
"""
PLAIN_USER = Credentials("plainuser", "plain-secret")


@pytest.fixture
def plain_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    return path


@pytest.fixture
def plain(store: AuthStore, plain_file: Path) -> AccessControl:
    return AccessControl(store, CLUSTER, plain_file)


def signed(
    code: int, fields: dict[str, str], credentials: Credentials | None = PLAIN_USER
) -> RemotingCommand:
    request = RemotingCommand(code, ext_fields=dict(fields))
    if credentials is not None:
        sign(request, credentials)
    return request


@pytest.mark.parametrize(
    ("topic", "refused"),
    [("pubonly", False), ("both", False), ("closed", True), ("other", True)],
)
def test_plain_pub_takes_the_topic_perm_else_the_default(
    plain: AccessControl, topic: str, refused: bool
) -> None:
    assert (refusal(plain, send(topic, PLAIN_USER)) is not None) is refused


def test_every_plain_account_may_write_message_traces(plain: AccessControl) -> None:
    # plainuser's default topic permission is SUB only; 4.x lets any account publish trace records.
    assert refusal(plain, send(TRACE_TOPIC, PLAIN_USER)) is None
    assert refusal(plain, send("other", PLAIN_USER)) is not None


def test_plain_deny_is_a_policy_that_denies(plain: AccessControl) -> None:
    assert refusal(plain, send("closed", PLAIN_USER)) == (
        "user plainuser may not Pub on Topic:closed (from 10.1.2.3): a policy denies it"
    )


def test_plain_group_perms(plain: AccessControl) -> None:
    pull_g = signed(RequestCode.PULL_MESSAGE, {"topic": "other", "consumerGroup": "g"})
    pull_h = signed(RequestCode.PULL_MESSAGE, {"topic": "other", "consumerGroup": "h"})

    assert refusal(plain, pull_g) is None
    assert (
        refusal(plain, pull_h) == "user plainuser may not Sub on Group:h (from 10.1.2.3): a policy denies it"
    )


def test_plain_get_and_list_are_allowed(plain: AccessControl) -> None:
    assert refusal(plain, signed(RequestCode.GET_MAX_OFFSET, {"topic": "closed", "queueId": "0"})) is None
    assert refusal(plain, signed(RequestCode.GET_ALL_TOPIC_CONFIG, {})) is None


@pytest.mark.parametrize(
    ("topic", "refused"), [("other", False), ("both", False), ("closed", True), ("pubonly", True)]
)
def test_plain_get_that_sub_would_also_pass_takes_the_perm(
    plain: AccessControl, topic: str, refused: bool
) -> None:
    query = signed(RequestCode.QUERY_MESSAGE, {"topic": topic, "key": "k"})  # Sub or Get

    assert (refusal(plain, query) is not None) is refused


def test_a_plain_admin_listing_perms_is_held_to_them_for_pub_and_sub(
    store: AuthStore, tmp_path: Path
) -> None:
    path = tmp_path / "admins.yml"
    path.write_text(
        "accounts:\n"
        "  - {accessKey: held, secretKey: held-secret, admin: true, defaultTopicPerm: PUB,"
        " topicPerms: [closed=DENY]}\n"
        "  - {accessKey: free, secretKey: free-secret, admin: true}\n"
    )
    access = AccessControl(store, CLUSTER, path)
    held, free = Credentials("held", "held-secret"), Credentials("free", "free-secret")

    assert refusal(access, send("closed", held)) == (
        "user held may not Pub on Topic:closed (from 10.1.2.3): a policy denies it"
    )
    assert refusal(access, send("open", held)) is None
    assert refusal(access, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "closed"}, held)) is None
    assert refusal(access, signed(RequestCode.UPDATE_BROKER_CONFIG, {}, held)) is None
    assert refusal(access, send("closed", free)) is None


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "both"}),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"}),
        (RequestCode.UPDATE_BROKER_CONFIG, {}),
        (RequestCode.REGISTER_BROKER, {}),
    ],
)
def test_plain_admin_codes_need_an_admin(plain: AccessControl, code: int, fields: dict[str, str]) -> None:
    assert "no policy allows it" in (refusal(plain, signed(code, fields)) or "")
    assert refusal(plain, signed(code, fields, Credentials("plainadmin", "admin-secret"))) is None


def test_a_plain_white_address_skips_the_signature_but_not_authorization(plain: AccessControl) -> None:
    unsigned_pub = send("pubonly", None)
    unsigned_pub.ext_fields[ACCESS_KEY] = "plainuser"
    unsigned_closed = send("closed", None)
    unsigned_closed.ext_fields[ACCESS_KEY] = "plainuser"

    assert refusal(plain, unsigned_pub, "10.9.9.9:1") is None
    assert "denies" in (refusal(plain, unsigned_closed, "10.9.9.9:1") or "")
    assert "carries no Signature" in (refusal(plain, unsigned_pub, "10.9.9.8:1") or "")


def test_a_global_white_address_skips_everything(plain: AccessControl) -> None:
    assert refusal(plain, send("closed", None), "192.168.9.4:1") is None
    assert refusal(plain, signed(RequestCode.UPDATE_BROKER_CONFIG, {}, None), "192.168.9.4:1") is None


def test_a_stored_user_wins_over_a_plain_account_of_the_same_name(
    store: AuthStore, plain_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "cometmq.auth"):
        access = AccessControl(store, CLUSTER, plain_file)

    assert refusal(access, send("t", Credentials("alice", "plain-alice-secret"))) == MISMATCH
    assert [r.getMessage() for r in caplog.records if "alice" in r.getMessage()] == [
        f"user alice is both a stored user and an account of {plain_file}: the stored user is used"
    ]


def test_a_plain_file_that_cannot_be_used_at_start_is_a_config_error(
    store: AuthStore, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("accounts: 1\n")

    with pytest.raises(ConfigError, match=r"bad\.yml: accounts is not a list"):
        AccessControl(store, CLUSTER, path)


def touch_later(path: Path, text: str) -> None:
    before = os.stat(path).st_mtime_ns
    path.write_text(text)
    # The check compares modification time and size: move the time on for a rewrite of equal size.
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_a_changed_plain_file_takes_effect_on_reload(plain: AccessControl, plain_file: Path) -> None:
    assert refusal(plain, send("closed", PLAIN_USER)) is not None

    touch_later(plain_file, PLAIN.replace("closed=DENY", "closed=PUB"))
    plain.reload_if_changed()

    assert refusal(plain, send("closed", PLAIN_USER)) is None


def test_a_plain_file_that_breaks_keeps_the_accounts_and_logs_one_error(
    plain: AccessControl, plain_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    touch_later(plain_file, "accounts: [\n")
    with caplog.at_level(logging.ERROR, "cometmq.auth"):
        plain.reload_if_changed()
        plain.reload_if_changed()

    assert refusal(plain, send("pubonly", PLAIN_USER)) is None
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert str(plain_file) in errors[0] and "not valid YAML" in errors[0]
    assert "plain-secret" not in errors[0]


def test_an_unchanged_plain_file_is_not_read_again(
    plain: AccessControl, plain_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    original = Path.read_text

    def counting_read(path: Path, *args: object, **kwargs: object) -> str:
        reads.append(path)
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting_read)
    plain.reload_if_changed()

    assert reads == []


def test_has_users(tmp_path: Path, plain_file: Path) -> None:
    empty = AuthStore(tmp_path / "empty")

    assert not AccessControl(empty, CLUSTER).has_users()
    assert AccessControl(empty, CLUSTER, plain_file).has_users()
    empty.create_user(User("u", "p"))
    assert AccessControl(empty, CLUSTER).has_users()


# a message found by its offset -----------------------------------------------------------------


def test_may_read_a_message_of_a_topic(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:mine", Action.SUB), entry("Group:g", Action.GET)))
    view = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": "0"})
    sign(view, ALICE)

    assert access.may_read(CLIENT, view, "mine") is None
    assert access.may_read(CLIENT, view, "%RETRY%g") is None
    assert access.may_read(CLIENT, view, "secret") == (
        "user alice may not Sub or Get on Topic:secret (from 10.1.2.3): no policy allows it"
    )
    assert access.may_read(CLIENT, view, "%DLQ%g") is not None
    assert access.may_read(CLIENT, RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID), "mine") is not None
    root = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": "0"})
    sign(root, Credentials("root", "root-secret"))
    assert access.may_read(CLIENT, root, "secret") is None


# the HA link ------------------------------------------------------------------------------------

CLUSTER_UPDATE = [Need.of(Resource.of(ResourceType.CLUSTER, CLUSTER), [Action.UPDATE])]


def test_verify_peer(access: AccessControl, store: AuthStore) -> None:
    content = b"nonce" + b"hello"
    root = Credentials("root", "root-secret")

    assert access.verify_peer(CLIENT, "root", content, root.digest(content), CLUSTER_UPDATE) is None
    assert access.verify_peer(CLIENT, "root", content, root.digest(b"other"), CLUSTER_UPDATE) == (
        "the signature of user root does not match (wrong secret key, or the request was changed on the way)"
    )
    assert (
        access.verify_peer(CLIENT, "nobody", content, b"", CLUSTER_UPDATE) == "user nobody is not known here"
    )
    assert access.verify_peer(CLIENT, "off", content, b"", CLUSTER_UPDATE) == "user off is disabled"
    assert access.verify_peer(CLIENT, "alice", content, ALICE.digest(content), CLUSTER_UPDATE) == (
        f"user alice may not Update on Cluster:{CLUSTER} (from 10.1.2.3): no policy allows it"
    )
    allow(store, custom(entry(f"Cluster:{CLUSTER}", Action.UPDATE)))
    assert access.verify_peer(CLIENT, "alice", content, ALICE.digest(content), CLUSTER_UPDATE) is None


# whatever arrives -------------------------------------------------------------------------------

TABLE_CODES = sorted(TABLE)
FIELD_NAMES = st.sampled_from(
    ["topic", "b", "a", "consumerGroup", "group", "producerGroup", ACCESS_KEY, SIGNATURE]
)


@given(
    st.sampled_from(TABLE_CODES),
    st.dictionaries(st.one_of(FIELD_NAMES, st.text(max_size=5)), st.text(max_size=12), max_size=6),
    st.one_of(st.binary(max_size=40), st.just(b'{"consumerDataSet": [{"groupName": 1}], "mqSet": [{}]}')),
    st.sampled_from(["10.1.2.3:1", "[::1]:2", "", "nonsense"]),
)
def test_the_check_answers_whatever_arrives(
    gate: AccessControl, code: int, fields: dict[str, str], body: bytes, remote: str
) -> None:
    request = RemotingCommand(code, opaque=5, ext_fields=fields, body=body)

    response = gate.check(remote, request)

    assert response is None or (response.opaque == 5 and response.code != ResponseCode.SUCCESS)


def test_a_lone_surrogate_is_signed_as_java_encodes_it(access: AccessControl, store: AuthStore) -> None:
    allow(store, custom(entry("Topic:*", Action.PUB)))
    request = send("t\ud800", ALICE)

    assert request.ext_fields[SIGNATURE] == signature_of(send("t?", ALICE), "alice-secret")
    assert refusal(access, request) is None
