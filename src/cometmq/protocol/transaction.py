"""Transactional messages on the wire: the sys-flag transaction types and the property names that
RocketMQ's half messages, check-backs and end-of-transaction requests use (docs/protocol.md,
"Transactions")."""

from __future__ import annotations

import enum
from typing import Final

# The two sys-flag bits that carry a message's transaction type (RocketMQ's MessageSysFlag).
TRANSACTION_TYPE_MASK: Final = 0xC


class TransactionType(enum.IntEnum):
    """A record's transaction type (sys flag bits 2 and 3); also END_TRANSACTION's ``commitOrRollback``."""

    NOT_TYPE = 0x0  # a plain message, or "the state is not known yet" in END_TRANSACTION
    PREPARED = 0x4  # a producer's half message, as sent
    COMMIT = 0x8  # the committed copy in the real topic
    ROLLBACK = 0xC


def transaction_type(sys_flag: int) -> TransactionType:
    return TransactionType(sys_flag & TRANSACTION_TYPE_MASK)


def with_transaction_type(sys_flag: int, kind: TransactionType) -> int:
    """*sys_flag* with its transaction bits replaced by *kind*."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | kind


# Properties of transactional messages (RocketMQ's MessageConst names).
TRANSACTION_PREPARED: Final = "TRAN_MSG"  # "true" on a half message as sent
PRODUCER_GROUP: Final = "PGROUP"  # the producer group that may end the transaction
REAL_TOPIC: Final = "REAL_TOPIC"  # a half (or delayed) record's real topic ...
REAL_QUEUE_ID: Final = "REAL_QID"  # ... and queue
TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"  # check-backs sent so far for a half message
# Seconds a half message is exempt from check-backs, in place of the broker's transactionTimeOut.
CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# The transaction a message belongs to. RocketMQ clients use the UNIQ_KEY as a single message's
# transaction id; CometMQ's client puts one id on every message of a multi-message transaction here.
TRANSACTION_ID: Final = "__transactionId__"
# The tag of the op records that settle half messages (RocketMQ's TransactionalMessageUtil.REMOVETAG).
OP_RECORD_TAG: Final = "d"
# The consumer group under which the check-back's progress through the half and op queues is kept.
TRANSACTION_CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
# CometMQ's property on an op record saying how the half message was settled: one of the values of
# ``Settlement``. RocketMQ's op records carry none (the kind of what they settle is then unknown).
SETTLED_AS: Final = "SETTLED_AS"


class Settlement(enum.Enum):
    """How a half message was settled (the ``SETTLED_AS`` property of its op record)."""

    COMMIT = "COMMIT"  # END_TRANSACTION committed it: a copy is in its real queue
    ROLLBACK = "ROLLBACK"  # END_TRANSACTION rolled it back
    DISCARD = "DISCARD"  # transactionCheckMax check-backs unanswered: copied to TRANS_CHECK_MAX_TIME_TOPIC
