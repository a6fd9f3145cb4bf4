"""A Faust app (faust-streaming) in exactly-once mode (processing_guarantee="exactly_once"):
counts words into a table whose changelog is written in the same transactions as the
input offsets. Each word takes a couple of milliseconds, so a test can kill it -9
mid-stream. On a "__done__" event it writes the table to $OUT (JSON).

Faust 0.15's exactly-once mode is not exact across a kill, whatever the broker: it commits
a transaction without first flushing the producer buffer where table changelog writes
wait (``send_soon``; its non-transactional commit does flush it), and agents keep
processing while a commit is in flight, so a changelog write can land in a transaction
other than the one committing its input offset (docs/compatibility.md has the numbers).
"""

import json
import os
import time
from pathlib import Path

import faust

app = faust.App("eoscount", broker=f"kafka://{os.environ['BOOTSTRAP']}", store="memory://", web_enabled=False,
                topic_partitions=1, topic_replication_factor=1, processing_guarantee="exactly_once",
                broker_commit_interval=0.5, broker_session_timeout=6, broker_heartbeat_interval=1)
words = app.topic("eos-words", value_type=bytes, value_serializer="raw", partitions=1)
counts = app.Table("eos-counts", default=int, partitions=1)
OUT = Path(os.environ["OUT"])


@app.agent(words)
async def count(stream):
    async for word in stream:
        word = word.decode()
        if word.startswith("__done__"):
            OUT.with_suffix(".tmp").write_text(json.dumps(dict(counts.items())))
            OUT.with_suffix(".tmp").rename(OUT)
            continue
        counts[word] += 1
        time.sleep(0.002)


if __name__ == "__main__":
    app.main()
