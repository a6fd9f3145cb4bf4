"""The server-side assignors of the consumer protocol (KIP-848): ``uniform`` and ``range``.

Pure functions: the members' subscriptions, the subscribed topics' partition counts and the
current target assignment in, the new target assignment out. Both are sticky where balance
allows, so a member joining or leaving moves as few partitions as it must.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "Assignment", "uniform", "range_assignor"]

Assignment = dict[str, frozenset[int]]  # topic → partitions


def _flatten(assignment: Assignment) -> set[tuple[str, int]]:
    return {(topic, p) for topic, partitions in assignment.items() for p in partitions}


def _group(pairs: set[tuple[str, int]]) -> Assignment:
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
        for topic, partition in sorted(_flatten(current.get(member, {}))):
            key = (topic, partition)
            if topic in subscriptions[member] and partition < partitions.get(topic, 0) and key not in taken:
                owned[member].add(key)
                taken.add(key)
    eligible: dict[str, list[str]] = {}
    for member in members:
        for topic in subscriptions[member]:
            eligible.setdefault(topic, []).append(member)
    wanted = sorted((topic, p) for topic in eligible for p in range(partitions.get(topic, 0)))
    # A quota per member when everyone subscribes alike; otherwise balance by moving.
    for key in wanted:
        if key not in taken:
            target = min(eligible[key[0]], key=lambda m: (len(owned[m]), m))
            owned[target].add(key)
            taken.add(key)
    for _ in range(len(wanted) + 1):  # each move lowers the spread; bounded all the same
        moved = False
        for heavy in sorted(members, key=lambda m: -len(owned[m])):
            for light in sorted(members, key=lambda m: len(owned[m])):
                if len(owned[heavy]) - len(owned[light]) <= 1:
                    break
                movable = sorted(k for k in owned[heavy] if k[0] in subscriptions[light])
                if movable:
                    key = movable[-1]
                    owned[heavy].discard(key)
                    owned[light].add(key)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {member: _group(owned[member]) for member in members}


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
