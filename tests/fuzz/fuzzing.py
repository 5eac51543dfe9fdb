"""A protocol fuzzer for a running broker or name server, over real sockets.

Inputs start from seeds: a plausible request for every request code of the broker's and the name
server's dispatch tables, built with the project's protocol layer, and the frames the official C++
client sent (cpp_frames.jsonl, recorded by record_cpp_frames.py). Each input is one seed mutated one
way: bit flips, truncation, absurd lengths, header fields of the wrong JSON type, deep nesting,
invalid UTF-8 and lone surrogates, huge counts, zlib bombs, bodies cut or garbled. Input *i* of seed
*s* is made by ``random.Random(f"{s}:{i}")`` alone, so a failure named by its seed and index can be
replayed on its own (``bench/fuzz_servers.py --seed S --start I --count 1``).

An input whose frames are whole is followed by a probe (a request of an unknown code, which every
server answers at once) on the same connection: its answer says the server read the input and is still
serving it. A request that keeps its seed's code and carries no flag must get its own answer too (a
pull excepted: a held pull is answered when its time is up). Every answer's remark is checked for
Python exception text. An input that ends inside a frame is sent, the connection half-closed, and the
server must close it. After each input the server's log must not have gained a traceback; after each
batch, a new connection must still get a send and a pull (the broker) or its cluster table and a KV
round trip (the name server) answered, and the server's resident memory (VmRSS, which counts the
store's mapped files too) must stay under a bound.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import random
import re
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cometmq.errors import ProtocolError
from cometmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, SerializeType
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.codec import decode_frame, encode_bytes
from cometmq.protocol.codes import RESPONSE_FLAG
from cometmq.protocol.pop import BatchAck, RetryMark, encode_batch_ack_body
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.topic_config import TopicConfig
from processes import TEST_BROKER_CONF, ServerProcess

CPP_FRAMES = Path(__file__).resolve().parent / "cpp_frames.jsonl"

TOPIC = "FuzzTopic"
GROUP = "FuzzGroup"
# The topic the liveness check sends to and pulls from (as its own group); created again before each
# check, since a fuzzed request may have deleted it or taken its write permission.
LIVE_TOPIC = "FuzzLive"
LIVE_GROUP = "FuzzLiveGroup"
# A code in neither dispatch table: every server answers it at once with REQUEST_CODE_NOT_SUPPORTED.
PROBE_CODE = 9999
PROBE_OPAQUE = 0x7FFF_FFF0
# How long an answer may take on a loaded machine before the server counts as hung: a bound on a
# hang, never what is checked.
ANSWER_TIMEOUT_S = 60.0

# What a remark must not hold: Python's own exception text, which tells a client nothing it can act on.
EXCEPTION_TEXT = re.compile(
    r"Traceback|\b(?:Key|Value|Type|Attribute|Index|Unicode(?:De|En)code|JSONDecode|Recursion|Overflow"
    r"|ZeroDivision|Assertion|Memory|Lookup|Runtime|NotImplemented)Error\b|struct\.error|zlib\.error"
    r"|object has no attribute|invalid literal for|unhashable type|'NoneType'|not subscriptable"
    r"|codec can't (?:de|en)code|Expecting (?:value|property name)|line \d+ column \d+ \(char"
    r"|internal error handling request code"
)


# seeds ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """A request to mutate: its code, header fields and body, and the frame it came as."""

    code: int
    ext_fields: dict[str, str]
    body: bytes
    frame: bytes
    origin: str  # "built" or "cpp"


def _built(code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> Seed:
    command = RemotingCommand(code=code, ext_fields=dict(ext_fields or {}), body=body, opaque=1)
    return Seed(code, dict(ext_fields or {}), body, encode_bytes(command), "built")


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _send_fields(topic: str, compact: bool, batch: bool = False) -> dict[str, str]:
    fields = {
        "producerGroup": "FuzzProducer",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": encode_properties({"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "0A0000010000"}),
        "reconsumeTimes": "0",
        "unitMode": "false",
        "maxReconsumeTimes": "16",
        "batch": "true" if batch else "false",
    }
    if not compact:
        return fields
    return {letter: value for letter, value in zip("abcdefghijklm", fields.values(), strict=True)}


def _half_fields(topic: str) -> dict[str, str]:
    """A transactional send's fields: the prepared flag and the properties that make a half message."""
    properties = {"TRAN_MSG": "true", "PGROUP": "FuzzProducer", "UNIQ_KEY": "0A0000020000"}
    return _send_fields(topic, compact=False) | {"sysFlag": "4", "properties": encode_properties(properties)}


def _pull_fields(suspend_ms: int) -> dict[str, str]:
    return {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": str(0x4 | (0x2 if suspend_ms else 0)),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": "TagA || TagB",
        "subVersion": "0",
        "expressionType": "TAG",
    }


_HEARTBEAT = {
    "clientID": "127.0.0.1@fuzz",
    "consumerDataSet": [
        {
            "groupName": GROUP,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [
                {
                    "classFilterMode": False,
                    "topic": TOPIC,
                    "subString": "TagA",
                    "tagsSet": ["TagA"],
                    "codeSet": [2598919],
                    "subVersion": 1,
                    "expressionType": "TAG",
                }
            ],
            "unitMode": False,
        }
    ],
    "producerDataSet": [{"groupName": "FuzzProducer"}],
}
_MQ_SET = {
    "consumerGroup": GROUP,
    "clientId": "127.0.0.1@fuzz",
    "mqSet": [{"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}],
}
_GROUP_CONFIG = {
    "groupName": "FuzzGroup2",
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeBroadcastEnable": True,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
}
_CLIENT_CONFIG = {
    "clientId": "127.0.0.1@fuzz",
    "group": GROUP,
    "subscriptionData": {
        "topic": TOPIC,
        "subString": "a > 1 AND TAGS = 'x'",
        "expressionType": "SQL92",
        "tagsSet": [],
        "codeSet": [],
        "subVersion": 1,
        "classFilterMode": False,
    },
}
_QUEUE = {"topic": TOPIC, "queueId": "0"}
# Requests a broker may hold (long polling) instead of answering at once.
_HELD_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE, RequestCode.NOTIFICATION})
# A receipt handle of the message at offset 0 of _QUEUE (RocketMQ's ExtraInfoUtil text).
_HANDLE = "0 1700000000000 60000 0 0 broker-fuzz 0 0"
_CREATE_TOPIC = {
    "topic": "FuzzCreated",
    "defaultTopic": "TBW102",
    "readQueueNums": "1",
    "writeQueueNums": "1",
    "perm": "6",
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": "0",
    "order": "false",
}


def auth_seeds() -> list[Seed]:
    """The user and ACL requests (3001-3010) both servers serve; with aclEnable off, to loopback clients."""
    user = _json({"username": "fuzzer", "password": "fuzz-secret", "userType": "Normal"})
    acl = _json(
        {
            "subject": "User:fuzzer",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [
                        {"resource": f"Topic:{TOPIC}", "actions": ["Pub", "Sub"], "decision": "Allow"}
                    ],
                }
            ],
        }
    )
    code = RequestCode
    subject = {"subject": "User:fuzzer"}
    return [
        _built(code.AUTH_CREATE_USER, {"username": "fuzzer"}, user),
        _built(code.AUTH_UPDATE_USER, {"username": "fuzzer"}, user),
        _built(code.AUTH_GET_USER, {"username": "fuzzer"}),
        _built(code.AUTH_LIST_USER, {"filter": "fuzz"}),
        _built(code.AUTH_CREATE_ACL, subject, acl),
        _built(code.AUTH_UPDATE_ACL, subject, acl),
        _built(code.AUTH_GET_ACL, subject),
        _built(code.AUTH_LIST_ACL, {"subjectFilter": "fuzz", "resourceFilter": TOPIC}),
        _built(code.AUTH_DELETE_ACL, {**subject, "policyType": "Custom", "resource": f"Topic:{TOPIC}"}),
        _built(code.AUTH_DELETE_USER, {"username": "fuzzer"}),
    ]


def broker_seeds() -> list[Seed]:
    """A plausible request for every request code the broker serves."""
    batch = encode_batch_body(
        [BatchEntry(0, b"one", encode_properties({"TAGS": "TagA"})), BatchEntry(0, b"two", "")]
    )
    code = RequestCode
    return [
        _built(code.SEND_MESSAGE, _send_fields(TOPIC, compact=False), b"fuzz body"),
        _built(code.SEND_MESSAGE_V2, _send_fields(TOPIC, compact=True), b"fuzz body v2"),
        _built(code.SEND_BATCH_MESSAGE, _send_fields(TOPIC, compact=True, batch=True), batch),
        # A transaction's half message, then its end (commit) naming the first half record.
        _built(code.SEND_MESSAGE, _half_fields(TOPIC), b"fuzz half"),
        _built(
            code.END_TRANSACTION,
            {
                "producerGroup": "FuzzProducer",
                "tranStateTableOffset": "0",
                "commitLogOffset": "0",
                "commitOrRollback": "8",
                "fromTransactionCheck": "false",
                "msgId": "0A0000020000",
                "topic": TOPIC,
            },
        ),
        _built(code.PULL_MESSAGE, _pull_fields(0)),
        _built(code.PULL_MESSAGE, _pull_fields(50)),
        # POP consumption: a pop (never held: pollTime 0), then an ack, a change and a batch ack of a
        # handle that may or may not be in flight.
        _built(
            code.POP_MESSAGE,
            {
                "consumerGroup": GROUP,
                "topic": TOPIC,
                "queueId": "-1",
                "maxMsgNums": "4",
                "invisibleTime": "60000",
                "pollTime": "0",
                "bornTime": "0",
                "initMode": "0",
                "expType": "TAG",
                "exp": "*",
            },
        ),
        _built(code.ACK_MESSAGE, {"consumerGroup": GROUP, **_QUEUE, "extraInfo": _HANDLE, "offset": "0"}),
        _built(
            code.CHANGE_MESSAGE_INVISIBLETIME,
            {"consumerGroup": GROUP, **_QUEUE, "extraInfo": _HANDLE, "offset": "0", "invisibleTime": "1000"},
        ),
        _built(
            code.BATCH_ACK_MESSAGE,
            body=encode_batch_ack_body(
                "broker-fuzz",
                [BatchAck(GROUP, TOPIC, RetryMark.TOPIC, 0, 0, 0, 1700000000000, 60000, (0, 1))],
            ),
        ),
        _built(code.PEEK_MESSAGE, {"consumerGroup": GROUP, **_QUEUE, "maxMsgNums": "4"}),
        _built(code.NOTIFICATION, {"consumerGroup": GROUP, **_QUEUE, "pollTime": "0", "bornTime": "0"}),
        _built(code.POLLING_INFO, {"consumerGroup": GROUP, **_QUEUE}),
        _built(
            code.CONSUMER_SEND_MSG_BACK,
            {"offset": "0", "group": GROUP, "delayLevel": "0", "originMsgId": "X", "originTopic": TOPIC},
        ),
        _built(code.HEART_BEAT, body=_json(_HEARTBEAT)),
        _built(
            code.UNREGISTER_CLIENT,
            {"clientID": "127.0.0.1@fuzz", "producerGroup": "FuzzProducer", "consumerGroup": GROUP},
        ),
        _built(code.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}),
        _built(code.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, **_QUEUE}),
        _built(code.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, **_QUEUE, "commitOffset": "1"}),
        _built(code.LOCK_BATCH_MQ, body=_json(_MQ_SET)),
        _built(code.UNLOCK_BATCH_MQ, body=_json(_MQ_SET)),
        _built(code.CHECK_CLIENT_CONFIG, body=_json(_CLIENT_CONFIG)),
        _built(code.UPDATE_AND_CREATE_TOPIC, _CREATE_TOPIC),
        _built(code.DELETE_TOPIC_IN_BROKER, {"topic": "FuzzCreated"}),
        _built(code.GET_ALL_TOPIC_CONFIG),
        _built(code.GET_TOPIC_STATS_INFO, {"topic": TOPIC}),
        _built(code.GET_TOPIC_CONFIG, {"topic": TOPIC}),
        _built(code.GET_MAX_OFFSET, _QUEUE),
        _built(code.GET_MIN_OFFSET, _QUEUE),
        _built(code.SEARCH_OFFSET_BY_TIMESTAMP, {**_QUEUE, "timestamp": "1700000000000"}),
        _built(code.GET_EARLIEST_MSG_STORETIME, _QUEUE),
        _built(code.VIEW_MESSAGE_BY_ID, {"offset": "0"}),
        _built(
            code.QUERY_MESSAGE,
            {"topic": TOPIC, "key": "k1", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "9" * 13},
        ),
        _built(code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=_json(_GROUP_CONFIG)),
        _built(code.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
        _built(code.DELETE_SUBSCRIPTIONGROUP, {"groupName": "FuzzGroup2", "removeOffset": "true"}),
        _built(code.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}),
        _built(code.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": GROUP}),
        _built(
            code.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": TOPIC, "group": GROUP, "timestamp": "0", "isForce": "true"},
        ),
        _built(code.GET_ALL_DELAY_OFFSET),
        _built(code.GET_ALL_CONSUMER_OFFSET),
        _built(code.GET_BROKER_RUNTIME_INFO),
        _built(code.GET_BROKER_HA_STATUS),
        _built(code.GET_BROKER_CONFIG),
        _built(code.UPDATE_BROKER_CONFIG, body=b"longPollingEnable=true\n"),
        _built(code.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC}),
        _built(code.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": GROUP}),
        _built(code.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}),
        _built(code.CLONE_GROUP_OFFSET, {"srcGroup": GROUP, "destGroup": "FuzzGroup3", "topic": TOPIC}),
        # Names another broker the master: refused, since the fuzzed broker is a master (id 0) that has no
        # id of its own to become a slave under.
        _built(code.NOTIFY_BROKER_ROLE_CHANGED, {"masterAddress": "127.0.0.1:1", "masterEpoch": "1"}),
        *auth_seeds(),
    ]


def namesrv_seeds() -> list[Seed]:
    """A plausible request for every request code the name server serves."""
    broker = {
        "brokerName": "broker-fuzz",
        "brokerAddr": "127.0.0.1:1",
        "clusterName": "FuzzCluster",
        "brokerId": "0",
    }
    topics = {TOPIC: TopicConfig(TOPIC, 4, 4, 6, "SINGLE_TAG")}
    register = RegisterBrokerBody(DataVersion(), topics, [])
    registration = {**broker, "haServerAddr": "127.0.0.1:2"}
    version = _json(DataVersion().to_json())
    code = RequestCode
    return [
        _built(code.REGISTER_BROKER, {**registration, "compressed": "false"}, register.encode()),
        _built(
            code.REGISTER_BROKER, {**registration, "compressed": "true"}, register.encode(compressed=True)
        ),
        _built(code.UNREGISTER_BROKER, broker),
        _built(code.QUERY_DATA_VERSION, broker, version),
        _built(code.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
        _built(code.GET_BROKER_CLUSTER_INFO),
        _built(code.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        _built(code.GET_TOPICS_BY_CLUSTER, {"cluster": "FuzzCluster"}),
        _built(code.GET_SYSTEM_TOPIC_LIST_FROM_NS),
        _built(code.DELETE_TOPIC_IN_NAMESRV, {"topic": "FuzzGone", "clusterName": "FuzzCluster"}),
        _built(code.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-fuzz"}),
        _built(code.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-fuzz"}),
        _built(code.PUT_KV_CONFIG, {"namespace": "FUZZ", "key": "k", "value": "v"}),
        _built(code.GET_KV_CONFIG, {"namespace": "FUZZ", "key": "k"}),
        _built(code.DELETE_KV_CONFIG, {"namespace": "FUZZ", "key": "k"}),
        _built(code.GET_KVLIST_BY_NAMESPACE, {"namespace": "FUZZ"}),
        *auth_seeds(),
    ]


def cpp_seeds(codes: set[int]) -> list[Seed]:
    """The recorded C++ client frames whose request code is one of *codes*."""
    seeds = []
    for line in CPP_FRAMES.read_text().splitlines():
        frame = base64.b64decode(json.loads(line)["frame"])
        command = decode_frame(frame[4:])
        if command.code in codes:
            seeds.append(Seed(command.code, command.ext_fields, bytes(command.body), frame, "cpp"))
    return seeds


# mutations ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One fuzz input: the bytes to send, and whether they end on a frame boundary (*whole*) or inside
    a frame (the connection is then half-closed after them)."""

    index: int
    mutation: str
    data: bytes
    whole: bool
    # The opaque of the request's answer, when the server must answer it: a request with the code of
    # its seed and no flag, other than a pull (a held pull is answered only when its time is up).
    answer_opaque: int | None


_INT32 = struct.Struct(">i")
_MAX_FRAME = 16 * 1024 * 1024
_HUGE_NUMBERS = [
    2**31 - 1,
    -(2**31),
    2**31,
    2**32,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64,
    10**30,
    -1,
    0,
    1025,
    65536,
]
# Text where a number belongs; the last three are a fullwidth nine, an Arabic-Indic three and a Roman
# numeral eight, digits no RocketMQ client writes.
_ODD_TEXT = [
    "",
    " ",
    "12abc",
    " 12",
    "0x10",
    "1e3",
    "1.5",
    "-0",
    "+7",
    "NaN",
    "true",
    "\uff19",
    "\u0663",
    "\u2167",
]
_BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]
_SURROGATES = ["\\ud800", "\\udfff", "\\ud83d", "\\udc00x"]


@functools.cache
def _zlib_bomb(mib: int) -> bytes:
    """*mib* MiB of zeros, deflated (to a thousandth). Up to 64 MiB: enough to show an inflate without
    a bound, not enough to harm the machine."""
    return zlib.compress(bytes(mib * 1024 * 1024), 9)


def _nested(depth: int, rng: random.Random) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * depth + "1" + closer * depth


def _odd_value(rng: random.Random) -> Any:
    """A JSON value of the wrong type or range for a header field."""
    choice = rng.randrange(9)
    if choice == 0:
        return rng.choice(_HUGE_NUMBERS)
    if choice == 1:
        return rng.choice([None, True, False, 1.5, -0.0, 1e308, 3.0])
    if choice == 2:
        return [rng.choice(_HUGE_NUMBERS), "x"]
    if choice == 3:
        return {"nested": {"value": 1}}
    if choice == 4:
        return rng.choice(_ODD_TEXT)
    if choice == 5:
        return "x" * rng.choice([256, 4096, 70000])
    if choice == 6:
        return str(rng.choice(_HUGE_NUMBERS))
    if choice == 7:
        return "\x00\x01\x02 \t\n\u2028"
    return []


class _RawJson:
    """JSON text put into a header as it is: for what JSON libraries refuse to write (escapes of lone
    surrogates, nesting deeper than they allow)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _header_json(header: dict[str, Any]) -> bytes:
    """*header* as JSON, _RawJson values copied in as they are."""
    raws: dict[str, str] = {}

    def replace(value: Any) -> Any:
        if isinstance(value, _RawJson):
            marker = f"@@raw{len(raws)}@@"
            raws[f'"{marker}"'] = value.text
            return marker
        if isinstance(value, dict):
            return {key: replace(item) for key, item in value.items()}
        return value

    text = json.dumps(replace(header), separators=(",", ":"), ensure_ascii=False)
    for marker, raw in raws.items():
        text = text.replace(marker, raw, 1)
    return text.encode("utf-8", "surrogatepass")


def _frame(header: bytes, body: bytes) -> bytes:
    """A frame with a JSON header."""
    return _INT32.pack(4 + len(header) + len(body)) + _INT32.pack(len(header)) + header + body


# The mutations that keep the seed's request code and send it with no flag and the input's own opaque.
_ANSWERED = frozenset(
    (
        "field-type",
        "field-drop",
        "huge-count",
        "deep-nesting",
        "bad-utf8",
        "lone-surrogate",
        "body",
        "zlib-bomb",
    )
)
# Inputs carry opaques from 1 to _OPAQUES, below those of the probe and the liveness checks.
_OPAQUES = 1 << 30


class Mutator:
    """Makes input *index* of the run *seed* from one of *seeds*: the same seeds, seed and index, the
    same input."""

    def __init__(self, seed: int, seeds: list[Seed]) -> None:
        self.seed = seed
        self.seeds = seeds
        self.kinds: list[tuple[str, int, Callable[[random.Random, Seed], tuple[bytes, bool]]]] = [
            ("plain", 6, self._plain),
            ("binary-header", 4, self._binary),
            ("field-type", 12, self._field_type),
            ("top-level-type", 4, self._top_level_type),
            ("field-drop", 4, self._field_drop),
            ("huge-count", 12, self._huge_count),
            ("deep-nesting", 3, self._deep_nesting),
            ("bad-utf8", 5, self._bad_utf8),
            ("lone-surrogate", 5, self._lone_surrogate),
            ("body", 8, self._body),
            ("zlib-bomb", 1, self._zlib_bomb),
            ("bit-flip", 10, self._bit_flip),
            ("header-word", 3, self._header_word),
            ("truncate", 4, self._truncate),
            ("absurd-length", 4, self._absurd_length),
            ("code", 5, self._code),
            ("pipelined", 3, self._pipelined),
        ]
        self._weights = [weight for _, weight, _ in self.kinds]
        self._opaque = 1

    def make(self, index: int) -> Input:
        rng = random.Random(f"{self.seed}:{index}")
        seed = rng.choice(self.seeds)
        name, _, mutate = rng.choices(self.kinds, self._weights)[0]
        self._opaque = index % _OPAQUES + 1
        data, whole = mutate(rng, seed)
        answered = name in _ANSWERED and seed.code not in _HELD_CODES
        return Input(index, f"{name}({seed.origin})", data, whole, self._opaque if answered else None)

    # structured: the request rebuilt from its parts, something in them changed

    def _header(self, seed: Seed, ext_fields: Any, **top: Any) -> dict[str, Any]:
        header: dict[str, Any] = {
            "code": seed.code,
            "extFields": ext_fields,
            "flag": 0,
            "language": "JAVA",
            "opaque": self._opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": 409,
        }
        header.update(top)
        return header

    def _with_fields(self, seed: Seed, ext_fields: Any, body: bytes | None = None) -> tuple[bytes, bool]:
        header = _header_json(self._header(seed, ext_fields))
        return _frame(header, seed.body if body is None else body), True

    def _plain(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        return seed.frame, True

    def _binary(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        if seed.code > 0x7FFF:  # RocketMQ 5's six-digit codes have no binary header: sent as they are
            return seed.frame, True
        command = RemotingCommand(
            code=seed.code,
            ext_fields=dict(seed.ext_fields),
            body=seed.body,
            opaque=rng.randrange(1, _OPAQUES),
            serialize_type=SerializeType.ROCKETMQ,
        )
        frame = encode_bytes(command)
        if rng.random() < 0.5:  # a length inside the binary header made wrong
            position = rng.randrange(8, min(len(frame), 8 + 40))
            frame = frame[:position] + bytes([rng.randrange(256)]) + frame[position + 1 :]
        return frame, True

    def _field_type(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        fields: dict[str, Any] = dict(seed.ext_fields)
        for key in rng.sample(sorted(fields) or ["topic"], k=min(len(fields) or 1, rng.randint(1, 3))):
            fields[key] = _odd_value(rng)
        return self._with_fields(seed, fields)

    def _top_level_type(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        key = rng.choice(["code", "opaque", "flag", "version", "language", "remark", "extFields"])
        value = rng.choice(
            [
                str(seed.code),
                None,
                [seed.code],
                {"v": 1},
                1.5,
                2**40,
                -(2**63),
                "JAVA",
                "",
                True,
                _odd_value(rng),
            ]
        )
        header = self._header(seed, dict(seed.ext_fields), **{key: value})
        return _frame(_header_json(header), seed.body), True

    def _field_drop(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        fields = dict(seed.ext_fields)
        for key in rng.sample(sorted(fields), k=min(len(fields), rng.randint(1, 2))):
            del fields[key]
        return self._with_fields(seed, fields)

    def _huge_count(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        fields: dict[str, Any] = dict(seed.ext_fields)
        numeric = [key for key, value in fields.items() if value.lstrip("-").isdigit()]
        for key in rng.sample(numeric, k=min(len(numeric), rng.randint(1, 3))):
            value = rng.choice(_HUGE_NUMBERS)
            fields[key] = str(value) if rng.random() < 0.8 else value
        body = seed.body
        if body.startswith(b"{") and rng.random() < 0.5:  # a count inside a JSON body
            text = body.decode()
            text = re.sub(r'(":)(\d+)', lambda m: m.group(1) + str(rng.choice(_HUGE_NUMBERS)), text)
            body = text.encode()
        return self._with_fields(seed, fields, body)

    def _deep_nesting(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        depth = rng.choice([200, 1000, 5000, 50000])
        where = rng.randrange(3)
        if where == 0:  # a header field's value
            fields: dict[str, Any] = dict(seed.ext_fields)
            fields[rng.choice(sorted(fields) or ["topic"])] = _RawJson(_nested(depth, rng))
            return self._with_fields(seed, fields)
        if where == 1:  # the whole extFields
            return self._with_fields(seed, _RawJson(_nested(depth, rng)))
        return self._with_fields(seed, dict(seed.ext_fields), _nested(depth, rng).encode())  # the body

    def _bad_utf8(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        fields = dict(seed.ext_fields)
        if not fields or rng.random() < 0.3:  # in the body
            body = bytearray(seed.body or b"{}")
            position = rng.randrange(len(body) + 1)
            body[position:position] = rng.choice(_BAD_UTF8)
            return self._with_fields(seed, fields, bytes(body))
        key = rng.choice(sorted(fields))
        marker = "@@bad@@"
        fields[key] = fields[key][: rng.randrange(len(fields[key]) + 1)] + marker
        header = _header_json(self._header(seed, fields)).replace(marker.encode(), rng.choice(_BAD_UTF8))
        return _frame(header, seed.body), True

    def _lone_surrogate(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        fields: dict[str, Any] = dict(seed.ext_fields)
        key = rng.choice(sorted(fields) or ["topic"])
        escape = rng.choice(_SURROGATES)
        fields[key] = _RawJson(json.dumps(fields.get(key, ""))[:-1] + escape + '"')
        if rng.random() < 0.5 and seed.body.startswith(b"{"):  # and one in a JSON body's string
            body = seed.body.replace(b'":"', b'":"' + escape.encode(), 1)
            return self._with_fields(seed, fields, body)
        return self._with_fields(seed, fields)

    def _body(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        body = seed.body
        choice = rng.randrange(6)
        if choice == 0:
            body = body[: rng.randrange(len(body) + 1)]
        elif choice == 1 and body:
            flipped = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            body = bytes(flipped)
        elif choice == 2:
            body = rng.randbytes(rng.choice([1, 17, 300, 5000]))
        elif choice == 3:
            body = _json(
                rng.choice([[], "text", 12, None, {"mqSet": "x"}, {"table": [1]}, {"consumerDataSet": {}}])
            )
        elif choice == 4:
            # JSON with every value replaced by one of the wrong type
            try:
                obj = json.loads(body)
            except ValueError:
                obj = {}
            if isinstance(obj, dict):
                obj = {key: _odd_value(rng) for key in obj}
            body = _json(obj)
        elif rng.random() < 0.1:  # at or over the message size limit: rare, they take the server long
            body = b"x" * rng.choice([1024 * 1024, 4 * 1024 * 1024 + 1])
        else:
            body = seed.body * rng.randint(2, 100)
        return self._with_fields(seed, dict(seed.ext_fields), body)

    def _zlib_bomb(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        bomb = _zlib_bomb(rng.choice([1, 16, 64]))
        fields = dict(seed.ext_fields)
        if seed.code == RequestCode.REGISTER_BROKER or "compressed" in fields:
            fields["compressed"] = "true"
        for key in ("sysFlag", "f"):
            if key in fields:
                fields[key] = "1"  # the message body is compressed
        return self._with_fields(seed, fields, bomb)

    # raw: the frame's bytes changed

    def _bit_flip(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        frame = bytearray(seed.frame)
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            position = rng.randrange(4, len(frame))  # the length prefix stays, so the framing holds
            frame[position] ^= 1 << rng.randrange(8)
        return bytes(frame), True

    def _header_word(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        frame = bytearray(seed.frame)
        (word,) = _INT32.unpack_from(frame, 4)
        choice = rng.randrange(4)
        if choice == 0:  # another serialization type
            word = (rng.randrange(256) << 24) | (word & 0xFFFFFF)
        elif choice == 1:  # a header length past the frame
            word = (word & ~0xFFFFFF) | rng.randrange(len(frame), 0x1000000)
        elif choice == 2:  # a header length cutting the header short
            word = (word & ~0xFFFFFF) | rng.randrange((word & 0xFFFFFF) + 1)
        else:
            word = rng.randrange(-(2**31), 2**31)
        _INT32.pack_into(frame, 4, (word + 2**31) % 2**32 - 2**31)
        return bytes(frame), True

    def _truncate(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        return seed.frame[: rng.randrange(1, len(seed.frame))], False

    def _absurd_length(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        length = rng.choice(
            [
                -1,
                -(2**31),
                0,
                1,
                3,
                2**31 - 1,
                _MAX_FRAME - 4,
                _MAX_FRAME - 3,
                _MAX_FRAME,
                len(seed.frame) + 100,
            ]
        )
        return _INT32.pack(length) + seed.frame[4:], False

    def _code(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        code = rng.choice([rng.randrange(-32768, 32768), *map(int, RequestCode)])
        flag = rng.choice([0, 0, RESPONSE_FLAG, 2, 3, -1, 2**31 - 1])
        header = self._header(
            seed, dict(seed.ext_fields), code=code, flag=flag, opaque=rng.randrange(1, _OPAQUES)
        )
        return _frame(_header_json(header), seed.body), True

    def _pipelined(self, rng: random.Random, seed: Seed) -> tuple[bytes, bool]:
        frames = [rng.choice(self.seeds).frame for _ in range(rng.randint(2, 40))]
        return b"".join(frames), True


# running ------------------------------------------------------------------------------------------


@dataclass
class Failure:
    seed: int
    index: int | None  # None: found by a batch's check, named by *mutation*
    mutation: str
    what: str
    detail: str

    @property
    def kind(self) -> str:
        """What failures of one cause share: the check that failed and the gist of what it saw."""
        if self.what == "traceback in the server log":
            return f"{self.what}: {_traceback_gist(self.detail)}"
        if self.what.startswith("exception text"):
            return f"{self.what}: {self.detail.split(':', 1)[0][:120]}"
        return self.what

    def __str__(self) -> str:
        where = f"input {self.index} ({self.mutation})" if self.index is not None else self.mutation
        return f"seed {self.seed}, {where}: {self.what}: {self.detail[:300]}"


def _traceback_gist(text: str) -> str:
    """The exception a logged traceback ends with, and the deepest place of cometmq's it passed."""
    lines = text.splitlines()
    end = next(
        (i for i, line in enumerate(lines[1:], 1) if line and not line.startswith(" ")), len(lines) - 1
    )
    places = [line.strip() for line in lines[:end] if line.strip().startswith('File "') and "cometmq" in line]
    place = re.sub(r'File ".*?/cometmq/', "cometmq/", places[-1]) if places else "?"
    return f"{lines[end][:160] if end < len(lines) else '?'} at {place}"


# Examples kept of each kind of failure; the rest are only counted.
_EXAMPLES = 3


@dataclass
class Report:
    inputs: int = 0
    closed_by_server: int = 0
    max_rss_kib: int = 0
    elapsed_s: float = 0.0
    crashed: bool = False
    # kind of failure → how many, and the first few
    failures: dict[str, tuple[int, list[Failure]]] = field(default_factory=dict)

    def add(self, failure: Failure) -> None:
        count, examples = self.failures.get(failure.kind, (0, []))
        if len(examples) < _EXAMPLES:
            examples.append(failure)
        self.failures[failure.kind] = (count + 1, examples)

    @property
    def failure_count(self) -> int:
        return sum(count for count, _ in self.failures.values())

    def describe(self, name: str) -> str:
        """Every kind of failure, how often and its first examples (seed and input index each)."""
        lines = []
        for kind, (count, examples) in self.failures.items():
            lines.append(f"{name}: {count} x {kind}")
            lines += [f"    {example}" for example in examples]
        return "\n".join(lines)


def memory_kib(pid: int) -> tuple[int, int]:
    """The process's resident memory now and at its peak (VmRSS, VmHWM), in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


class ServerClosed(Exception):
    """The server closed the connection."""


class Connection:
    """A blocking connection that writes raw bytes and reads whole commands."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=ANSWER_TIMEOUT_S)
        self.decoder = FrameDecoder()
        # Commands read after the one an ``until`` waited for (one read may hold several), for the next.
        self._unread: list[RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ServerClosed from exc

    def read(self) -> list[RemotingCommand]:
        """The commands left unread by the last ``until``, else those completed by the next bytes;
        ServerClosed at the end of the stream."""
        if self._unread:
            commands, self._unread = self._unread, []
            return commands
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError as exc:
            raise ServerClosed from exc
        if not data:
            raise ServerClosed
        return self.decoder.feed(data)

    def until(self, done: Callable[[RemotingCommand], bool]) -> list[RemotingCommand]:
        """Read until a command *done* accepts; every command read up to it, that one last."""
        commands: list[RemotingCommand] = []
        while True:
            batch = self.read()
            for at, command in enumerate(batch):
                commands.append(command)
                if done(command):
                    self._unread = batch[at + 1 :]
                    return commands

    def call_raw(self, header: bytes, body: bytes = b"") -> RemotingCommand:
        """The answer to a request given as its JSON header's text (with whatever JSON libraries
        refuse to write) and body: the first answer read, the probe's if the request got none."""
        self.send(_frame(header, body) + _PROBE)
        return self.until(_is_probe_answer)[0]

    def call(self, request: RemotingCommand) -> RemotingCommand:
        request.opaque = PROBE_OPAQUE - 1
        self.send(encode_bytes(request))
        return self.until(_answer_to(request.opaque))[-1]


def _answer_to(opaque: int) -> Callable[[RemotingCommand], bool]:
    return lambda command: command.is_response and command.opaque == opaque


_PROBE = encode_bytes(RemotingCommand(code=PROBE_CODE, opaque=PROBE_OPAQUE))
_is_probe_answer = _answer_to(PROBE_OPAQUE)


class LogWatch:
    """Reads what a log file gained since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def new_text(self) -> str:
        size = self.path.stat().st_size
        if size <= self.offset:
            return ""
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read(size - self.offset)
        self.offset = size
        return data.decode(errors="replace")


def broker_alive(address: tuple[str, int], serial: int) -> str | None:
    """None when a new connection gets a send answered and that message back by a pull; else what went
    wrong."""
    conn: Connection | None = None
    try:
        conn = Connection(address)
        topic = {**_CREATE_TOPIC, "topic": LIVE_TOPIC}
        created = conn.call(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=topic))
        if created.code != ResponseCode.SUCCESS:
            return f"topic creation answered {created.code} {created.remark!r}"
        body = f"alive {serial}".encode()
        fields = _send_fields(LIVE_TOPIC, compact=True)
        fields["i"] = ""
        sent = conn.call(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields, body=body))
        if sent.code != ResponseCode.SUCCESS:
            return f"send answered {sent.code} {sent.remark!r}"
        pull = _pull_fields(0)
        pull.update(
            consumerGroup=LIVE_GROUP,
            topic=LIVE_TOPIC,
            queueOffset=sent.ext_fields["queueOffset"],
            subscription="*",
            maxMsgNums="1",
        )
        pulled = conn.call(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=pull))
        if pulled.code != ResponseCode.SUCCESS or body not in bytes(pulled.body):
            return f"pull answered {pulled.code} {pulled.remark!r} without the message sent"
        return None
    except (ServerClosed, OSError, ProtocolError) as exc:
        return f"{type(exc).__name__} {exc}"
    finally:
        if conn is not None:
            conn.close()


def namesrv_alive(address: tuple[str, int], serial: int) -> str | None:
    """None when a new connection gets the cluster table and a KV value it put answered."""
    conn: Connection | None = None
    try:
        conn = Connection(address)
        info = conn.call(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))
        if info.code != ResponseCode.SUCCESS:
            return f"cluster info answered {info.code} {info.remark!r}"
        key = {"namespace": "FUZZ_LIVE", "key": "k"}
        put = conn.call(
            RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields={**key, "value": str(serial)})
        )
        got = conn.call(RemotingCommand(code=RequestCode.GET_KV_CONFIG, ext_fields=key))
        if put.code != ResponseCode.SUCCESS or got.ext_fields.get("value") != str(serial):
            return f"KV put/get answered {put.code}/{got.code} {got.remark!r} {got.ext_fields}"
        return None
    except (ServerClosed, OSError, ProtocolError) as exc:
        return f"{type(exc).__name__} {exc}"
    finally:
        if conn is not None:
            conn.close()


@dataclass
class Target:
    """A server process to fuzz: its address, pid, log file, seeds and liveness check."""

    name: str
    address: tuple[str, int]
    pid: int
    log_path: Path
    seeds: list[Seed]
    alive: Callable[[tuple[str, int], int], str | None]
    is_running: Callable[[], bool]


def fuzz(
    target: Target,
    seed: int,
    count: int,
    *,
    start: int = 0,
    batch: int = 500,
    rss_bound_kib: int,
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Sends inputs *start* … *start* + *count* - 1 of *seed* to *target*, checking it after each
    input and each *batch*; stops early if the server dies."""
    mutator = Mutator(seed, target.seeds)
    report = Report()
    log = LogWatch(target.log_path)
    began = time.monotonic()
    conn: Connection | None = None

    def fail(index: int | None, mutation: str, what: str, detail: str) -> None:
        report.add(Failure(seed, index, mutation, what, detail))

    def check_remarks(commands: list[RemotingCommand], item: Input) -> None:
        for command in commands:
            if command.remark and EXCEPTION_TEXT.search(command.remark):
                fail(
                    item.index,
                    item.mutation,
                    f"exception text in the remark of code {command.code}",
                    command.remark,
                )

    try:
        for index in range(start, start + count):
            item = mutator.make(index)
            if conn is None or index % 200 == 0:  # a fresh connection now and then drops held pulls
                if conn is not None:
                    conn.close()
                try:
                    conn = Connection(target.address)
                except OSError as exc:
                    conn = None
                    report.crashed = not target.is_running()
                    what = "server died" if report.crashed else "a new connection is refused"
                    fail(item.index, item.mutation, what, str(exc))
                    break
            report.inputs += 1
            try:
                if item.whole:
                    conn.send(item.data + _PROBE)
                    answers = conn.until(_is_probe_answer)
                    if item.answer_opaque is not None:
                        answered = _answer_to(item.answer_opaque)
                        if not any(map(answered, answers)):
                            # Answered later (after a flush or a file write), or never: "no answer".
                            answers += conn.until(answered)
                    check_remarks(answers, item)
                else:
                    conn.send(item.data)
                    conn.sock.shutdown(socket.SHUT_WR)
                    with contextlib.suppress(ServerClosed):
                        while True:
                            check_remarks(conn.read(), item)
            except ServerClosed:
                if item.whole:  # (the server closes every connection that ends inside a frame)
                    report.closed_by_server += 1
                conn.close()
                conn = None
            except TimeoutError:
                fail(item.index, item.mutation, "no answer", f"nothing in {ANSWER_TIMEOUT_S:g} s")
                conn.close()
                conn = None
            except ProtocolError as exc:
                fail(item.index, item.mutation, "the server sent bytes that are not a frame", str(exc))
                conn.close()
                conn = None
            else:
                if not item.whole:
                    conn.close()
                    conn = None
            text = log.new_text()
            if "Traceback" in text:
                fail(
                    item.index, item.mutation, "traceback in the server log", text[text.index("Traceback") :]
                )
            if not target.is_running():
                fail(item.index, item.mutation, "server died", text[-2000:])
                report.crashed = True
                break
            if (index + 1 - start) % batch == 0 or index + 1 == start + count:
                span = f"batch ending at input {index}"
                problem = target.alive(target.address, index)
                if problem is not None:
                    fail(None, span, "a new connection is not served", problem)
                rss, peak = memory_kib(target.pid)
                report.max_rss_kib = max(report.max_rss_kib, peak)
                if rss > rss_bound_kib:
                    fail(None, span, "resident memory over its bound", f"{rss} KiB > {rss_bound_kib} KiB")
                report.elapsed_s = time.monotonic() - began
                if progress is not None:
                    progress(report)
    finally:
        if conn is not None:
            conn.close()
    report.elapsed_s = time.monotonic() - began
    return report


@contextlib.contextmanager
def servers(root: Path) -> Iterator[tuple[Target, Target]]:
    """A name server and a broker (registered with it), each its own ``cometmq`` process on free
    ports, their logs in *root*; the broker's topic and group for the seeds created, with messages."""
    namesrv = ServerProcess(["namesrv", "--host", "127.0.0.1", "--port", "0"], root / "namesrv.log")
    processes = [namesrv]
    try:
        namesrv_address = namesrv.wait_ready("CometMQ namesrv ready:").rsplit(" ", 1)[1]
        conf = root / "broker.conf"
        conf.write_text(TEST_BROKER_CONF)
        broker = ServerProcess(
            [
                "broker",
                "-c",
                str(conf),
                "--namesrv-addr",
                namesrv_address,
                "--data-dir",
                str(root / "data"),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ],
            root / "broker.log",
        )
        processes.append(broker)
        broker_address = broker.wait_ready("CometMQ broker ready:").split(" at ", 1)[1].split()[0]

        def address(text: str) -> tuple[str, int]:
            host, port = text.rsplit(":", 1)
            return host, int(port)

        broker_target = Target(
            "broker",
            address(broker_address),
            broker.proc.pid,
            broker.log_path,
            broker_seeds()
            + cpp_seeds({int(c) for c in RequestCode} - {int(RequestCode.GET_ROUTEINFO_BY_TOPIC)}),
            broker_alive,
            lambda: broker.proc.poll() is None,
        )
        namesrv_target = Target(
            "namesrv",
            address(namesrv_address),
            namesrv.proc.pid,
            namesrv.log_path,
            namesrv_seeds() + cpp_seeds({int(RequestCode.GET_ROUTEINFO_BY_TOPIC)}),
            namesrv_alive,
            lambda: namesrv.proc.poll() is None,
        )
        _prepare_broker(broker_target.address)
        yield namesrv_target, broker_target
    finally:
        for process in reversed(processes):
            process.terminate()


def _prepare_broker(address: tuple[str, int]) -> None:
    """The seeds' topic and group, and a few messages in it for pulls, views and queries to find."""
    conn = Connection(address)
    try:
        topic = {**_CREATE_TOPIC, "topic": TOPIC, "readQueueNums": "4", "writeQueueNums": "4"}
        created = conn.call(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=topic))
        assert created.code == ResponseCode.SUCCESS, (created.code, created.remark)
        for seed in broker_seeds():
            if seed.code in (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.HEART_BEAT):
                conn.call(RemotingCommand(code=seed.code, ext_fields=seed.ext_fields, body=seed.body))
        send = broker_seeds()[0]
        for _ in range(4):
            sent = conn.call(RemotingCommand(code=send.code, ext_fields=send.ext_fields, body=send.body))
            assert sent.code == ResponseCode.SUCCESS, (sent.code, sent.remark)
    finally:
        conn.close()
