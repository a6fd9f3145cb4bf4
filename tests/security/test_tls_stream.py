"""The gateway's TLS stream against trio's own TLS client, in memory and over sockets: data
both ways at once, many small records read in one go, close_notify, a client that vanishes,
a handshake refused with an alert."""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from devkit.certs import CertificateAuthority
from kafscale.gateway.security.tls_stream import TlsStream


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls-stream"))
    issued = ca.issue("server", "localhost", server=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(issued.cert), str(issued.key))
    client = ssl.create_default_context(cafile=str(ca.cert_path))
    return server, client


def _pair(contexts) -> tuple[TlsStream, trio.SSLStream]:
    server_context, client_context = contexts
    client_end, server_end = trio.testing.memory_stream_pair()
    return TlsStream(server_end, server_context), trio.SSLStream(client_end, client_context, server_hostname="localhost")


async def _handshake(server: TlsStream, client: trio.SSLStream) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)


async def _receive_exactly(stream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(65536)
        assert chunk, "the stream ended early"
        data += chunk
    return bytes(data)


@settings(max_examples=25, deadline=None)
@given(requests=st.lists(st.binary(min_size=1, max_size=40_000), min_size=1, max_size=8),
       response_size=st.integers(1, 300_000))
def test_data_crosses_both_ways_at_once(contexts, requests, response_size):
    async def main():
        server, client = _pair(contexts)
        response = bytes(range(256)) * (response_size // 256) + b"z" * (response_size % 256)
        got: dict[str, bytes] = {}
        await _handshake(server, client)
        async with trio.open_nursery() as nursery:
            async def client_side():
                for request in requests:
                    await client.send_all(request)
                got["client"] = await _receive_exactly(client, len(response))

            async def server_side():
                got["server"] = await _receive_exactly(server, sum(map(len, requests)))

            nursery.start_soon(client_side)
            nursery.start_soon(server_side)
            await server.send_all(response)  # while the client is still sending
        assert got == {"client": response, "server": b"".join(requests)}
        await client.aclose()
        assert await server.receive_some() == b""  # close_notify
        await server.aclose()

    trio.run(main)


async def test_one_receive_takes_every_small_record_the_socket_brought(contexts):
    server_context, client_context = contexts
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    records = [bytes([i % 256]) * 1000 for i in range(100)]  # 100 records of 1000 bytes (fits socket buffers)
    all_sent = trio.Event()
    async with trio.open_nursery() as nursery:
        async def client():
            stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), client_context,
                                    server_hostname="localhost")
            for record in records:
                await stream.send_all(record)
            all_sent.set()
            assert await stream.receive_some() == b"ok"
            await stream.aclose()

        nursery.start_soon(client)
        server = TlsStream(await listeners[0].accept(), server_context)
        await server.do_handshake()
        await all_sent.wait()  # on loopback, what was sent is in our receive buffer
        reads = []
        while sum(map(len, reads)) < 100_000:
            reads.append(await server.receive_some(65536))
        await server.send_all(b"ok")
        assert await server.receive_some() == b""
        await server.aclose()
    assert b"".join(reads) == b"".join(records)
    assert len(reads) <= 4, f"{len(reads)} reads for 100 KB: records were read one at a time"
    for listener in listeners:
        await listener.aclose()


class _RecordingStream(trio.abc.Stream):
    """A transport that notes the size of every write."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner, self.writes = inner, []

    async def send_all(self, data) -> None:
        self.writes.append(len(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_large_send_is_encrypted_a_slice_at_a_time(contexts):
    """Ciphertext waiting for the socket stays bounded: a 5 MB answer is not encrypted whole."""
    server_context, client_context = contexts
    client_end, server_end = trio.testing.memory_stream_pair()
    transport = _RecordingStream(server_end)
    server = TlsStream(transport, server_context)
    client = trio.SSLStream(client_end, client_context, server_hostname="localhost")
    await _handshake(server, client)
    answer = bytes(range(256)) * 20_000
    got = {}

    async def read_it():
        got["client"] = await _receive_exactly(client, len(answer))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_it)
        await server.send_all(answer)
    assert got["client"] == answer
    assert max(transport.writes) <= 256 * 1024 + 8 * 1024, max(transport.writes)  # a slice and its record overhead


async def test_a_client_that_vanishes_ends_the_stream(contexts):
    server, client = _pair(contexts)
    await _handshake(server, client)
    await client.send_all(b"partial")
    assert await server.receive_some() == b"partial"
    await client.transport_stream.aclose()  # no close_notify
    assert await server.receive_some() == b""
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"x")
    await server.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await server.receive_some()


async def test_a_refused_handshake_raises_after_telling_the_client(tmp_path):
    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("server", "localhost", server=True)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(issued.cert), str(issued.key))
    server_context.load_verify_locations(cafile=str(ca.cert_path))
    server_context.verify_mode = ssl.CERT_REQUIRED  # and the client has no certificate
    client_end, server_end = trio.testing.memory_stream_pair()
    server = TlsStream(server_end, server_context)
    client = trio.SSLStream(client_end, ssl.create_default_context(cafile=str(ca.cert_path)),
                            server_hostname="localhost")
    failures: dict[str, BaseException] = {}

    async def capture(name, operation):
        try:
            await operation()
        except (ssl.SSLError, trio.BrokenResourceError) as exc:
            failures[name] = exc

    async def client_side():
        await client.do_handshake()  # TLS 1.3: done before the server has checked
        await client.receive_some()  # the alert arrives here

    async with trio.open_nursery() as nursery:
        nursery.start_soon(capture, "server", server.do_handshake)
        nursery.start_soon(capture, "client", client_side)
    assert isinstance(failures["server"], ssl.SSLError)
    assert "CERTIFICATE_REQUIRED" in str(failures["client"].__cause__).upper()


async def test_the_http_endpoint_over_tls(tmp_path):
    """http_ssl: /metrics and /readyz through the same TLS stream, verified by a stock client."""
    import httpx

    from kafscale.gateway.config import GatewayConfig
    from kafscale.gateway.server import serve

    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("server", "localhost", server=True)
    config = GatewayConfig.of(listeners="PLAINTEXT://127.0.0.1:0", http_port=0, http_ssl=True, storage="memory://",
                           ssl_certfile=str(issued.cert), ssl_keyfile=str(issued.key)).validate()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve, config, shutdown)
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca.cert_path))) as client:
            ready = await client.get(f"https://127.0.0.1:{running.http_port}/readyz")
            metrics = await client.get(f"https://127.0.0.1:{running.http_port}/metrics")
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets nothing
            async with httpx.AsyncClient() as plain:
                await plain.get(f"http://127.0.0.1:{running.http_port}/readyz", timeout=5)
        shutdown.set()
    assert ready.status_code == 200
    assert metrics.status_code == 200 and "kafscale_connections" in metrics.text
