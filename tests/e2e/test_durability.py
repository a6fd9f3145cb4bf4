"""Acknowledged means durable: kill -9 the gateway mid-produce (acks=all) and check,
after a restart, that every acknowledged message is present once, at its offset."""

import json
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCER = r"""
import json, os, sys
from confluent_kafka import Producer
bootstrap, out_path = sys.argv[1], sys.argv[2]
prefix = sys.argv[3] if len(sys.argv) > 3 else "message"
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0  # a trickle: small segments
out = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # one write() per line: never torn
def report(err, msg):
    if err is None:
        os.write(out, (json.dumps([msg.partition(), msg.offset(), msg.value().decode()]) + "\n").encode())
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                     "message.timeout.ms": 60000, "compression.type": "lz4"})
i = 0
while True:
    try:
        producer.produce("durable", key=str(i % 17).encode(), value=f"{prefix}-{i}".encode(), on_delivery=report)
        i += 1
        if pause:
            producer.poll(pause)
    except BufferError:
        producer.poll(0.01)
    if i % 100 == 0:
        producer.poll(0)
"""


def _acked(path):
    """The complete lines written so far. One read: iterating a file being appended to can
    return a line's tail on its own (a write crossing a page shows its first part first)."""
    with open(path) as handle:
        text = handle.read()
    return [json.loads(line) for line in text.split("\n")[:-1]]  # the last piece is partial or empty


def verify_stored(gateway, acked) -> None:
    """Every acknowledged message is stored once, at its offset, and offsets are dense."""
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "d", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition("durable", p), timeout=10)[1] for p in range(3)}
    consumer.assign([TopicPartition("durable", p, 0) for p in range(3)])
    stored = {}
    while len(stored) < sum(ends.values()):
        message = consumer.poll(10)
        assert message is not None and not message.error()
        stored[(message.partition(), message.offset())] = message.value().decode()
    consumer.close()
    for partition, offset, value in acked:
        assert stored.get((partition, offset)) == value, f"acked {value} at {partition}/{offset} is missing"
    values = list(stored.values())
    assert len(values) == len(set(values)), "a message is stored twice"
    for partition in range(3):  # offsets dense: nothing torn is served
        assert sorted(o for p, o in stored if p == partition) == list(range(ends[partition]))


def kill_mid_produce_and_verify(gateway, tmp_path, acks_wanted: int) -> None:
    """Produce (acks=all) from another process, kill -9 the gateway mid-produce, restart it,
    and check every acknowledged message is stored once at its offset."""
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("durable", num_partitions=3, replication_factor=1)])["durable"].result(10)
    acks_file = tmp_path / "acks.jsonl"
    acks_file.touch()
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, gateway.bootstrap, str(acks_file)])
    try:
        deadline = time.monotonic() + 60
        while len(_acked(acks_file)) < acks_wanted and time.monotonic() < deadline:
            time.sleep(0.05)
        gateway.process.send_signal(signal.SIGKILL)  # mid-produce: requests are in flight
        gateway.process.wait()
        time.sleep(0.5)
    finally:
        producer.kill()  # no retries may reach the restarted gateway
        producer.wait()
    acked = _acked(acks_file)
    assert len(acked) >= acks_wanted

    gateway.start()
    verify_stored(gateway, acked)
    # Produce keeps working on the recovered partitions.
    tail = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    tail.produce("durable", value=b"after", partition=0)
    assert tail.flush(10) == 0


def test_kill_9_mid_produce_loses_nothing_acknowledged(gateway, tmp_path):
    kill_mid_produce_and_verify(gateway, tmp_path, 20_000)


def _kill_in_rounds(gateway, acks_file, rounds: int, produce_args: list[str], before_kill) -> list:
    """``rounds`` times: (re)start the gateway, produce from another process, wait with
    ``before_kill(round_number)``, kill -9 the gateway; the acknowledged messages."""
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("durable", num_partitions=3, replication_factor=1)])["durable"].result(10)
    acks_file.touch()
    for round_number in range(rounds):
        if round_number:
            gateway.start()
        producer = subprocess.Popen([sys.executable, "-c", PRODUCER, gateway.bootstrap, str(acks_file),
                                     f"round{round_number}", *produce_args])
        try:
            before_kill(round_number)
            gateway.process.send_signal(signal.SIGKILL)
            gateway.process.wait()
        finally:
            producer.kill()
            producer.wait()
    return _acked(acks_file)


def test_kill_9_during_compaction_loses_and_duplicates_nothing(tmp_path):
    """Several rounds of: produce, compaction running (every second, small segments), kill -9
    at an arbitrary moment. Every acknowledged message is stored once, at its offset; the
    log objects compacted are deleted."""
    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "100", "--segment-bytes", "65536",
                             "--max-message-bytes", "65536").start()
    acks_file = tmp_path / "acks.jsonl"

    def produce_some(round_number):
        wanted = len(_acked(acks_file)) + 8000
        deadline = time.monotonic() + 60
        while len(_acked(acks_file)) < wanted and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3 * round_number)  # a different moment of the compaction cycle each round

    try:
        acked = _kill_in_rounds(gateway, acks_file, 4, [], produce_some)
        assert len(acked) >= 32_000
        gateway.start()
        verify_stored(gateway, acked)
        segments = list((gateway.data_dir / "kafscale" / "durable").glob("*/*.kfs"))
        assert len(segments) >= 3, "compaction wrote segments"
    finally:
        gateway.kill()


def test_kill_9_during_merging_loses_and_duplicates_nothing(tmp_path):
    """A trickle makes a small segment per compaction (every 20 ms) and the gateway merges
    runs of them; kill -9 at several moments. Every acknowledged message is stored once, at
    its offset, and the merges go on until no run is left."""
    from kafscale.gateway.log.merging import merge_run
    from kafscale.protocol.log_view import SEGMENT, Piece
    from kafscale.protocol.segment import read_segment
    from tests.support.gateway_process import GatewayProcess

    segment_bytes = 256 * 1024
    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "20", "--segment-bytes",
                             str(segment_bytes), "--max-message-bytes", str(segment_bytes)).start()
    merged_seen = []

    def trickle(round_number):
        deadline = time.monotonic() + 30
        while gateway.metric("kafscale_segments_merged") < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        merged_seen.append(gateway.metric("kafscale_segments_merged"))
        time.sleep(0.7 * round_number)  # a different moment of the merge cycle each round

    try:
        acked = _kill_in_rounds(gateway, tmp_path / "acks.jsonl", 3, ["0.001"], trickle)
        assert len(acked) >= 1000
        assert max(merged_seen) >= 4, "the trickle's small segments were merged while it ran"
        gateway.start()
        verify_stored(gateway, acked)

        def mergeable() -> list[int]:
            left = []
            for partition in range(3):
                pieces = []
                try:
                    for path in sorted((gateway.data_dir / "kafscale" / "durable" / str(partition)).glob("*.kfs")):
                        data = path.read_bytes()
                        segment = read_segment(data)
                        pieces.append(Piece(SEGMENT, path.name, segment.base_offset, segment.last_offset, len(data)))
                except FileNotFoundError:  # merged away since the listing: this partition is still merging
                    left.append(partition)
                    continue
                if merge_run(pieces, 0, segment_bytes) is not None:
                    left.append(partition)
            return left

        deadline = time.monotonic() + 60
        while mergeable() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert mergeable() == [], "merging converges: no run of small segments is left"
        verify_stored(gateway, acked)
    finally:
        gateway.kill()
