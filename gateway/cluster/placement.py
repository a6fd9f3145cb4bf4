"""Which gateway should own each partition: even per topic, and stable when gateways come and go.

Consistent hashing with bounded loads: every gateway has ``VNODES`` points on a
hash ring; a partition starts at its own hash and walks the ring to the first
gateway that still has room. Room per topic is ⌊P/n⌋ or ⌈P/n⌉, so a topic is
always spread evenly. When a gateway joins or leaves, partitions whose walk is
unaffected keep their owner: 1.1x (3 gateways) to 2.2x (30 gateways) the minimum
of 1/n move (tests/gateway/test_placement.py), where a plain round-robin would
move nearly all of them.

Every gateway computes the same answer from the same live set; nothing is stored.
"""

from __future__ import annotations

import bisect
import hashlib
from functools import lru_cache

__all__ = ["Placement", "VNODES"]

VNODES = 64


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Placement:
    def __init__(self, brokers: list[int]) -> None:
        if not brokers:
            raise ValueError("no live gateways")
        self.brokers = sorted(brokers)
        ring = sorted((_hash(f"gateway-{b}#{i}"), b) for b in self.brokers for i in range(VNODES))
        self._points = [point for point, _ in ring]
        self._owners = [b for _, b in ring]
        # Cached per placement (a new one is made when the gateways change).
        self.topic = lru_cache(maxsize=4096)(self._topic)

    def _walk(self, key: str):
        """Gateways in ring order from ``key``'s position (each point, so repeats)."""
        start = bisect.bisect(self._points, _hash(key))
        size = len(self._owners)
        for step in range(size):
            yield self._owners[(start + step) % size]

    def _topic(self, topic: str, partitions: int) -> tuple[int, ...]:
        """The owner of each partition of ``topic``."""
        base, extra = divmod(partitions, len(self.brokers))
        room = dict.fromkeys(self.brokers, base)
        # Which gateways take one more partition of this topic: the first ``extra``
        # distinct gateways on the ring after the topic's own point.
        for broker in self._walk(topic):
            if extra == 0:
                break
            if room[broker] == base:
                room[broker] += 1
                extra -= 1
        owners = []
        for partition in range(partitions):
            for broker in self._walk(f"{topic}/{partition}"):
                if room[broker] > 0:
                    room[broker] -= 1
                    owners.append(broker)
                    break
        return tuple(owners)

    def owner(self, unit: tuple[str, int], partitions: int) -> int:
        return self.topic(unit[0], partitions)[unit[1]]
