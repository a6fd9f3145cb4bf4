"""The consume-transform-produce worker of txn_worker.py with aiokafka (the client Faust
uses): reads "in" read_committed, writes one upper-cased record to "out" per input and
commits its input offsets in the same transaction. ``--die-after N`` exits abruptly
inside its N-th transaction, its outputs stored but not committed."""

import argparse
import asyncio
import os

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


async def run(bootstrap: str, die_after: int, idle_exit: float) -> None:
    consumer = AIOKafkaConsumer("in", bootstrap_servers=bootstrap, group_id="worker", enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                session_timeout_ms=6000, heartbeat_interval_ms=1000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="worker-1",
                                transaction_timeout_ms=10_000)
    await producer.start()
    await consumer.start()
    transactions = 0
    idle = 0.0
    try:
        while idle < idle_exit:
            batches = await consumer.getmany(timeout_ms=1000, max_records=20)
            if not batches:
                idle += 1.0
                continue
            idle = 0.0
            async with producer.transaction():
                offsets = {}
                for tp, messages in batches.items():
                    for message in messages:
                        await producer.send("out", key=message.key, value=message.value.upper())
                    offsets[tp] = messages[-1].offset + 1
                transactions += 1
                if transactions == die_after:
                    await producer.flush()
                    os._exit(9)
                await producer.send_offsets_to_transaction(offsets, "worker")
    finally:
        await consumer.stop()
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("--die-after", type=int, default=0)
    parser.add_argument("--idle-exit", type=float, default=8.0)
    args = parser.parse_args()
    asyncio.run(run(args.bootstrap, args.die_after, args.idle_exit))


if __name__ == "__main__":
    main()
