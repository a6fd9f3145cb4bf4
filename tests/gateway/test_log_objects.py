"""The compaction backlog LogObjects keeps as objects come and go, against a walk over
every directory (what it was computed as before)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.gateway.log.damage import DamageReport
from kafscale.gateway.log.log_objects import LogObjects
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol.log_object import KIND_DATA, KIND_SEAL, LogEntry, LogObjectDirectory
from kafscale.storage_backends import MemoryBackend


def _directory(number: int, kind: int, created_ms: int, entries: int) -> LogObjectDirectory:
    key = f"ns/~log/{number % 3}-abc/{number:020d}.kfl"
    return LogObjectDirectory(key, number, kind, created_ms, tuple(
        LogEntry(key, "t", p, 0, 0, 0, 1, 1, 1, 0, 0) for p in range(entries)))


def _walked(objects: LogObjects) -> tuple[int, int, int | None]:
    data = [d for d in objects.directories.values() if not d.is_seal and d.entries]
    return (len(data), sum(objects.sizes.get(d.key, 0) for d in data),
            min((d.created_ms for d in data), default=None))


_steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40), st.sampled_from([KIND_DATA, KIND_DATA, KIND_SEAL]),
              st.integers(0, 10_000), st.integers(0, 2), st.integers(0, 5000)),
    st.tuples(st.just("forget"), st.integers(0, 40))), max_size=300)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_backlog_is_what_a_walk_over_every_directory_finds(steps):
    objects = LogObjects(AsyncStore(MemoryBackend(), 1), "ns", DamageReport())
    for step in steps:
        if step[0] == "add":
            _, number, kind, created_ms, entries, size = step
            objects.add(_directory(number, kind, created_ms, entries), size)
        else:
            objects.forget(_directory(step[1], KIND_DATA, 0, 0).key)
        assert objects.backlog == _walked(objects)


def test_an_old_object_that_stays_does_not_let_stale_entries_pile_up():
    objects = LogObjects(AsyncStore(MemoryBackend(), 1), "ns", DamageReport())
    objects.add(_directory(0, KIND_DATA, 1, 1), 10)  # never compacted
    for number in range(1, 5000):
        objects.add(_directory(number, KIND_DATA, 1000 + number, 1), 10)
        objects.forget(_directory(number, KIND_DATA, 0, 0).key)
    assert objects.backlog == (1, 10, 1)
    assert len(objects._created) <= 2 * 1 + 64 + 1
