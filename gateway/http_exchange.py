"""One HTTP/1.1 request and its answer on a trio stream, parsed by h11 (sans-io): the head,
the body as it arrives (never more than a chunk in memory), and the response. One request
per connection: the gateway's endpoints are probes, scrapes and large uploads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio

__all__ = ["HttpExchange", "HttpError", "HttpPeer"]

_RECEIVE = 64 * 1024
_MAX_HEAD = 16 * 1024


class HttpError(Exception):
    """A request the endpoint refuses, answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class HttpPeer:
    """Who is at the other end: its address, whether the connection is TLS, and the principal
    its client certificate maps to (None without one)."""

    host: str
    tls: bool
    certificate_principal: str | None


class HttpExchange:
    def __init__(self, stream: trio.abc.Stream, peer: HttpPeer, idle_s: float) -> None:
        # A body may take as long as it keeps coming, and an answer as long as the client keeps
        # reading; a client that stalls ``idle_s`` is dropped (it held a task, an upload a thread).
        self._idle_s = idle_s
        self._stream = stream
        self._connection = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        self.peer = peer
        self.method = ""
        self.path = ""
        self.query: dict[str, list[str]] = {}
        self.headers: dict[str, str] = {}
        self._body_done = False

    async def _next_event(self):
        while True:
            event = self._connection.next_event()
            if event is h11.NEED_DATA:
                data = await self._stream.receive_some(_RECEIVE)
                self._connection.receive_data(data)  # b"": the peer closed
                continue
            return event

    async def read_head(self) -> bool:
        """Read the request line and headers; False if the client closed first."""
        try:
            event = await self._next_event()
        except h11.RemoteProtocolError as exc:
            raise HttpError(400, f"bad request: {exc}") from None
        if not isinstance(event, h11.Request):
            return False
        self.method = event.method.decode()
        target = urlsplit(event.target.decode("ascii", errors="replace"))
        self.path = unquote(target.path)
        self.query = parse_qs(target.query)
        self.headers = {name.decode().lower(): value.decode("latin-1") for name, value in event.headers}
        return True

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.isdigit() else None

    async def body(self) -> AsyncIterator[bytes]:
        """The request body, chunk by chunk as it arrives."""
        while not self._body_done:
            try:
                with trio.fail_after(self._idle_s):
                    event = await self._next_event()
            except h11.RemoteProtocolError as exc:
                raise HttpError(400, f"bad request body: {exc}") from None
            except trio.TooSlowError:
                raise HttpError(408, f"no body bytes for {self._idle_s:g} s") from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._body_done = True
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                raise HttpError(400, "the client closed the connection before the body ended")

    async def json_body(self, limit: int = 1 << 20) -> dict:
        data = bytearray()
        async for chunk in self.body():
            data += chunk
            if len(data) > limit:
                raise HttpError(413, f"a JSON body is at most {limit} bytes")
        try:
            document = json.loads(bytes(data) or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from None
        except RecursionError:  # "[[[[...": deeper than Python's parser goes
            raise HttpError(400, "the body is not JSON this endpoint takes: nested too deeply") from None
        if not isinstance(document, dict):
            raise HttpError(400, "the body is not a JSON object")
        return document

    async def respond(self, status: int, body: bytes, content_type: str = "text/plain",
                      headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.respond_stream(status, _single(body), len(body), content_type, headers)

    async def respond_json(self, status: int, document: object) -> None:
        await self.respond(status, json.dumps(document).encode() + b"\n", "application/json")

    async def respond_stream(self, status: int, chunks: AsyncIterator[bytes], length: int,
                             content_type: str = "application/octet-stream",
                             headers: Iterable[tuple[str, str]] = ()) -> None:
        fields = [("Content-Type", content_type), ("Content-Length", str(length)), ("Connection", "close"),
                  *headers]
        await self._send(h11.Response(status_code=status, headers=fields))
        async for chunk in chunks:
            await self._send(h11.Data(data=chunk))
        await self._send(h11.EndOfMessage())

    async def _send(self, event) -> None:
        data = self._connection.send(event)
        if data:
            with trio.move_on_after(self._idle_s) as waited:
                await self._stream.send_all(data)
            if waited.cancelled_caught:
                raise trio.BrokenResourceError(f"the client read nothing for {self._idle_s:g} s")

    @property
    def responded(self) -> bool:
        return self._connection.our_state is not h11.SEND_RESPONSE


async def _single(body: bytes) -> AsyncIterator[bytes]:
    if body:
        yield body
