"""Handlers called directly on the real wiring (tests/support/direct.py), with a clock the
test moves: the time of day every part reads is the one the gateway was given."""

from devkit.wire_client import fetch, produce
from kafscale.gateway.clock import ManualClock
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.direct import direct_gateway

NOW_MS = 1_800_000_000_000  # far from the machine's own time: only the given clock can produce it


def _create(name: str, **configs: str):
    return build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=1, replication_factor=1, assignments=[],
                     configs=[dict(name=k, value=v) for k, v in configs.items()])],
        timeout_ms=5000, validate_only=False))


def _partition(answer):
    return answer.responses[0].partition_responses[0]


async def test_log_append_time_is_the_given_clocks():
    clock = ManualClock(NOW_MS)
    async with direct_gateway(clock) as gateway:
        created = await gateway.call(19, 5, _create("stamped", **{"message.timestamp.type": "LogAppendTime"}))
        assert created.topics[0].error_code == ErrorCode.none
        clock.advance(1234)
        answer = await gateway.call(0, 9, produce("stamped", build_batch([(b"k", b"v")], base_timestamp=5)))
        assert _partition(answer).error_code == ErrorCode.none
        assert _partition(answer).log_append_time.timestamp() * 1000 == NOW_MS + 1234
        fetched = await gateway.call(1, 12, fetch("stamped", 0, 0))
        assert (NOW_MS + 1234).to_bytes(8, "big") in bytes(fetched.responses[0].partitions[0].records)


async def test_create_time_bounds_are_checked_against_the_given_clock():
    clock = ManualClock(NOW_MS)
    async with direct_gateway(clock) as gateway:
        await gateway.call(19, 5, _create("bounded", **{"message.timestamp.before.max.ms": "60000"}))
        fresh = await gateway.call(0, 9, produce("bounded", build_batch([(b"k", b"a")], base_timestamp=NOW_MS - 1000)))
        assert _partition(fresh).error_code == ErrorCode.none
        clock.advance(120_000)  # the same timestamp is now two minutes old
        stale = await gateway.call(0, 9, produce("bounded", build_batch([(b"k", b"b")], base_timestamp=NOW_MS - 1000)))
        assert _partition(stale).error_code == ErrorCode.invalid_timestamp
