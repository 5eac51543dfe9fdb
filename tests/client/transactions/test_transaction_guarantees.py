"""What a TransactionProducer guarantees at its edges: transaction ids apart from UNIQ_KEYs, decisions
remembered only while a check may still come, orphan halves of retried sends, transactions dropped,
cancelled, ended after close or sent to while ending, ENDs the broker refuses, and heartbeats when the
name server will not list the cluster. Name server and brokers in this process, a push consumer seeing
what is committed (a committed marker sent after a message to the same one-queue topic shows that the
message, stored before it, was never delivered)."""

from __future__ import annotations

import asyncio
import gc
import threading
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

from cometmq.client import Message, TransactionProducer, TransactionState
from cometmq.client.message import MessageQueue, SendResult
from cometmq.errors import ClientStateError, RemotingTimeoutError, TransactionError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from waiting import wait_until


class HeldEnds:
    """Replaces a producer's instance.invoke: END_TRANSACTION requests wait until :meth:`release`;
    ``answered`` lists the answers to the producer's own ENDs (not those answering check-backs)."""

    def __init__(self, producer: TransactionProducer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: list[str] = []
        self.answered: list[int] = []
        self._released = asyncio.Event()
        self._invoke = producer._instance.invoke
        monkeypatch.setattr(producer._instance, "invoke", self.invoke)

    async def invoke(self, addr: str, code: int, *args: Any, **kwargs: Any) -> RemotingCommand:
        if code != RequestCode.END_TRANSACTION:
            return await self._invoke(addr, code, *args, **kwargs)
        self.held.append(addr)
        await self._released.wait()
        response = await self._invoke(addr, code, *args, **kwargs)
        if args[0]["fromTransactionCheck"] == "false":
            self.answered.append(response.code)
        return response

    def release(self) -> None:
        self._released.set()


def test_transactions_reusing_a_uniq_key_are_checked_apart(tmp_path: Path) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, _):

            def attempt(body: bytes) -> Message:
                return Message("TxOrders", body, properties={"UNIQ_KEY": "order-42"})

            rolled_back = await producer.send_in_transaction(
                attempt(b"attempt 1"), answer(TransactionState.ROLLBACK)
            )
            undecided = await producer.send_in_transaction(
                attempt(b"attempt 2"), answer(TransactionState.UNKNOWN)
            )
            assert rolled_back.msg_id == undecided.msg_id == "order-42"
            assert rolled_back.transaction_id != undecided.transaction_id
            # Every END answered: nothing left to remember; UNKNOWN is never remembered.
            assert rolled_back.transaction_id not in producer._decisions
            assert undecided.transaction_id not in producer._decisions
            await received.wait_for(b"attempt 2")
            assert checker.calls == {undecided.transaction_id: 1}
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert not received.bodies[b"attempt 1"]

    run(scenario())


def test_a_decision_is_forgotten_once_every_end_succeeded(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with transacting(tmp_path, Checker(TransactionState.ROLLBACK)) as (producer, received, _):
            async with producer.transaction() as transaction:
                await transaction.send(Message("TxOrders", b"order"))
                await transaction.send(Message("TxOrders", b"order line"))
            assert transaction.pending == ()
            assert transaction.transaction_id not in producer._decisions
            result = await producer.send_in_transaction(
                Message("TxOrders", b"single"), answer(TransactionState.COMMIT)
            )
            assert result.transaction_id not in producer._decisions
            await received.wait_for(b"order", b"order line", b"single")

    run(scenario())


def test_an_orphan_half_of_a_retried_send_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, brokers):
            settle = producer._settle
            lost: list[SendResult] = []

            async def lose_the_first_answer(
                queue: MessageQueue, started: float, reply: Any, uniq: str
            ) -> SendResult:
                result = await settle(queue, started, reply, uniq)
                if not lost:
                    lost.append(result)  # stored, but the producer never hears of it
                    raise RemotingTimeoutError("answer lost")
                return result

            monkeypatch.setattr(producer, "_settle", lose_the_first_answer)
            async with producer.transaction() as transaction:
                sent = await transaction.send(Message("TxOrders", b"order"))
            monkeypatch.undo()
            [orphan] = lost
            assert orphan.offset_msg_id != sent.offset_msg_id
            # A send was retried: the decision stays for the orphan's check-back.
            assert transaction.transaction_id in producer._decisions
            store = brokers["broker-a"].store
            assert store.max_offset(TRANS_HALF_TOPIC, 0) == 2
            await wait_until(
                lambda: store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 2, message="both halves settled"
            )
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert received.bodies[b"order"] == 1
            assert not checker.calls

    run(scenario())


def test_a_transaction_dropped_unended_is_decided_by_the_checker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, _):

            async def abandon() -> str:
                transaction = producer.transaction()
                await transaction.send(Message("TxOrders", b"abandoned"))
                return transaction.transaction_id  # neither committed nor rolled back

            transaction_id = await abandon()
            gc.collect()
            assert transaction_id not in producer._open
            await received.wait_for(b"abandoned")
            assert checker.calls == {transaction_id: 1}
        [warning] = [r.getMessage() for r in caplog.records if "never committed" in r.getMessage()]
        assert transaction_id in warning

    run(scenario())


def test_a_transaction_cannot_be_used_once_its_producer_is_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as (namesrv, _):
            await create_topic(namesrv, "TxOrders")
            async with TransactionProducer(
                GROUP, namesrv, check=Checker(TransactionState.ROLLBACK)
            ) as producer:
                transaction = producer.transaction()
                await transaction.send(Message("TxOrders", b"order"))
            for use in (
                transaction.commit,
                transaction.rollback,
                lambda: transaction.send(Message("TxOrders", b"late")),
            ):
                with pytest.raises(ClientStateError):
                    await use()
            assert transaction.state is None

    run(scenario())


def test_a_send_while_the_transaction_commits_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with transacting(tmp_path, Checker(TransactionState.ROLLBACK)) as (producer, received, _):
            ends = HeldEnds(producer, monkeypatch)
            transaction = producer.transaction()
            sent = await transaction.send(Message("TxOrders", b"order"))
            committing = asyncio.create_task(transaction.commit())
            await wait_until(lambda: ends.held, message="the END sent")
            assert transaction.pending == (sent,)
            with pytest.raises(ClientStateError, match="is committing; send before commit"):
                await transaction.send(Message("TxOrders", b"too late"))
            ends.release()
            await committing
            assert transaction.pending == ()
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert received.bodies[b"order"] == 1 and not received.bodies[b"too late"]

    run(scenario())


@pytest.mark.parametrize("cancelled", ["once", "again during the rollback"])
def test_a_transaction_cancelled_inside_async_with_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancelled: str
) -> None:
    async def scenario() -> None:
        checker = Checker(TransactionState.COMMIT)
        async with transacting(tmp_path, checker) as (producer, received, _):
            ends = HeldEnds(producer, monkeypatch)
            sent = asyncio.Event()
            transactions = []

            async def work() -> None:
                async with producer.transaction() as transaction:
                    transactions.append(transaction)
                    await transaction.send(Message("TxOrders", b"cancelled"))
                    sent.set()
                    await asyncio.Event().wait()

            task = asyncio.create_task(work())
            await sent.wait()
            task.cancel()
            await wait_until(lambda: ends.held, message="the rollback's END sent")
            if cancelled != "once":
                task.cancel()
            ends.release()
            with pytest.raises(asyncio.CancelledError):
                await task
            [transaction] = transactions
            assert transaction.state is TransactionState.ROLLBACK
            # The rollback's END itself went out and was answered, also when its caller was
            # cancelled meanwhile (not left to the check-back).
            await wait_until(lambda: ends.answered, message="the rollback's END answered")
            assert ends.answered == [ResponseCode.SUCCESS]
            assert transaction.pending == ()
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert not received.bodies[b"cancelled"]
            assert not checker.calls

    run(scenario())


def test_commit_raises_for_a_half_the_broker_discarded(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with transacting(
            tmp_path,
            Checker(TransactionState.COMMIT),
            {"TxOrders": "broker-a", "TxInvoices": "broker-b"},
            transactionCheckMax=2,
        ) as (producer, received, brokers):
            with pytest.raises(TransactionError) as refused:
                async with producer.transaction() as transaction:
                    order = await transaction.send(Message("TxOrders", b"order"))
                    # Open past the broker's check budget: the order's half is discarded.
                    store = brokers["broker-a"].store
                    await wait_until(
                        lambda: store.max_offset(TRANS_CHECK_MAX_TIME_TOPIC, 0) > 0,
                        message="the order's half discarded",
                    )
                    await transaction.send(Message("TxInvoices", b"invoice"))
            [(topic, msg_id, code, remark)] = refused.value.refused
            assert "discarded" in remark
            assert (topic, msg_id, code) == ("TxOrders", order.msg_id, ResponseCode.TRANSACTION_FAILED)
            assert refused.value.transaction_id == transaction.transaction_id
            assert transaction.pending == ()
            await received.wait_for(b"invoice")
            await received.wait_for(*await commit_marker(producer, "TxOrders"))
            assert not received.bodies[b"order"]

    run(scenario())


def test_a_producer_learns_the_cluster_and_forgets_brokers_that_left(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ("broker-a", "broker-b")) as (namesrv, _):
            checker = Checker(TransactionState.COMMIT)
            async with TransactionProducer(GROUP, namesrv, check=checker) as producer:
                instance = producer._instance
                assert set(instance._broker_addrs) == {"broker-a", "broker-b"}
                instance._broker_addrs["broker-gone"] = {0: "127.0.0.1:1"}
                await instance.refresh_routes()
                assert set(instance._broker_addrs) == {"broker-a", "broker-b"}

    run(scenario())


def test_a_name_server_refusing_the_cluster_list_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ("broker-a", "broker-b")) as (namesrv, _):
            await create_topic(namesrv, "TxOrders", "broker-a")
            checker = Checker(TransactionState.COMMIT)
            producer = TransactionProducer(GROUP, namesrv, check=checker)
            instance = producer._instance
            invoke_namesrv = instance.invoke_namesrv
            asked: list[str] = []

            async def refuse_the_cluster_list(
                addr: str, code: int, *args: Any, **kwargs: Any
            ) -> RemotingCommand:
                if code == RequestCode.GET_BROKER_CLUSTER_INFO:
                    asked.append(addr)
                    return RemotingCommand(ResponseCode.NO_PERMISSION, remark="no permission for Cluster Get")
                return await invoke_namesrv(addr, code, *args, **kwargs)

            instance.invoke_namesrv = refuse_the_cluster_list  # type: ignore[method-assign]
            async with producer, consuming(namesrv, "GID_tx", "TxOrders") as received:
                await instance.refresh_routes()
                assert asked == [namesrv]  # asked at start, never again
                assert "broker-b" not in instance._broker_addrs
                # Check-backs still come from the brokers it sends to.
                result = await producer.send_in_transaction(
                    Message("TxOrders", b"decided later"), answer(TransactionState.UNKNOWN)
                )
                await received.wait_for(b"decided later")
                assert checker.calls == {result.transaction_id: 1}
        [warning] = [
            r.getMessage() for r in caplog.records if "Cluster Get on the name server" in r.getMessage()
        ]
        assert "only from the brokers this client sent to" in warning

    run(scenario())


def test_a_plain_local_transaction_runs_off_the_event_loop(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as (namesrv, _):
            await create_topic(namesrv, "TxOrders")
            loop_thread = threading.current_thread()
            threads: list[threading.Thread] = []

            def execute(message: Message) -> TransactionState:
                threads.append(threading.current_thread())
                return TransactionState.COMMIT

            async with TransactionProducer(
                GROUP, namesrv, check=Checker(TransactionState.COMMIT)
            ) as producer:
                await producer.send_in_transaction(Message("TxOrders", b"order"), execute)
            assert len(threads) == 1 and threads[0] is not loop_thread

    run(scenario())
