"""Request signatures: RocketMQ 4.x's AclClientRPCHook content and HMAC, checked against the C++ client."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.auth import ACCESS_KEY, REQUEST_CODE, SECURITY_TOKEN, SIGNATURE, Credentials, sign, signature_of
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, decode_frame
from cometmq.protocol.codes import UNIQUE_KEY_QUERY_FLAG

GOLDEN_FRAMES = sorted((Path(__file__).parent.parent / "golden" / "frames").glob("*.bin"))


def expected_signature(secret: str, fields: dict[str, str], body: bytes) -> str:
    content = b"".join(
        fields[key].encode() for key in sorted(fields) if key not in (SIGNATURE, UNIQUE_KEY_QUERY_FLAG)
    )
    return base64.b64encode(hmac.new(secret.encode(), content + body, hashlib.sha1).digest()).decode()


@pytest.mark.parametrize("path", GOLDEN_FRAMES, ids=lambda path: path.stem)
def test_every_golden_cpp_frame_verifies_with_the_empty_secret(path: Path) -> None:
    request = decode_frame(path.read_bytes()[4:])

    assert request.ext_fields[ACCESS_KEY] == ""
    assert signature_of(request, "") == request.ext_fields[SIGNATURE]


def test_the_golden_frames_are_there() -> None:
    assert len(GOLDEN_FRAMES) == 20


def test_sign_adds_access_key_token_and_a_signature_over_fields_and_body() -> None:
    request = RemotingCommand(10, ext_fields={"topic": "t", "b": "x"}, body=b"payload")

    sign(request, Credentials("ak", "sk", "token"))

    assert request.ext_fields[ACCESS_KEY] == "ak"
    assert request.ext_fields[SECURITY_TOKEN] == "token"
    assert request.ext_fields[REQUEST_CODE] == "10"  # signed with the rest: the code is bound
    fields = dict(request.ext_fields)
    assert request.ext_fields[SIGNATURE] == expected_signature("sk", fields, b"payload")


def test_sign_replaces_an_earlier_signature_and_covers_body_parts_in_order() -> None:
    request = RemotingCommand(10, ext_fields={"topic": "t"}, body_parts=[b"ab", memoryview(b"cd")])
    sign(request, Credentials("other", "secret"))

    sign(request, Credentials("ak", "sk"))

    assert SECURITY_TOKEN not in request.ext_fields
    assert request.ext_fields[SIGNATURE] == expected_signature("sk", dict(request.ext_fields), b"abcd")


def test_the_unique_key_query_flag_is_not_signed() -> None:
    request = RemotingCommand(12, ext_fields={"topic": "t"})
    sign(request, Credentials("ak", "sk"))

    request.ext_fields[UNIQUE_KEY_QUERY_FLAG] = "true"

    assert signature_of(request, "sk") == request.ext_fields[SIGNATURE]


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=12), max_size=6),
    st.binary(max_size=64),
    st.text(max_size=10),
)
def test_a_signature_is_the_hmac_of_sorted_values_and_body(
    fields: dict[str, str], body: bytes, secret: str
) -> None:
    request = RemotingCommand(10, ext_fields=dict(fields), body=body)
    sign(request, Credentials("ak", secret))

    assert signature_of(request, secret) == expected_signature(secret, dict(request.ext_fields), body)


def test_a_changed_body_or_field_no_longer_verifies() -> None:
    request = RemotingCommand(10, ext_fields={"topic": "t"}, body=b"one")
    sign(request, Credentials("ak", "sk"))
    signature = request.ext_fields[SIGNATURE]

    request.body = b"two"
    assert signature_of(request, "sk") != signature
    request.body = b"one"
    request.ext_fields["topic"] = "u"
    assert signature_of(request, "sk") != signature


def test_credentials_hide_their_secrets() -> None:
    credentials = Credentials("ak", "very-secret", "token-secret")

    assert "very-secret" not in repr(credentials)
    assert "token-secret" not in repr(credentials)


def test_credentials_from_json() -> None:
    assert Credentials.from_json('{"accessKey": "ak", "secretKey": "sk"}') == Credentials("ak", "sk")
    assert (
        Credentials.from_json('{"accessKey":"a","secretKey":"s","securityToken":"t"}').security_token == "t"
    )


@pytest.mark.parametrize(
    "text",
    ['{"accessKey": "ak"}', '{"secretKey": "sk-secret"}', "[]", "{not json sk-secret", '{"accessKey": 1}'],
)
def test_credentials_from_bad_json_say_what_is_wrong_without_the_secret(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Credentials.from_json(text)

    assert "sk-secret" not in str(caught.value)


def test_digest_is_keyed_with_a_key_derived_from_the_secret_never_the_secret() -> None:
    label = b"cometmq-ha-auth-v1"
    derived = hmac.new(b"sk", label, hashlib.sha1).digest()
    assert Credentials("ak", "sk").digest(b"abc") == hmac.new(derived, b"abc", hashlib.sha1).digest()
    assert Credentials("ak", "sk").digest(b"abc") != hmac.new(b"sk", b"abc", hashlib.sha1).digest()
