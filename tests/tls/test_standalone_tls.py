"""``cometmq standalone`` with TLS enforcing from its broker.conf: its broker registers with its name
server over TLS, TLS clients are served on both ports, plaintext clients are refused saying why."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.namesrv_headers import GetRouteInfoRequestHeader
from cometmq.remoting import RemotingClient
from cometmq.remoting.transport import TLS_ONLY_REMARK
from processes import TEST_BROKER_CONF, broker_address, cometmq, start_standalone
from tls_support import make_certificates
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import create_topic, make_message, send


def test_standalone_with_tls_enforcing_serves_tls_clients_and_refuses_plaintext(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    settings = {**certs.server_properties("enforcing"), **certs.client_properties()}
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "".join(f"{key}={value}\n" for key, value in settings.items()))
    server, namesrv = start_standalone(tmp_path / "data", conf)
    try:
        broker = broker_address(server)
        topic = "OverTls"

        async def scenario() -> None:
            secure = RemotingClient(ssl_context=certs.client_context())
            plain = RemotingClient()
            try:
                assert (await create_topic(secure, broker, topic, 1)).code == ResponseCode.SUCCESS

                async def routed() -> bool:
                    request = RemotingCommand(
                        code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                        ext_fields=GetRouteInfoRequestHeader(topic=topic).encode(),
                    )
                    return (await secure.invoke(namesrv, request, timeout=5)).code == ResponseCode.SUCCESS

                await wait_until(routed, message="the topic's route, registered over TLS")
                answer, _ = await send(secure, broker, topic, 0, *make_message(0, 0))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                for address in (namesrv, broker):
                    refused = await plain.invoke(
                        address, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO), timeout=5
                    )
                    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, TLS_ONLY_REMARK)
            finally:
                await secure.close()
                await plain.close()

        asyncio.run(scenario())
    finally:
        server.terminate()


def test_standalone_with_tls_enforcing_but_its_own_connections_in_plaintext_does_not_start(
    tmp_path: Path,
) -> None:
    certs = make_certificates(tmp_path / "certs")
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "".join(f"{key}={value}\n" for key, value in certs.server_properties("enforcing").items())
    )
    result = cometmq(
        "standalone", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "-c", str(conf)
    )
    assert result.returncode != 0
    assert "tls.server.mode=enforcing needs tls.enable=true" in result.stderr
