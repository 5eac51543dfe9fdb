"""How every client checks its constructor options: before anything else is made, a bad value raises
:class:`~cometmq.errors.OptionError` (a ValueError) naming the option and what it allows. No client
clamps a value into range on its own."""

from __future__ import annotations

import ssl
from collections.abc import Collection
from typing import Any

from cometmq.auth import Credentials
from cometmq.errors import OptionError
from cometmq.protocol.naming import group_name_error


def check_range(option: str, value: float, minimum: float, maximum: float | None = None) -> None:
    """*value* within ``[minimum, maximum]`` (no upper bound when *maximum* is None)."""
    if maximum is None:
        if not minimum <= value:  # written so that NaN fails too
            raise OptionError(f"{option} must be at least {minimum}, not {value!r}")
    elif not minimum <= value <= maximum:
        raise OptionError(f"{option} must be within {minimum}..{maximum}, not {value!r}")


def check_positive(option: str, value: float) -> None:
    """*value* above 0 (a timeout or an interval in seconds)."""
    if not value > 0:
        raise OptionError(f"{option} must be more than 0 seconds, not {value!r}")


def check_choice(option: str, value: str, choices: Collection[str]) -> None:
    """*value* one of *choices*."""
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in sorted(choices))
        raise OptionError(f"{option} must be one of {allowed}, not {value!r}")


def check_group(role: str, group: str) -> None:
    """A legal group name, refused here rather than later (and less clearly) by a broker. *role* is
    "producer" or "consumer"."""
    problem = group_name_error(group)
    if problem is not None:
        raise OptionError(f"{role} group {group!r}: {problem}")


def check_credentials(credentials: Credentials | None) -> None:
    """``credentials``: None (requests go unsigned) or a :class:`~cometmq.auth.Credentials`."""
    if credentials is not None and not isinstance(credentials, Credentials):
        raise OptionError(
            f"credentials must be a cometmq.auth.Credentials or None, not {type(credentials).__name__}"
        )


def tls_context(tls: bool | ssl.SSLContext) -> ssl.SSLContext | None:
    """The SSL context of every client's ``tls`` option: None for ``False`` (plain TCP); for ``True``
    :func:`ssl.create_default_context` (the system's CAs, the server's name or IP checked against its
    certificate); a context given is used as it is (a private CA, a client certificate)."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if tls is True:
        return ssl.create_default_context()
    if tls is False:
        return None
    raise OptionError(f"tls must be True, False or an ssl.SSLContext, not {tls!r}")


def load_tls_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client's SSL context from PEM files: the CAs to trust (the system's when *ca_file* is None)
    and this client's certificate with its key (for servers that require one; *key_file* None when
    *cert_file* holds the key too). A file that cannot be read or used is an :class:`OptionError`."""
    if key_file and not cert_file:
        raise OptionError("a TLS key file needs its certificate file")
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
        if cert_file:
            context.load_cert_chain(cert_file, key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(f"cannot load the TLS files: {exc}") from None
    return context


def security_options(
    access_key: str = "",
    secret_key: str = "",
    tls: bool = False,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> dict[str, Any]:
    """``credentials=…, tls=…`` for a client's constructor: requests signed as *access_key* (none:
    unsigned), and with *tls* on, a context from the PEM files when any is given
    (:func:`load_tls_context`), else the system's CAs."""
    credentials = Credentials(access_key, secret_key) if access_key else None
    context: bool | ssl.SSLContext = tls
    if tls and (ca_file or cert_file):
        context = load_tls_context(ca_file, cert_file, key_file)
    return {"credentials": credentials, "tls": context}
