"""A consume-transform-produce worker with exactly-once semantics (confluent-kafka): reads
"in" read_committed, writes one upper-cased record to "out" per input, and commits its
input offsets in the same transaction (send_offsets_to_transaction). Run as a process the
tests kill -9 midway; ``--die-after N`` makes it exit abruptly inside its N-th transaction."""

import argparse
import os

from confluent_kafka import Consumer, Producer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("--die-after", type=int, default=0)
    parser.add_argument("--idle-exit", type=float, default=8.0)
    args = parser.parse_args()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "worker", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": "worker-1",
                         "transaction.timeout.ms": 10_000})
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    transactions = 0
    idle = 0.0
    while idle < args.idle_exit:
        messages = consumer.consume(20, 1.0)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            idle += 1.0
            continue
        idle = 0.0
        producer.begin_transaction()
        for message in messages:
            producer.produce("out", key=message.key(), value=message.value().upper())
        transactions += 1
        if transactions == args.die_after:
            producer.flush(10)  # the outputs are stored, but never committed
            os._exit(9)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    consumer.close()


if __name__ == "__main__":
    main()
