"""The cleaner under kill -9: several rounds of produce (updates and tombstones), the
cleaner rewriting segments every 50 ms while a consumer reads the whole log again and
again, then kill -9 at an arbitrary moment and a restart. At every read, during cleaning
and after each restart, each key's newest acknowledged record is what a consumer finds
last for it: never missing, never an older value, a deleted key never back."""

import random
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess

KEYS = 300


def _read(bootstrap: str) -> dict[bytes, tuple[int, bytes | None]]:
    """Each key's last record in the log, as a consumer reads it from the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("cleaned", 0, 0)])
    last: dict[bytes, tuple[int, bytes | None]] = {}
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    return last
                raise KafkaException(message.error())
            last[message.key()] = (message.offset(), message.value())
    finally:
        consumer.close()


def _check(found: dict, acked: dict, when: str) -> None:
    for key, (offset, value) in acked.items():
        if value is None:  # deleted: its tombstone, or nothing once delete.retention.ms passed
            assert found.get(key, (offset, None)) == (offset, None), (when, key, found.get(key), offset)
        else:
            assert found.get(key) == (offset, value), (when, key, found.get(key), (offset, value))
    assert set(found) <= set(acked), when


def test_kill_9_while_cleaning_never_loses_or_resurrects_a_keys_newest_record(tmp_path):
    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "50", "--cleaner-backoff-ms", "50",
                             "--segment-bytes", "65536", "--max-message-bytes", "65536").start()
    rng = random.Random(9)
    acked: dict[bytes, tuple[int, bytes | None]] = {}
    cleaned_while_read = 0
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("cleaned", 1, 1, config={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0"})])["cleaned"].result(10)
        for round_number in range(5):
            producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 5,
                                 "enable.idempotence": True, "batch.size": 32768})

            def remember(err, message):
                assert err is None, err
                if message.key() not in acked or acked[message.key()][0] < message.offset():
                    acked[message.key()] = (message.offset(), message.value())

            for i in range(12_000):
                key = b"k%d" % rng.randrange(KEYS)
                value = None if rng.random() < 0.1 else b"r%d-%d" % (round_number, i)
                producer.produce("cleaned", key=key, value=value, on_delivery=remember)
                if i % 1000 == 0:
                    producer.poll(0)
            assert producer.flush(30) == 0
            del producer
            # Read while the cleaner runs, then kill -9 at an arbitrary moment.
            kill_at = time.monotonic() + rng.uniform(0.2, 2.0)
            before = gateway.metric("kafscale_cleaner_segments_rewritten")
            while time.monotonic() < kill_at:
                _check(_read(gateway.bootstrap), acked, f"round {round_number}, while cleaning")
            cleaned_while_read += gateway.metric("kafscale_cleaner_segments_rewritten") > before
            gateway.kill()
            gateway.start()
            _check(_read(gateway.bootstrap), acked, f"round {round_number}, after kill -9")
        assert cleaned_while_read >= 3, "the cleaner rewrote segments while consumers read, in most rounds"
        # And the cleaning finishes: only each key's newest record is left (deleted keys gone).
        deadline = time.monotonic() + 60
        live = {key: entry for key, entry in acked.items() if entry[1] is not None}
        while _read(gateway.bootstrap) != live and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _read(gateway.bootstrap) == live
    finally:
        gateway.kill()
