"""A test CA and the certificates it signs, as files, for the TLS tests."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Certificates:
    """A CA's certificate, a server certificate for 127.0.0.1 and a client certificate, with keys."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_certificate: bool = False) -> ssl.SSLContext:
        """A context that trusts the CA (and shows the client certificate if asked)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_certificate:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def server_properties(self, mode: str, client_auth: str = "none") -> dict[str, str]:
        """The ``tls.server.*`` keys of a server in *mode*."""
        return {
            "tls.server.mode": mode,
            "tls.server.certPath": str(self.server_cert),
            "tls.server.keyPath": str(self.server_key),
            "tls.server.need.client.auth": client_auth,
            "tls.server.trustCertPath": str(self.ca),
        }

    def client_properties(self) -> dict[str, str]:
        """The keys that make a process's own connections use TLS, trusting the CA."""
        return {"tls.enable": "true", "tls.client.trustCertPath": str(self.ca)}


def make_certificates(directory: Path) -> Certificates:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.com")
    directory.mkdir(parents=True, exist_ok=True)
    files = Certificates(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.server_cert))
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(str(files.server_cert), append=True)
    server.private_key_pem.write_to_path(str(files.server_key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    return files
