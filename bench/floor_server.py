"""The least a Python Kafka server on trio does per Produce request: read the frame and
answer it, one task per connection, nothing decoded but the correlation id and nothing
stored. What it costs per request is the floor under the gateway's cost in this language
and event loop (bench/requests_bench.py measures both, beside Tansu).

    python -m bench.floor_server PORT
"""

from __future__ import annotations

import struct
import sys

import trio

from kafscale.protocol.framing import FrameDecoder, encode_frame
from kafscale.protocol.produce_response import (
    ProduceAnswer,
    ProducePartition,
    ProduceTopic,
    encode_produce_response,
)

_CORRELATION = struct.Struct(">i")
_CORRELATION_AT = 4  # in a request payload, after api_key (int16) and api_version (int16)


def canned_answer(topic: str) -> bytes:
    """A Produce v9 answer (one partition, no error) framed, its correlation id to be patched."""
    answer = ProduceAnswer([ProduceTopic(topic, [ProducePartition(0, 0, base_offset=0)])])
    return bytes(encode_frame(encode_produce_response(0, 9, answer)))


async def answer_every_frame(stream: trio.SocketStream, canned: bytes) -> None:
    decoder = FrameDecoder()
    answer = bytearray(canned)
    async with stream:
        while data := await stream.receive_some(1 << 16):
            decoder.feed(data)
            answers = []
            while (payload := decoder.next_frame()) is not None:
                answer[4:8] = payload[_CORRELATION_AT:_CORRELATION_AT + _CORRELATION.size]
                answers.append(bytes(answer))
            if answers:
                await stream.send_all(b"".join(answers))


def main() -> None:
    canned = canned_answer("counted")
    trio.run(trio.serve_tcp, lambda stream: answer_every_frame(stream, canned), int(sys.argv[1]))


if __name__ == "__main__":
    main()
