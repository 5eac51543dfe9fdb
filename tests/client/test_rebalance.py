"""The queue allocation strategies (pure functions): RocketMQ's averagely and consistent hash."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from cometmq.client._rebalance import allocate_averagely, allocate_consistent_hash
from cometmq.client.message import MessageQueue

queue_sets = st.lists(
    st.builds(
        MessageQueue,
        st.sampled_from(["TopicA", "TopicB", "%RETRY%G"]),
        st.sampled_from(["broker-a", "broker-b"]),
        st.integers(0, 15),
    ),
    min_size=1,
    max_size=40,
    unique=True,
)
member_sets = st.lists(
    st.from_regex(r"1[0-9]{1,2}\.0\.0\.[0-9]{1,3}@[0-9]{1,5}#[0-9]{1,9}", fullmatch=True),
    min_size=1,
    max_size=12,
    unique=True,
)


def shares(strategy, queues, members):  # type: ignore[no-untyped-def]
    return {member: strategy(queues, members, member) for member in members}


@given(queue_sets, member_sets)
def test_averagely_gives_every_queue_to_exactly_one_member_in_shares_differing_by_at_most_one(
    queues: list[MessageQueue], members: list[str]
) -> None:
    result = shares(allocate_averagely, queues, members)
    owners = Counter(q for share in result.values() for q in share)
    assert set(owners) == set(queues)
    assert set(owners.values()) == {1}
    sizes = [len(share) for share in result.values()]
    assert max(sizes) - min(sizes) <= 1


@given(queue_sets, member_sets)
def test_consistent_hash_gives_every_queue_to_exactly_one_member(
    queues: list[MessageQueue], members: list[str]
) -> None:
    owners = Counter(q for share in shares(allocate_consistent_hash, queues, members).values() for q in share)
    assert set(owners) == set(queues)
    assert set(owners.values()) == {1}


@given(queue_sets, member_sets, st.randoms(use_true_random=False))
def test_both_strategies_ignore_the_order_their_inputs_come_in(
    queues: list[MessageQueue], members: list[str], rnd: random.Random
) -> None:
    shuffled_queues, shuffled_members = list(queues), list(members)
    rnd.shuffle(shuffled_queues)
    rnd.shuffle(shuffled_members)
    for strategy in (allocate_averagely, allocate_consistent_hash):
        for member in members:
            assert strategy(queues, members, member) == strategy(shuffled_queues, shuffled_members, member)


@given(queue_sets, member_sets)
def test_a_client_outside_the_member_list_gets_nothing(
    queues: list[MessageQueue], members: list[str]
) -> None:
    assert allocate_averagely(queues, members, "not-a-member") == []
    assert allocate_consistent_hash(queues, members, "not-a-member") == []


@given(queue_sets, member_sets, st.data())
def test_consistent_hash_moves_only_the_leaving_members_queues(
    queues: list[MessageQueue], members: list[str], data: st.DataObject
) -> None:
    if len(members) < 2:
        return
    leaving = data.draw(st.sampled_from(members))
    staying = [m for m in members if m != leaving]
    for member in staying:
        before = set(allocate_consistent_hash(queues, members, member))
        after = set(allocate_consistent_hash(queues, staying, member))
        assert before <= after


def test_averagely_matches_rocketmq_for_eight_queues_and_three_members() -> None:
    # Java AllocateMessageQueueAveragely: 8 queues, 3 clients → 3, 3, 2 contiguous queues.
    queues = [MessageQueue("T", "broker-a", i) for i in range(8)]
    members = ["c2", "c0", "c1"]
    assert [q.queue_id for q in allocate_averagely(queues, members, "c0")] == [0, 1, 2]
    assert [q.queue_id for q in allocate_averagely(queues, members, "c1")] == [3, 4, 5]
    assert [q.queue_id for q in allocate_averagely(queues, members, "c2")] == [6, 7]
    # More members than queues: one each for the first, nothing for the rest.
    assert [q.queue_id for q in allocate_averagely(queues[:2], members, "c1")] == [1]
    assert allocate_averagely(queues[:2], members, "c2") == []


def test_consistent_hash_uses_rocketmqs_md5_ring() -> None:
    # The ring points are MD5("<client id>-<n>")[:4] and the queue key is Java's MessageQueue
    # toString(); with one point per member, a queue goes to the first point at or after its hash.
    import hashlib

    def h(text: str) -> int:
        return int.from_bytes(hashlib.md5(text.encode()).digest()[:4], "big")

    queues = [MessageQueue("T", "broker-a", i) for i in range(16)]
    members = ["a", "b", "c"]
    points = sorted((h(f"{m}-0"), m) for m in members)
    for queue in queues:
        key = h(f"MessageQueue [topic=T, brokerName=broker-a, queueId={queue.queue_id}]")
        owner = next((m for p, m in points if p >= key), points[0][1])
        assert queue in allocate_consistent_hash(queues, members, owner, virtual_nodes=1)
