"""A connection's answers: sent in request order, each as soon as it and all before it are ready.

An answer is sent from wherever it becomes ready, without a trip through the scheduler:
the reader that queued it (a request answered at once), a handler's task as it ends, or
the log writer as the flush a Produce waits for completes (the callback its
:class:`~.handlers.base.Completion` registers). There a frame goes out with one
non-blocking ``writev`` when the socket takes it whole. What must wait is the writer
task's (:meth:`Answers.run`): the rest of a frame the socket could not take, an answer
only awaiting builds (a transactional Produce), an answer whose deadline passed (the
connection's watchdog hands it over, see :meth:`Answers.overdue`), and every send under
TLS.

Memory: a slot's answer is charged until it is sent, then every byte returns.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from itertools import islice
from typing import Any, TypeVar

import trio

from kafscale.protocol.messages import Request
from kafscale.protocol.response_fields import Buffer

from .budget import RequestMemory
from .handlers import Handler
from .handlers.base import Completion, Settled
from .metrics import Metrics
from .wire import frame_response

__all__ = ["Answers", "Ordered", "Slot", "Stalled"]

log = logging.getLogger("kafscale.connection")

_SEND_CHUNK = 1 << 20  # under TLS a response goes out in pieces this large, each under the stall timeout
_IOV_MAX = 1024  # buffers one sendmsg may take (Linux's UIO_MAXIOV)
T = TypeVar("T")

Failure = Callable[[Handler, Request, Exception], Any]  # the error answer of a request whose handler failed


class Ordered:
    """An ordered request, run by the reader until its effects were ordered: what is left."""

    __slots__ = ("handler", "request", "completion", "deadline", "started", "timed")

    def __init__(self, handler: Handler, request: Request, completion: Completion, deadline: float,
                 started: float, timed) -> None:
        self.handler, self.request, self.completion = handler, request, completion
        self.deadline, self.started, self.timed = deadline, started, timed


class Slot:
    """A request's place in the order of answers."""

    __slots__ = ("memory", "payload", "ready", "close_after", "ordered")

    def __init__(self, memory: RequestMemory, ordered: Ordered | None = None) -> None:
        self.memory = memory
        self.payload: list[Buffer] | None = None  # the answer's frame (nothing to send: None), in pieces
        self.ready = False  # the payload is final (an ordered slot's is built when its completion settles)
        self.close_after = False  # the connection closes here (an answer that could not be encoded)
        self.ordered = ordered


class Stalled(Exception):
    """The client took none of an answer for the stall time."""


class Answers:
    def __init__(self, stream: trio.abc.Stream, capacity: int, stall_ms: int, failure: Failure, metrics: Metrics,
                 peer: str, on_deadline: Callable[[float], None]) -> None:
        self._stream = stream
        # Plain TCP: frames are written to the socket directly; under TLS the stream encrypts.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._fd = self._socket.fileno() if self._socket is not None else -1  # closed only after run() ends
        self._capacity = capacity
        self._stall_ms = stall_ms
        self._failure = failure
        self._metrics = metrics
        self._peer = peer
        self._queue: deque[Slot] = deque()
        self._writer_has_head = False  # the writer task is finishing the slot at the head
        self._awaited: Slot | None = None  # the head slot whose completion will call back
        self._wake = trio.Event()  # the writer task has something to do
        self._room = trio.Event()  # set while fewer than ``capacity`` answers are queued
        self._room.set()
        self._reading = True
        self._broken = False  # the client reset the connection during a direct send
        self._closing = False  # an answer closes the connection: nothing after it is sent
        self._on_deadline = on_deadline  # told when the answer at the head must be ready

    @property
    def unanswered(self) -> int:
        """Requests read and not yet answered (0: the connection is idle)."""
        return len(self._queue)

    async def queue(self, slot: Slot) -> None:
        """The slot joins the order of answers (once fewer than ``capacity`` wait), and what
        is ready is sent."""
        if len(self._queue) >= self._capacity:
            self._room = trio.Event()
            await self._room.wait()
        self._queue.append(slot)
        self.advance()

    def end(self) -> None:
        """The connection ended: nothing more is sent, whoever calls back later (its socket
        is closed and its descriptor may soon name another), and the unanswered requests
        (their frames) are let go now, not when the cyclic collector finds the connection."""
        self._closing = True
        self._queue.clear()
        self._awaited = None

    def finish_reading(self) -> None:
        """Nothing more will be queued: the writer task ends once all is answered."""
        self._reading = False
        self._wake.set()

    def head_deadline(self) -> float:
        """When the answer at the head must be ready (inf: none is waited for)."""
        if self._queue and not self._writer_has_head:
            head = self._queue[0]
            if head.ordered is not None and not head.ready:
                return head.ordered.deadline
        return float("inf")

    def overdue(self) -> None:
        """The head's deadline passed: the writer task answers it (its completion times out)."""
        if self._queue and not self._writer_has_head and not self._queue[0].ready:
            self._hand_over()

    def advance(self) -> None:
        """Send what is ready at the head of the queue, as far as the socket takes it now.
        Called from any task; never raises (a failure is the writer task's to raise)."""
        try:
            self._advance()
        except Exception:
            log.exception("answering %s failed; closing", self._peer)
            self._broken = True
            self._wake.set()

    def _advance(self) -> None:
        while self._queue and not self._writer_has_head and not self._closing and not self._broken:
            slot = self._queue[0]
            if not slot.ready and not self._settle(slot):
                return
            if slot.close_after:
                self._closing = True
                self._wake.set()
                return
            if slot.payload is not None:
                if self._socket is None or not self._send_now(slot):
                    self._hand_over()
                    return
            self._done(self._queue.popleft())
        if not self._reading and not self._queue:
            self._wake.set()

    def _settle(self, slot: Slot) -> bool:
        """Whether the slot's answer is ready, building an ordered one that can be built now.
        A slot a task answers is ready when the task ends; an ordered one that must wait
        calls :meth:`advance` when it may be ready (or is handed to the writer task)."""
        ordered = slot.ordered
        if ordered is None or slot is self._awaited:
            return False  # a task's, or one whose completion calls back once it may be ready
        state = ordered.completion.settle(self._called_back)
        if state is Settled.LATER:
            self._awaited = slot
            self._on_deadline(ordered.deadline)
            return False
        if state is Settled.BY_AWAITING or ordered.handler.large_answers:
            self._hand_over()
            return False
        try:
            body = ordered.completion.answer_now()
        except Exception as exc:
            body = self._failure(ordered.handler, ordered.request, exc)
        self._encode(slot, ordered.handler, ordered.request, body)
        ordered.timed.observe(time.perf_counter() - ordered.started)
        return True

    def _called_back(self) -> None:
        """A completion the head waits for may be ready."""
        self._awaited = None
        self.advance()

    def _hand_over(self) -> None:
        self._writer_has_head = True
        self._wake.set()

    def _done(self, slot: Slot) -> None:
        slot.payload = None
        slot.memory.release()
        if not self._room.is_set() and len(self._queue) < self._capacity:
            self._room.set()

    async def encode(self, slot: Slot, handler: Handler, request: Request, body) -> None:
        """A task's answer for ``slot``: encoded (a large one in a worker thread, so the event
        loop serves other clients meanwhile), then sent as soon as its turn comes."""
        if handler.large_answers and body is not None:
            try:
                slot.payload = await trio.to_thread.run_sync(frame_response, request.header, body)
                slot.memory.settle(sum(len(piece) for piece in slot.payload))
            except Exception:
                self._encoding_failed(slot, handler)
        else:
            self._encode(slot, handler, request, body)
        self.ready(slot)

    def ready(self, slot: Slot) -> None:
        """The slot's payload is final (a task ended, even without an answer)."""
        slot.ready = True
        self.advance()

    def _encode(self, slot: Slot, handler: Handler, request: Request, body) -> None:
        """The slot's payload: ``body`` encoded (nothing for ``None``), its memory settled."""
        try:
            slot.payload = None if body is None else frame_response(request.header, body)
            if slot.payload is not None:
                slot.memory.settle(sum(len(piece) for piece in slot.payload))
        except Exception:
            self._encoding_failed(slot, handler)
        slot.ready = True

    def _encoding_failed(self, slot: Slot, handler: Handler) -> None:
        api = handler.api_key.name
        log.exception("encoding the %s response for %s failed; closing", api, self._peer)
        self._metrics.request_errors.labels(api).inc()
        slot.payload = None
        slot.close_after = True

    def _send_now(self, slot: Slot) -> bool:
        """Whether the socket took the slot's whole frame now; what it did not take stays in
        ``slot.payload`` for the writer task."""
        assert slot.payload is not None
        unsent = _views(slot.payload)
        try:
            if self._write_what_fits(unsent):
                return True
        except trio.BrokenResourceError:
            self._broken = True  # the writer task raises it
            self._wake.set()
        slot.payload = list(unsent)
        return False

    def _write_what_fits(self, unsent: deque[memoryview]) -> bool:
        """Write ``unsent`` to the socket until it takes no more: whether all of it went.
        Raises ``BrokenResourceError`` when the client reset the connection."""
        while unsent:
            try:
                sent = os.writev(self._fd, list(islice(unsent, _IOV_MAX)))
            except BlockingIOError:
                return False
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            _consume(unsent, sent)
        return True

    async def run(self) -> None:
        """The writer task: what cannot be answered without waiting. Returns once the reader
        is done and every answer is sent, or an answer closes the connection; raises
        ``BrokenResourceError`` when the client reset it and :class:`Stalled` when it stops
        reading."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self._broken:
                raise trio.BrokenResourceError("the client reset the connection")
            if self._closing:
                return
            if self._writer_has_head:
                slot = self._queue[0]
                await self._finish(slot)
                if slot.close_after:
                    return
                self._queue.popleft()
                self._done(slot)
                self._writer_has_head = False
            self.advance()
            if self._broken:
                raise trio.BrokenResourceError("the client reset the connection")
            if self._closing or (not self._reading and not self._queue):
                return

    async def _finish(self, slot: Slot) -> None:
        """The head slot's answer, built and sent however long that takes."""
        ordered = slot.ordered
        if not slot.ready and ordered is not None:
            try:
                body = await ordered.completion.answer(ordered.deadline)
            except Exception as exc:
                body = self._failure(ordered.handler, ordered.request, exc)
            await self.encode(slot, ordered.handler, ordered.request, body)
            ordered.timed.observe(time.perf_counter() - ordered.started)
        if slot.payload is not None and not slot.close_after:
            await self._send(slot.payload)

    async def _send(self, frame: list[Buffer]) -> None:
        """Send one response frame (stored batches are not copied on plain TCP). Each send
        must make progress within the stall timeout, so a client that stops reading is found
        out."""
        if self._socket is None:  # TLS encrypts what it is given anyway: a few large sends
            for chunk in _chunks(frame, _SEND_CHUNK):
                await self._within_stall(self._stream.send_all(chunk))
            return
        unsent = _views(frame)
        while not self._write_what_fits(unsent):
            await self._within_stall(trio.lowlevel.wait_writable(self._socket))

    async def _within_stall(self, sending: Awaitable[T]) -> T:
        """``sending``'s result, if it makes progress within the stall timeout."""
        with trio.CancelScope(deadline=trio.current_time() + self._stall_ms / 1000):
            return await sending
        raise Stalled(f"the client took none of a response for {self._stall_ms} ms")


def _views(frame: list[Buffer]) -> deque[memoryview]:
    """The frame's pieces to write (writev of nothing writes 0)."""
    return deque(memoryview(piece) for piece in frame if len(piece))


def _consume(unsent: deque[memoryview], sent: int) -> None:
    """Drop ``sent`` bytes from the front of ``unsent``."""
    while sent:
        head = unsent[0]
        if len(head) > sent:
            unsent[0] = head[sent:]
            return
        sent -= len(head)
        unsent.popleft()


def _chunks(pieces: list[Buffer], size: int) -> Iterator[Buffer]:
    """``pieces`` regrouped into buffers of at most ``size`` bytes: small ones joined,
    large ones sliced."""
    gathered = bytearray()
    for piece in pieces:
        view = memoryview(piece)
        if len(gathered) + len(view) <= size:
            gathered += view
            continue
        if gathered:
            yield bytes(gathered)
            gathered.clear()
        for start in range(0, len(view), size):
            part = view[start:start + size]
            if len(part) == size:
                yield part
            else:
                gathered += part
    if gathered:
        yield bytes(gathered)
