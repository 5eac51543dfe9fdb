"""TransactionProducer end to end: name server and brokers in this process, a push consumer seeing what
is committed. A rolled-back message is shown never delivered by a committed marker sent after it to the
same one-queue topic: the marker arrives, the rolled-back message (which would be stored before it)
does not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from txclient_support import (
    GROUP,
    Checker,
    answer,
    cluster,
    commit_marker,
    consuming,
    create_topic,
    run,
    transacting,
)

from cometmq.client import Message, ReceivedMessage, TransactionProducer, TransactionState, blocking
from cometmq.errors import ConnectionClosedError
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.broker_headers import CheckTransactionStateRequestHeader
from cometmq.protocol.naming import SCHEDULE_TOPIC
from cometmq.protocol.transaction import (
    PRODUCER_GROUP,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
)
from processes import subprocess_env
from waiting import wait_until, wait_until_blocking

PRODUCER_PROCESS = Path(__file__).with_name("tx_producer_process.py")


def test_a_committed_message_is_delivered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.ROLLBACK)
        async with transacting(tmp_path, checker) as (producer, received, _):
            result = await producer.send_in_transaction(
                Message("TxOrders", b"order 1", tags="created"), answer(TransactionState.COMMIT)
            )
            assert result.state is TransactionState.COMMIT
            assert len(result.transaction_id) == 32 and result.transaction_id != result.msg_id
            await received.wait_for(b"order 1")
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert received.bodies[b"order 1"] == 1
            [delivered] = [m for m in received.messages if m.body == b"order 1"]
            assert delivered.msg_id == result.msg_id
            assert delivered.transaction_id == result.transaction_id
            assert delivered.tags == "created"
            assert TRANSACTION_PREPARED not in delivered.properties
            assert not checker.calls

    run(scenario())


def test_a_rolled_back_message_is_never_delivered(tmp_path: Path) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, _):
            result = await producer.send_in_transaction(
                Message("TxOrders", b"cancelled"), answer(TransactionState.ROLLBACK)
            )
            assert result.state is TransactionState.ROLLBACK
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert not received.bodies[b"cancelled"]
            assert not checker.calls

    run(scenario())


@pytest.mark.parametrize("outcome", ["unknown", "raises"])
def test_an_undecided_message_is_settled_by_the_check_back(tmp_path: Path, outcome: str) -> None:
    def execute(message: Message) -> TransactionState:
        if outcome == "raises":
            raise ValueError("the local transaction failed half way")
        return TransactionState.UNKNOWN

    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, _):
            message = Message("TxOrders", b"decided later", keys="order-7")
            if outcome == "raises":
                with pytest.raises(ValueError, match="half way"):
                    await producer.send_in_transaction(message, execute)
            else:
                result = await producer.send_in_transaction(message, execute)
                assert result.state is TransactionState.UNKNOWN
            await received.wait_for(b"decided later")
            [checked] = checker.messages
            assert checked.topic == "TxOrders"  # the real topic, not the half topic
            assert checked.body == b"decided later"
            assert checked.keys == ["order-7"]
            assert checked.properties[PRODUCER_GROUP] == GROUP
            assert checker.calls == {checked.properties[TRANSACTION_ID]: 1}
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert received.bodies[b"decided later"] == 1

    run(scenario())


def test_a_delayed_message_is_delayed_from_its_commit_and_never_delivered_when_rolled_back(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.ROLLBACK)
        async with transacting(tmp_path, checker) as (producer, received, brokers):
            for body, state in [
                (b"delayed, cancelled", TransactionState.ROLLBACK),
                (b"delayed", TransactionState.COMMIT),
            ]:
                await producer.send_in_transaction(Message("TxOrders", body, delay_level=1), answer(state))
            # Both would go through the same delay level's queue, in this order.
            await received.wait_for(b"delayed")
            assert not received.bodies[b"delayed, cancelled"]
            [delivered] = received.messages
            # Delivered by the delay service: the committed copy went through the schedule topic
            # (which leaves its real topic and queue in REAL_TOPIC/REAL_QID and drops DELAY); the
            # rolled back one never reached it.
            assert delivered.properties[REAL_TOPIC] == "TxOrders"
            assert delivered.properties[REAL_QUEUE_ID] == "0"
            assert "DELAY" not in delivered.properties
            assert brokers["broker-a"].store.max_offset(SCHEDULE_TOPIC, 0) == 1

    run(scenario())


def test_an_open_transaction_is_answered_unknown_without_asking_the_checker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.ROLLBACK)
        async with transacting(tmp_path, checker) as (producer, received, _):
            checks: list[CheckTransactionStateRequestHeader] = []
            answer_check = producer.check_transaction_state

            def spy(addr: str, request: CheckTransactionStateRequestHeader, msg: ReceivedMessage) -> None:
                checks.append(request)
                answer_check(addr, request, msg)

            monkeypatch.setattr(producer, "check_transaction_state", spy)
            async with producer.transaction() as transaction:
                await transaction.send(Message("TxOrders", b"slow transaction"))
                await wait_until(lambda: checks, message="a check-back while the transaction is open")
            assert transaction.state is TransactionState.COMMIT
            await received.wait_for(b"slow transaction")
            assert checks[0].transaction_id == transaction.transaction_id
            assert not checker.calls

    run(scenario())


def test_the_check_back_reaches_a_second_producer_when_the_first_is_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as (namesrv, _):
            await create_topic(namesrv, "TxOrders")
            first_checker = Checker(TransactionState.UNKNOWN)
            second_checker = Checker(TransactionState.COMMIT)
            async with consuming(namesrv, "GID_tx", "TxOrders") as received:
                async with TransactionProducer(GROUP, namesrv, check=first_checker) as first:
                    result = await first.send_in_transaction(
                        Message("TxOrders", b"orphan"), answer(TransactionState.UNKNOWN)
                    )
                async with TransactionProducer(GROUP, namesrv, check=second_checker):
                    await received.wait_for(b"orphan")
                assert second_checker.calls == {result.transaction_id: 1}

    run(scenario())


def test_a_transaction_across_two_brokers_commits_all_or_none(tmp_path: Path) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.ROLLBACK)
        async with transacting(tmp_path, checker, {"TxOrders": "broker-a", "TxInvoices": "broker-b"}) as (
            producer,
            received,
            _,
        ):
            with pytest.raises(RuntimeError, match="payment refused"):
                async with producer.transaction() as cancelled:
                    await cancelled.send(Message("TxOrders", b"order 2"))
                    await cancelled.send(Message("TxInvoices", b"invoice 2"))
                    raise RuntimeError("payment refused")
            assert cancelled.state is TransactionState.ROLLBACK

            async with producer.transaction() as transaction:
                order = await transaction.send(Message("TxOrders", b"order 1"))
                invoice = await transaction.send(Message("TxInvoices", b"invoice 1"))
            assert len(transaction.transaction_id) == 32
            assert {order.queue.broker_name, invoice.queue.broker_name} == {"broker-a", "broker-b"}
            assert not transaction.pending
            await received.wait_for(b"order 1", b"invoice 1")
            delivered = [m for m in received.messages if m.body in (b"order 1", b"invoice 1")]
            assert {m.transaction_id for m in delivered} == {transaction.transaction_id}
            assert {m.properties[TRANSACTION_ID] for m in delivered} == {transaction.transaction_id}
            await received.wait_for(*await commit_marker(producer, "TxOrders", "TxInvoices"))
            assert not received.bodies[b"order 2"] and not received.bodies[b"invoice 2"]
            assert not checker.calls

    run(scenario())


def test_ends_that_fail_are_settled_by_the_check_back_as_the_transaction_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.ROLLBACK)  # never asked: the producer remembers
        async with transacting(tmp_path, checker, {"TxOrders": "broker-a", "TxInvoices": "broker-b"}) as (
            producer,
            received,
            _,
        ):
            instance = producer._instance
            invoke = instance.invoke

            async def lose_the_ends(addr: str, code: int, *args: Any, **kwargs: Any) -> RemotingCommand:
                if code == RequestCode.END_TRANSACTION and not ends_lost:
                    ends_lost.append(addr)
                    raise ConnectionClosedError(f"connection to {addr} lost")
                return await invoke(addr, code, *args, **kwargs)

            ends_lost: list[str] = []
            monkeypatch.setattr(instance, "invoke", lose_the_ends)
            async with producer.transaction() as transaction:
                await transaction.send(Message("TxOrders", b"order 1"))
                await transaction.send(Message("TxInvoices", b"invoice 1"))
            assert len(transaction.pending) == 1
            # Remembered while an END is pending, for the check-back of its half.
            assert transaction.transaction_id in producer._decisions
            await received.wait_for(b"order 1", b"invoice 1")
            assert not checker.calls
        [warning] = [r.getMessage() for r in caplog.records if "left to the check-back" in r.getMessage()]
        assert transaction.transaction_id in warning and "COMMIT" in warning

    run(scenario())


def test_a_killed_producers_transaction_is_settled_whole_by_another(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ("broker-a", "broker-b")) as (namesrv, _):
            await create_topic(namesrv, "TxOrders", "broker-a")
            await create_topic(namesrv, "TxInvoices", "broker-b")
            process = subprocess.Popen(
                [sys.executable, str(PRODUCER_PROCESS), namesrv, GROUP, "TxOrders", "TxInvoices"],
                stdout=subprocess.PIPE,
                text=True,
                env=subprocess_env(),
            )
            try:
                assert process.stdout is not None
                transaction_id = (await asyncio.to_thread(process.stdout.readline)).strip()
                assert len(transaction_id) == 32, transaction_id
            finally:
                process.kill()
                await asyncio.to_thread(process.wait)
            checker = Checker(TransactionState.COMMIT)
            async with (
                consuming(namesrv, "GID_tx", "TxOrders", "TxInvoices") as received,
                TransactionProducer(GROUP, namesrv, check=checker),
            ):
                await received.wait_for(
                    f"{transaction_id}:TxOrders".encode(), f"{transaction_id}:TxInvoices".encode()
                )
            assert checker.calls == {transaction_id: 1}

    run(scenario())


def test_concurrent_checks_of_one_transaction_ask_the_checker_once() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        calls: list[str] = []

        async def check(message: ReceivedMessage) -> TransactionState:
            calls.append(message.transaction_id)
            await release.wait()
            return TransactionState.COMMIT

        producer = TransactionProducer(GROUP, "127.0.0.1:9", check=check)
        message = _fake_message("tx-1")
        asking = [asyncio.create_task(producer._state_of("tx-1", message)) for _ in range(3)]
        await wait_until(lambda: calls, message="the checker called")
        release.set()
        assert await asyncio.gather(*asking) == [TransactionState.COMMIT] * 3
        # Remembered: a later check is answered the same without another call.
        assert await producer._state_of("tx-1", message) is TransactionState.COMMIT
        assert calls == ["tx-1"]
        await producer.close()

    run(scenario())


def test_a_checker_that_raises_or_answers_nonsense_counts_as_unknown_and_is_asked_again() -> None:
    async def scenario() -> None:
        answers: list[object] = [RuntimeError("database down"), "commit", TransactionState.ROLLBACK]

        def check(message: ReceivedMessage) -> TransactionState:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]

        producer = TransactionProducer(GROUP, "127.0.0.1:9", check=check)
        message = _fake_message("tx-2")
        states = [await producer._state_of("tx-2", message) for _ in range(4)]
        assert (
            states == [TransactionState.UNKNOWN, TransactionState.UNKNOWN] + [TransactionState.ROLLBACK] * 2
        )
        assert not answers
        await producer.close()

    run(scenario())


def _fake_message(transaction_id: str) -> ReceivedMessage:
    message = ReceivedMessage.__new__(ReceivedMessage)
    message._properties = {TRANSACTION_ID: transaction_id, PRODUCER_GROUP: GROUP}
    return message


def test_blocking_transaction_producer(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ("broker-a", "broker-b")) as (namesrv, _):
            await create_topic(namesrv, "TxOrders", "broker-a")
            await create_topic(namesrv, "TxInvoices", "broker-b")
            checker = Checker(TransactionState.COMMIT)
            async with consuming(namesrv, "GID_tx", "TxOrders", "TxInvoices") as received:
                ids = await asyncio.to_thread(produce_blocking, namesrv, checker)
                await received.wait_for(b"blocking 1", b"blocking order", b"blocking invoice", b"blocking 3")
                assert received.bodies[b"blocking 2"] == 0
                assert received.bodies[b"blocking rolled back"] == 0
                assert checker.calls == {ids["unknown"]: 1}

    def produce_blocking(namesrv: str, checker: Checker) -> dict[str, str]:
        caller = threading.current_thread()
        threads: list[threading.Thread] = []

        def execute(state: TransactionState) -> Callable[[Message], TransactionState]:
            def run_local(message: Message) -> TransactionState:
                threads.append(threading.current_thread())
                return state

            return run_local

        with blocking.TransactionProducer(GROUP, namesrv, check=checker) as producer:
            committed = producer.send_in_transaction(
                Message("TxOrders", b"blocking 1"), execute(TransactionState.COMMIT)
            )
            assert committed.state is TransactionState.COMMIT
            producer.send_in_transaction(
                Message("TxOrders", b"blocking 2"), execute(TransactionState.ROLLBACK)
            )
            unknown = producer.send_in_transaction(
                Message("TxOrders", b"blocking 3"), execute(TransactionState.UNKNOWN)
            )
            assert threads == [caller] * 3
            with pytest.raises(KeyError), producer.transaction() as cancelled:
                cancelled.send(Message("TxOrders", b"blocking rolled back"))
                raise KeyError("no stock")
            assert cancelled.state is TransactionState.ROLLBACK
            with producer.transaction() as transaction:
                transaction.send(Message("TxOrders", b"blocking order"))
                transaction.send(Message("TxInvoices", b"blocking invoice"))
            assert transaction.state is TransactionState.COMMIT

            async def execute_on_the_loop(message: Message) -> TransactionState:
                return TransactionState.COMMIT

            with pytest.raises(TypeError, match="plain function"):
                producer.send_in_transaction(Message("TxOrders", b"never sent"), execute_on_the_loop)  # type: ignore[arg-type]
            wait_until_blocking(lambda: checker.calls, message="the check-back of the unknown message")
        return {"unknown": unknown.transaction_id}

    run(scenario())
