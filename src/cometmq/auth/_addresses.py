"""Client address patterns, as RocketMQ 4.x's plain_acl.yml writes them (``whiteRemoteAddress``,
``globalWhiteRemoteAddresses``) and ACL 2.0's ``sourceIps``:

- ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: any address; blank: none;
- one address, IPv4 or IPv6: ``192.168.1.2``, ``fe80::1``;
- stars and a range ending an address: ``192.168.1.*``, ``192.168.*.*``, ``192.168.1.1-100``,
  ``192.168.1-10.*`` (IPv6 likewise, written with all eight groups);
- a list: ``192.168.1.{1,2,3}`` (the last part), or addresses separated by commas;
- a network: ``10.0.0.0/8``, ``fd00::/8``.

An IPv4 client reaching an IPv6 socket (``::ffff:10.0.0.1``) is matched as its IPv4 address.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
from typing import Final

from cometmq.auth._model import invalid_parameter
from cometmq.errors import AuthError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ANY_TEXTS: Final = frozenset(("*", "*.*.*.*", "*:*:*:*:*:*:*:*"))


@functools.lru_cache(maxsize=4096)  # asked on every request; a server sees few distinct peers
def client_ip(remote_address: str) -> IpAddress | None:
    """The IP of a connection's ``host:port`` (``[v6]:port`` too); None if it names no IP."""
    host = remote_address.strip()
    host = host[1 : host.find("]")] if host.startswith("[") else host.rpartition(":")[0]
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parts(ip: IpAddress) -> tuple[int, ...]:
    if isinstance(ip, ipaddress.IPv4Address):
        return tuple(ip.packed)
    packed = ip.packed
    return tuple((packed[i] << 8) | packed[i + 1] for i in range(0, 16, 2))


@dataclasses.dataclass(frozen=True, slots=True)
class _PartRanges:
    """An address whose parts (4 bytes, or 8 groups of 16 bits) each lie within bounds."""

    version: int
    bounds: tuple[tuple[int, int], ...]

    def matches(self, ip: IpAddress) -> bool:
        if ip.version != self.version:
            return False
        return all(low <= part <= high for part, (low, high) in zip(_parts(ip), self.bounds, strict=True))


@dataclasses.dataclass(frozen=True, slots=True)
class AddressPattern:
    """A parsed address pattern (see the module docstring); :meth:`parse` refuses one it cannot read
    with an :class:`~cometmq.errors.AuthError` naming it."""

    text: str
    any: bool = False
    networks: tuple[IpNetwork, ...] = ()
    ranges: tuple[_PartRanges, ...] = ()

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def parse(text: str) -> AddressPattern:
        stripped = text.strip()
        if not stripped:
            return AddressPattern(text)
        if stripped in _ANY_TEXTS:
            return AddressPattern(text, any=True)
        networks: list[IpNetwork] = []
        ranges: list[_PartRanges] = []
        for item in _items(stripped, text):
            if "/" in item:
                try:
                    networks.append(ipaddress.ip_network(item, strict=False))
                except ValueError as exc:
                    raise _refused(text, str(exc)) from None
            elif "*" in item or "-" in item:
                ranges.append(_ranges(text, item))
            else:
                networks.append(ipaddress.ip_network(_address(text, item)))
        return AddressPattern(text, networks=tuple(networks), ranges=tuple(ranges))

    def matches(self, ip: IpAddress | None) -> bool:
        if self.any:
            return True
        if ip is None:
            return False
        return any(ip in network for network in self.networks if network.version == ip.version) or any(
            pattern.matches(ip) for pattern in self.ranges
        )


def _refused(text: str, why: str) -> AuthError:
    return invalid_parameter(f"address pattern {text!r} is not valid: {why}")


def _items(text: str, given: str) -> list[str]:
    """The single patterns of a list: ``a.b.c.{1,2}`` or ``x,y``; else the pattern itself. *given*: the
    text as written, which a refusal names."""
    if text.endswith("}"):
        opening = text.rfind("{")
        head = text[:opening]
        if opening < 0 or not head.endswith((".", ":")):
            raise _refused(given, "a {..} list may only end an address, after its last '.' or ':'")
        return [head + last.strip() for last in text[opening + 1 : -1].split(",")]
    if "," in text:
        return [item.strip() for item in text.split(",")]
    return [text]


def _address(text: str, item: str) -> IpAddress:
    try:
        return ipaddress.ip_address(item)
    except ValueError:
        raise _refused(text, f"{item!r} is not an IPv4 or IPv6 address") from None


_DECIMAL_DIGITS: Final = frozenset("0123456789")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _is_number(text: str, digits: frozenset[str]) -> bool:
    return 0 < len(text) <= 5 and all(char in digits for char in text)


def _ranges(text: str, item: str) -> _PartRanges:
    version, separator, count, base, top = (6, ":", 8, 16, 0xFFFF) if ":" in item else (4, ".", 4, 10, 255)
    parts = item.split(separator)
    if len(parts) != count:
        raise _refused(text, f"a range or '*' needs all {count} parts of an IPv{version} address")
    bounds: list[tuple[int, int]] = []
    for part in parts:
        part = part.strip()
        if bounds and bounds[-1] != (bounds[-1][0], bounds[-1][0]) and part != "*":
            raise _refused(text, "after a '*' or a range only '*' may follow")
        if part == "*":
            bounds.append((0, top))
            continue
        low_text, dash, high_text = part.partition("-")
        digits = _HEX_DIGITS if base == 16 else _DECIMAL_DIGITS
        if not _is_number(low_text, digits) or (dash and not _is_number(high_text, digits)):
            raise _refused(text, f"{part!r} is not a number, a range a-b or '*'")
        low = int(low_text, base)
        high = int(high_text, base) if dash else low
        if not 0 <= low <= high <= top:
            raise _refused(text, f"{part!r} is not within 0-{top:{'x' if base == 16 else 'd'}} in order")
        bounds.append((low, high))
    return _PartRanges(version, tuple(bounds))
