"""A stateful Faust app (faust-streaming): counts words into a table whose changelog is a
compacted topic. Its store is memory://, so each start restores the whole table from
the changelog. On a "__done__" event it writes the table to $OUT (JSON)."""

import json
import os
from pathlib import Path

import faust

app = faust.App("wordcount", broker=f"kafka://{os.environ['BOOTSTRAP']}", store="memory://", web_enabled=False,
                topic_partitions=1, topic_replication_factor=1, producer_acks=-1)
words = app.topic("words", value_type=bytes, value_serializer="raw", partitions=1)
counts = app.Table("counts", default=int, partitions=1)
OUT = Path(os.environ["OUT"])


@app.agent(words)
async def count(stream):
    async for word in stream:
        word = word.decode()
        if word.startswith("__done__"):
            OUT.with_suffix(".tmp").write_text(json.dumps(dict(counts.items())))
            OUT.with_suffix(".tmp").rename(OUT)
        else:
            counts[word] += 1


if __name__ == "__main__":
    app.main()
