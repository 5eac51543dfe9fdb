"""A transaction producer process for the tests: it sends one message to each topic named on its
command line in one transaction, prints the transaction id, and waits without ending it (the test
kills it with SIGKILL). Usage: tx_producer_process.py NAMESRV GROUP TOPIC..."""

from __future__ import annotations

import asyncio
import sys

from cometmq.client import Message, ReceivedMessage, TransactionProducer, TransactionState


def never_decided(message: ReceivedMessage) -> TransactionState:
    return TransactionState.UNKNOWN


async def main(namesrv: str, group: str, topics: list[str]) -> None:
    async with TransactionProducer(group, namesrv, check=never_decided) as producer:
        transaction = producer.transaction()
        for topic in topics:
            await transaction.send(Message(topic, f"{transaction.transaction_id}:{topic}".encode()))
        print(transaction.transaction_id, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
