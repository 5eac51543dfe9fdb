"""kill -9 of a broker behind the proxy while the official 5.x client has messages of it in flight."""

from __future__ import annotations

from pathlib import Path

from client5 import Scenarios
from proxied import ProxiedCluster, admin


def test_messages_in_flight_when_a_broker_is_killed_come_again_and_acked_ones_do_not(tmp_path: Path) -> None:
    cluster = ProxiedCluster(tmp_path / "cluster")
    try:
        client = Scenarios(cluster.endpoints, tmp_path)
        topic, group = "Crash5", "GID_crash5"
        admin(cluster.namesrv, "topic", "create", topic, "--queues", "2", "-a", "+message.type=NORMAL")
        admin(cluster.namesrv, "group", "create", group)
        # Round robin over the 4 queues of the two brokers: each tag has messages on both.
        acked = client.produce(topic, "--count", "4", "--tag", "Ack", "--body-prefix", "ack-")
        kept = client.produce(topic, "--count", "4", "--tag", "Keep", "--body-prefix", "keep-")
        assert {e["broker"] for e in kept.named("sent")} == {"broker-a", "broker-b"}
        first = client.simple_consume(
            topic, group, "--invisible", "10", "--ack-tag", "Ack", "--until-received", "8"
        )
        assert sorted(e["message_id"] for e in first.named("acked")) == sorted(
            e["message_id"] for e in acked.named("sent")
        )

        cluster.kill9_broker("broker-a")
        cluster.start_broker("broker-a")

        again = client.simple_consume(topic, group, "--until-acked", "4", timeout=120)
        received = again.named("received")
        assert sorted(e["message_id"] for e in received) == sorted(
            e["message_id"] for e in kept.named("sent")
        )
        # Each is delivered again (attempt 2, or more when a receive's answer was lost on the way: on a
        # loaded machine a receive can time out at the client after the broker popped for it).
        assert all(e["delivery_attempt"] >= 2 for e in received), received
    finally:
        cluster.stop()
