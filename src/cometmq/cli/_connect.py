"""How the commands that talk to servers sign their requests and use TLS: the options
``--access-key``, ``--secret-key``, ``--tls``, ``--tls-ca``, ``--tls-cert`` and ``--tls-key``, each with
an environment variable that stands in for it (the secret key is best given that way: a flag shows in
the process list and the shell's history)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cometmq.client import security_options
from cometmq.errors import OptionError

# option dest → the environment variable read when the option is not given
ENV_OF = {
    "access_key": "COMETMQ_ACCESS_KEY",
    "secret_key": "COMETMQ_SECRET_KEY",
    "tls": "COMETMQ_TLS",
    "tls_ca": "COMETMQ_TLS_CA",
    "tls_cert": "COMETMQ_TLS_CERT",
    "tls_key": "COMETMQ_TLS_KEY",
}
_TRUE = ("1", "true", "yes", "on")


def add_connect_options(parser: argparse.ArgumentParser) -> None:
    """The options, on *parser*. Their defaults are left out of the namespace (``SUPPRESS``), so they
    may be given before the command (``cometmq --tls topic list``) or after it: see :func:`security`."""
    group = parser.add_argument_group("access control and TLS (for servers with aclEnable or TLS on)")
    group.add_argument(
        "--access-key",
        default=argparse.SUPPRESS,
        metavar="KEY",
        help="sign every request as this user (default: $COMETMQ_ACCESS_KEY)",
    )
    group.add_argument(
        "--secret-key",
        default=argparse.SUPPRESS,
        metavar="SECRET",
        help="the user's secret key; better set $COMETMQ_SECRET_KEY than give it here, where it shows in "
        "the process list and the shell history",
    )
    group.add_argument(
        "--tls",
        action="store_true",
        default=argparse.SUPPRESS,
        help="connect with TLS, checking the server's certificate against the system's CAs "
        "(default: $COMETMQ_TLS = 1 or true); implied by --tls-ca, --tls-cert",
    )
    group.add_argument(
        "--tls-ca",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="PEM file of the CA certificates to trust instead of the system's (default: $COMETMQ_TLS_CA)",
    )
    group.add_argument(
        "--tls-cert",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="PEM file of this client's certificate, for servers that require one "
        "(default: $COMETMQ_TLS_CERT)",
    )
    group.add_argument(
        "--tls-key",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="PEM file of that certificate's private key, unless --tls-cert holds it too "
        "(default: $COMETMQ_TLS_KEY)",
    )


@dataclass(frozen=True)
class Security:
    """What the options asked for (its repr leaves the secret out)."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    def client_options(self) -> dict[str, Any]:
        """``credentials=…, tls=…`` for a client's constructor."""
        return security_options(
            self.access_key, self.secret_key, self.tls, self.tls_ca, self.tls_cert, self.tls_key
        )

    def connector_options(self) -> dict[str, str]:
        """The Spark connector's options for the same (accessKey, secretKey, tls, tlsCaFile, …)."""
        options = {"tls": "true" if self.tls else "false"}
        if self.access_key:
            options.update(accessKey=self.access_key, secretKey=self.secret_key)
        for name, path in (
            ("tlsCaFile", self.tls_ca),
            ("tlsCertFile", self.tls_cert),
            ("tlsKeyFile", self.tls_key),
        ):
            if path:
                options[name] = path
        return options


def security(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Security:
    """The credentials and TLS the options (else their environment variables) ask for; a key given
    without the other, or a client key without its certificate, is an :class:`OptionError`."""

    def value(dest: str) -> str:
        given = getattr(args, dest, None)
        if given is None:
            given = environ.get(ENV_OF[dest], "")
        return str(given) if not isinstance(given, bool) else ("1" if given else "")

    access_key, secret_key = value("access_key"), value("secret_key")
    if bool(access_key) != bool(secret_key):
        missing = (
            "--secret-key (or $COMETMQ_SECRET_KEY)" if access_key else "--access-key (or $COMETMQ_ACCESS_KEY)"
        )
        raise OptionError(f"an access key and a secret key go together: give {missing} too")
    ca, cert, key = value("tls_ca"), value("tls_cert"), value("tls_key")
    if key and not cert:
        raise OptionError("--tls-key (or $COMETMQ_TLS_KEY) needs --tls-cert (or $COMETMQ_TLS_CERT)")
    tls = bool(ca or cert) or value("tls").strip().lower() in _TRUE
    return Security(access_key, secret_key, tls, ca, cert, key)


def security_environ(args: argparse.Namespace) -> dict[str, str]:
    """The environment variables that give a child ``cometmq`` process the options *args* were given
    (the secret stays out of its command line)."""
    return {
        env: ("1" if given is True else str(given))
        for dest, env in ENV_OF.items()
        if (given := getattr(args, dest, None)) not in (None, False)
    }
