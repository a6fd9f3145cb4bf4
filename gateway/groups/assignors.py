"""The server-side assignors of the consumer protocol (KIP-848): ``uniform`` and ``range``.

Pure functions: the members' subscriptions, the subscribed topics' partition counts and the
current target assignment in, the new target assignment out. Both are sticky where balance
allows, so a member joining or leaving moves as few partitions as it must.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "Assignment", "pairs_of", "assignment_of", "uniform", "range_assignor"]

Assignment = dict[str, frozenset[int]]  # topic → partitions


def pairs_of(assignment: Assignment) -> set[tuple[str, int]]:
    return {(topic, p) for topic, partitions in assignment.items() for p in partitions}


def assignment_of(pairs: set[tuple[str, int]]) -> Assignment:
    grouped: dict[str, set[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, set()).add(partition)
    return {topic: frozenset(parts) for topic, parts in grouped.items()}


def uniform(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Every subscribed partition to one member, counts as even as the subscriptions allow,
    each member keeping what it has unless the balance needs it elsewhere."""
    members = sorted(subscriptions)
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    taken: set[tuple[str, int]] = set()
    for member in members:  # keep what is still valid and not claimed twice
        for topic, partition in sorted(pairs_of(current.get(member, {}))):
            key = (topic, partition)
            if topic in subscriptions[member] and partition < partitions.get(topic, 0) and key not in taken:
                owned[member].add(key)
                taken.add(key)
    if len(set(subscriptions.values())) <= 1:
        _balance_alike(members, owned, taken, subscriptions, partitions)
    else:
        _balance_mixed(members, owned, taken, subscriptions, partitions)
    return {member: assignment_of(owned[member]) for member in members}


def _balance_alike(members: list[str], owned: dict[str, set[tuple[str, int]]], taken: set[tuple[str, int]],
                   subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int]) -> None:
    """Everyone subscribes alike: quotas of floor(P/M), the members holding most keeping one
    more where P does not divide; what is over a quota goes to those under theirs."""
    if not members:
        return
    topics = next(iter(subscriptions.values()))
    wanted = sorted((t, p) for t in topics for p in range(partitions.get(t, 0)))
    share, extra = divmod(len(wanted), len(members))
    by_holding = sorted(members, key=lambda m: (-len(owned[m]), m))
    quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    pool = sorted(set(wanted) - taken)
    for member in members:
        surplus = len(owned[member]) - quota[member]
        if surplus > 0:
            released = sorted(owned[member])[-surplus:]
            owned[member].difference_update(released)
            pool.extend(released)
    pool.sort(reverse=True)
    for member in members:
        while len(owned[member]) < quota[member] and pool:
            owned[member].add(pool.pop())


def _balance_mixed(members: list[str], owned: dict[str, set[tuple[str, int]]], taken: set[tuple[str, int]],
                   subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int]) -> None:
    """Subscriptions differ: each unassigned partition to its least-loaded eligible member,
    then single moves from the most to the least loaded while one narrows the spread."""
    eligible: dict[str, list[str]] = {}
    for member in members:
        for topic in subscriptions[member]:
            eligible.setdefault(topic, []).append(member)
    wanted = sorted((topic, p) for topic in eligible for p in range(partitions.get(topic, 0)))
    for key in wanted:
        if key not in taken:
            target = min(eligible[key[0]], key=lambda m: (len(owned[m]), m))
            owned[target].add(key)
            taken.add(key)
    for _ in range(len(wanted) + 1):  # each move narrows the spread; bounded all the same
        ranked = sorted(members, key=lambda m: len(owned[m]))
        move = None
        for heavy in reversed(ranked):
            for light in ranked:
                if len(owned[heavy]) - len(owned[light]) <= 1:
                    break
                movable = [k for k in owned[heavy] if k[0] in subscriptions[light]]
                if movable:
                    move = heavy, light, max(movable)
                    break
            if move:
                break
        if move is None:
            return
        heavy, light, key = move
        owned[heavy].discard(key)
        owned[light].add(key)


def range_assignor(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, its partitions cut into contiguous ranges over the members subscribed to it
    in member-id order (the first ones one more when it does not divide): topics with equal
    partition counts are co-partitioned, partition i of each with the same member."""
    result: dict[str, dict[str, frozenset[int]]] = {m: {} for m in subscriptions}
    topics = sorted({t for subscribed in subscriptions.values() for t in subscribed})
    for topic in topics:
        count = partitions.get(topic, 0)
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if not count or not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = share + (1 if index < extra else 0)
            if size:
                result[member][topic] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS = {"uniform": uniform, "range": range_assignor}
DEFAULT_ASSIGNOR = "uniform"
