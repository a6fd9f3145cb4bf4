"""Size-prefixed framing of the Kafka wire protocol (sans-io).

Bytes go in with :meth:`FrameDecoder.feed`; complete frames come out of
:meth:`FrameDecoder.next_frame`. The size prefix is checked against a limit
*before* any of the body is buffered, so a hostile prefix cannot make us
allocate. A large frame's body can instead be received straight into the frame
(:meth:`FrameDecoder.body_view`, then :meth:`FrameDecoder.received_into`): one
copy from the kernel and one receive call for the whole body, not a chunk at a time
through a buffer.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLarge, MalformedFrame

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder", "encode_frame"]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames (without their 4-byte size prefix)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size <= 0:
            raise ValueError("max_frame_size must be positive")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._need: int | None = None  # body size of the frame being assembled
        self._frame: bytearray | None = None  # that body, when received straight into it
        self._filled = 0

    def feed(self, data: bytes | memoryview) -> None:
        if self._frame is not None:  # the rest of a body being received directly first
            take = min(len(data), len(self._frame) - self._filled)
            self._frame[self._filled:self._filled + take] = data[:take]
            self._filled += take
            data = data[take:]
        self._buffer += data

    def body_view(self) -> memoryview | None:
        """Where the rest of the pending frame's body can be received directly, once its
        size prefix is in (``None`` before, and once the body is whole). The caller
        reports what it wrote with :meth:`received_into`; it must hold memory for the
        whole frame first (the body is allocated here)."""
        if self._need is None:
            return None
        if self._frame is None:
            self._frame = bytearray(self._need)
            have = min(len(self._buffer), self._need)
            self._frame[:have] = self._buffer[:have]
            del self._buffer[:have]
            self._filled = have
        if self._filled == self._need:
            return None
        return memoryview(self._frame)[self._filled:]

    def received_into(self, count: int) -> None:
        """``count`` bytes were written at the start of the last :meth:`body_view`."""
        if self._frame is None or count < 0 or self._filled + count > len(self._frame):
            raise ValueError("received_into without room in a body view")
        self._filled += count

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) + self._filled

    @property
    def pending_size(self) -> int | None:
        """Body size of the frame being assembled, once its size prefix has been read
        (so a server can reserve memory before buffering the body), else ``None``."""
        return self._need

    def next_frame(self) -> bytearray | None:
        """Return the next complete frame, or ``None`` if more data is needed. The frame is
        the caller's to keep and change (a Produce request's records are stamped in it).

        :raises FrameTooLarge: the announced size exceeds ``max_frame_size``.
        :raises MalformedFrame: the announced size is negative.
        """
        if self._need is None:
            if len(self._buffer) < 4:
                return None
            (size,) = _SIZE.unpack_from(self._buffer, 0)
            if size < 0:
                raise MalformedFrame(f"negative frame size {size}")
            if size > self.max_frame_size:
                raise FrameTooLarge(size, self.max_frame_size)
            del self._buffer[:4]
            self._need = size
        if self._frame is not None:
            if self._filled < self._need:
                return None
            frame, self._frame, self._filled, self._need = self._frame, None, 0, None
            return frame
        if len(self._buffer) < self._need:
            return None
        if len(self._buffer) == self._need:  # the usual case for a large request: no copy
            frame, self._buffer = self._buffer, bytearray()
        else:
            frame = self._buffer[: self._need]
            del self._buffer[: self._need]
        self._need = None
        return frame


def encode_frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
