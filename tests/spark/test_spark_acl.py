"""The Spark connector against a standalone with aclEnable: with ``accessKey``/``secretKey`` a batch
read plans on the driver and pulls on the executors, and a write sends; without them the read fails
with the server's reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cometmq.client import Message, blocking
from processes import StandaloneServer
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_standalone


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with secured_standalone(tmp_path_factory.mktemp("secured")) as server:
        yield server


def read(spark: Any, server: StandaloneServer, **options: str) -> list[Any]:
    reader = spark.read.format("cometmq").option("namesrv", server.namesrv).option("topic", ACL_TOPIC)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


def test_a_read_with_credentials_gets_every_message(spark: Any, secured: StandaloneServer) -> None:
    bodies = [f"spark-acl-{i}".encode() for i in range(6)]
    with blocking.Producer("PID_spark_acl", secured.namesrv, credentials=WRITER) as producer:
        for body in bodies:
            producer.send(Message(ACL_TOPIC, body))
    rows = read(spark, secured, accessKey=READER.access_key, secretKey=READER.secret_key)
    assert set(bodies) <= {row.body for row in rows}


def test_a_write_with_credentials_sends(spark: Any, secured: StandaloneServer) -> None:
    frame = spark.createDataFrame([(b"written-1",), (b"written-2",)], "body binary")
    (
        frame.write.format("cometmq")
        .option("namesrv", secured.namesrv)
        .option("topic", ACL_TOPIC)
        .option("accessKey", WRITER.access_key)
        .option("secretKey", WRITER.secret_key)
        .mode("append")
        .save()
    )
    rows = read(spark, secured, accessKey=ADMIN.access_key, secretKey=ADMIN.secret_key)
    assert {b"written-1", b"written-2"} <= {row.body for row in rows}


def test_a_read_without_credentials_fails_with_the_servers_reason(
    spark: Any, secured: StandaloneServer
) -> None:
    with pytest.raises(Exception, match="is not signed"):
        read(spark, secured)
