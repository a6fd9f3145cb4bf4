"""A raw Kafka wire client for in-process server tests: frames and kio bodies, no client
library in between, so tests can send what no well-behaved client would."""

from __future__ import annotations

import datetime

import trio
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records

from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.server import serve
from kafscale.protocol import FrameDecoder, encode_frame
from kafscale.protocol.entities import build
from kafscale.protocol.messages import RequestHeader, decode_response, encode_request, request_class


def config(**overrides) -> GatewayConfig:
    return GatewayConfig.of(**{"port": 0, "http_port": -1, "storage": "memory://", **overrides})


# Client streams open to each in-process gateway, closed when that gateway's nursery ends.
# (Not an autouse fixture: pytest-trio runs only the async fixtures a test names, issue #123.)
_clients_of: dict[int, list[trio.SocketStream]] = {}


async def start_gateway(nursery: trio.Nursery, **overrides):
    """An in-process gateway on a free port: (its ``Running``, the event that stops it).
    Clients connected to it close when ``nursery`` ends, whatever the test did."""
    shutdown = trio.Event()
    running = await nursery.start(serve, config(**overrides), shutdown)
    _clients_of[running.port] = []
    nursery.start_soon(_close_clients_at_the_end, running.port)
    return running, shutdown


async def _close_clients_at_the_end(port: int) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):  # aclose() checkpoints after closing
            for stream in _clients_of.pop(port, []):
                await stream.aclose()


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int) -> Client:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        _clients_of.get(port, []).append(client.stream)
        return client

    async def send(self, api_key, version, body, correlation_id):
        frame = encode_request(RequestHeader(api_key, version, correlation_id, "t"), body)
        await self.stream.send_all(encode_frame(frame))

    async def receive(self):
        """The next response frame, or None once the server closed the connection."""
        while (frame := self.decoder.next_frame()) is None:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.decoder.feed(data)
        return frame

    async def call(self, api_key, version, body, correlation_id=1):
        await self.send(api_key, version, body, correlation_id)
        payload = await self.receive()
        assert payload is not None, "the server closed the connection instead of answering"
        return decode_response(api_key, version, payload)[1]


def produce(topic, records, acks=-1, partition=0):
    return ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=partition, records=Records(records)),)),))


def fetch(topic, offset, max_wait_ms, max_bytes=1 << 20, partition_max_bytes=1 << 20):
    return build(request_class(1, 12), dict(
        replica_id=-1, max_wait=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[dict(topic=topic, partitions=[dict(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=partition_max_bytes)])], forgotten_topics_data=[], rack_id=""))


async def create_topic(client: Client, name: str, **configs: str) -> None:
    """CreateTopics v5 of one partition; ``configs`` by name with '_' for '.'
    (``cleanup_policy="compact"``). Asserts it was created."""
    body = await client.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=1, replication_factor=1, assignments=[],
                     configs=[dict(name=k.replace("_", "."), value=v) for k, v in configs.items()])],
        timeout=5000, validate_only=False)))
    assert body.topics[0].error_code == 0, body.topics[0].error_message
