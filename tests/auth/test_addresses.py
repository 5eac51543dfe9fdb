"""Client address patterns: plain_acl.yml's whiteRemoteAddress forms and ACL 2.0's source IPs."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cometmq.auth import AuthError
from cometmq.auth._addresses import AddressPattern, client_ip

OCTETS = st.integers(0, 255)
IPV4 = st.tuples(OCTETS, OCTETS, OCTETS, OCTETS)


def ip(parts: tuple[int, ...]) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(".".join(map(str, parts)))


def matches(pattern: str, address: str) -> bool:
    return AddressPattern.parse(pattern).matches(ipaddress.ip_address(address))


@given(IPV4, IPV4)
def test_one_address_matches_only_itself(pattern: tuple[int, ...], client: tuple[int, ...]) -> None:
    assert AddressPattern.parse(str(ip(pattern))).matches(ip(client)) == (pattern == client)


@given(IPV4, IPV4, st.integers(1, 3))
def test_trailing_stars_match_the_leading_parts(
    pattern: tuple[int, ...], client: tuple[int, ...], stars: int
) -> None:
    kept = 4 - stars
    text = ".".join([*map(str, pattern[:kept]), *["*"] * stars])

    assert AddressPattern.parse(text).matches(ip(client)) == (pattern[:kept] == client[:kept])


@given(IPV4, OCTETS, OCTETS, OCTETS)
def test_a_range_in_the_last_part(pattern: tuple[int, ...], low: int, high: int, last: int) -> None:
    low, high = min(low, high), max(low, high)
    text = f"{pattern[0]}.{pattern[1]}.{pattern[2]}.{low}-{high}"

    assert AddressPattern.parse(text).matches(ip((*pattern[:3], last))) == (low <= last <= high)


@given(IPV4, st.lists(OCTETS, min_size=1, max_size=5), OCTETS)
def test_a_list_in_the_last_part(pattern: tuple[int, ...], listed: list[int], last: int) -> None:
    text = f"{pattern[0]}.{pattern[1]}.{pattern[2]}.{{{','.join(map(str, listed))}}}"

    assert AddressPattern.parse(text).matches(ip((*pattern[:3], last))) == (last in listed)


@given(IPV4, st.integers(0, 32), IPV4)
def test_a_network_matches_as_ipaddress_says(
    network: tuple[int, ...], prefix: int, client: tuple[int, ...]
) -> None:
    text = f"{ip(network)}/{prefix}"

    assert AddressPattern.parse(text).matches(ip(client)) == (
        ip(client) in ipaddress.ip_network(text, strict=False)
    )


@given(st.text(max_size=24))
@example(" 10.0.0.1} ")  # refused for the text as written, spaces and all
def test_any_text_parses_or_is_refused_naming_it(text: str) -> None:
    try:
        pattern = AddressPattern.parse(text)
    except AuthError as exc:
        assert repr(text) in exc.remark
    else:
        pattern.matches(ipaddress.ip_address("10.1.2.3"))


@pytest.mark.parametrize("pattern", ["*", "*.*.*.*", "*:*:*:*:*:*:*:*"])
def test_any_address(pattern: str) -> None:
    assert matches(pattern, "10.1.2.3")
    assert matches(pattern, "fe80::1")
    assert AddressPattern.parse(pattern).matches(None)


def test_blank_matches_nothing() -> None:
    assert not matches("", "10.1.2.3")
    assert not matches("  ", "127.0.0.1")


@pytest.mark.parametrize(
    ("pattern", "address", "expected"),
    [
        ("192.168.1-10.*", "192.168.5.77", True),
        ("192.168.1-10.*", "192.168.11.77", False),
        ("10.0.0.1,10.0.0.2", "10.0.0.2", True),
        ("10.0.0.1,10.0.0.2", "10.0.0.3", False),
        ("fd00::/8", "fd12::5", True),
        ("fd00::/8", "fe80::1", False),
        ("fe80:0:0:0:0:0:0:*", "fe80::9", True),
        ("fe80:0:0:0:0:0:0:1-a", "fe80::b", False),
        ("fe80::{1,2}", "fe80::2", True),
        ("::1", "::1", True),
        ("127.0.0.1", "::1", False),
    ],
)
def test_patterns(pattern: str, address: str, expected: bool) -> None:
    assert matches(pattern, address) is expected


@pytest.mark.parametrize(
    "pattern",
    ["192.168.*.1", "192.168.1", "192.168.1.300", "192.168.1.5-2", "10.0.0.0/33", "a.b.c.d", "1.2.{3}.4"],
)
def test_patterns_refused(pattern: str) -> None:
    with pytest.raises(AuthError, match="address pattern"):
        AddressPattern.parse(pattern)


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("127.0.0.1:5555", "127.0.0.1"),
        ("::1:5555", "::1"),
        ("[::1]:5555", "::1"),
        ("::ffff:10.0.0.1:5555", "10.0.0.1"),
        ("fe80::1%eth0:5555", "fe80::1"),
    ],
)
def test_client_ip_of_a_remote_address(remote: str, expected: str) -> None:
    assert client_ip(remote) == ipaddress.ip_address(expected)


def test_client_ip_of_no_address() -> None:
    assert client_ip("") is None
    assert client_ip("localhost:80") is None
