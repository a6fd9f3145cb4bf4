"""The server side of a TLS connection over a trio stream, through OpenSSL memory BIOs.

Why not trio.SSLStream: its receive_some returns at most one TLS record, and clients such as
librdkafka write a produce request as many small records (~3 KB on average for 1 KiB
messages), so every record paid a full trip through trio's scheduler and our read loop: over
SSL a gateway spent 4x the CPU per GiB produced of PLAINTEXT (bench/security_bench.py). Here
one read from the socket decrypts every record it brought.

Only what a Kafka or HTTP server needs: full duplex (one task receiving while another sends),
records sent in the order OpenSSL made them, at most 256 KiB encrypted ahead of the socket,
TLS 1.3 post-handshake messages (session tickets, key updates) flushed as they appear, no
renegotiation (the context refuses it), and a close that sends close_notify without waiting
for the peer's.
"""

from __future__ import annotations

import ssl

import trio

__all__ = ["TlsStream"]

_RECEIVE_BYTES = 65536
_SEND_BYTES = 256 * 1024  # plaintext encrypted per write to the socket


class TlsStream(trio.abc.Stream):
    def __init__(self, transport_stream: trio.abc.Stream, context: ssl.SSLContext) -> None:
        self.transport_stream = transport_stream
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._send_lock = trio.StrictFIFOLock()  # records leave in the order they were made
        self._closed = False

    def getpeercert(self, binary_form: bool = False):
        return self._tls.getpeercert(binary_form)

    async def do_handshake(self) -> None:
        """Raises ssl.SSLError when TLS refuses the client (after sending it the alert), or
        trio.BrokenResourceError when the client goes away."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError:
                await self._flush_quietly()  # the alert, so the client learns why
                raise
        await self._flush()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to ``max_bytes`` of plaintext: every record already received, else the records
        the next read from the socket brings; b"" once the client closed the connection."""
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        limit = max_bytes or _RECEIVE_BYTES
        received = False
        while True:
            chunks, size, ended = [], 0, False
            try:
                while size < limit:
                    chunk = self._tls.read(limit - size)
                    if not chunk:
                        ended = True
                        break
                    chunks.append(chunk)
                    size += len(chunk)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or a cut connection
                ended = True
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS error: {exc}") from exc
            if self._outgoing.pending:  # a reply the records asked for (a key update, an alert)
                await self._flush_quietly()  # a peer gone shows on our next read or send
            if chunks or ended:
                if not received:
                    await trio.lowlevel.checkpoint()  # every receive is a checkpoint, as in trio
                return b"".join(chunks)
            await self._fill()
            received = True

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        view = memoryview(data).cast("B")
        while True:
            # Encrypted a slice at a time, so a large fetch answer is not held twice (plaintext
            # and ciphertext) while the client reads it.
            piece, view = view[:_SEND_BYTES], view[_SEND_BYTES:]
            try:
                while piece:  # a memory BIO takes everything; the loop is for partial-write semantics
                    piece = piece[self._tls.write(piece):]
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS error: {exc}") from exc
            await self._flush()
            if not view:
                return

    async def wait_send_all_might_not_block(self) -> None:
        async with self._send_lock:
            await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            try:
                self._tls.unwrap()  # writes close_notify; we do not wait for the client's
            except ssl.SSLError:
                pass
            await self._flush_quietly()
        finally:
            await self.transport_stream.aclose()

    async def _fill(self) -> None:
        data = await self.transport_stream.receive_some(_RECEIVE_BYTES)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()  # the next read says how the connection ended

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self._outgoing.read()  # under the lock: later records wait for earlier ones
            if data:
                await self.transport_stream.send_all(data)

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
