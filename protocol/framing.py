"""Size-prefixed framing of the Kafka wire protocol (sans-io).

Bytes go in with :meth:`FrameDecoder.feed`; complete frames come out of
:meth:`FrameDecoder.next_frame`. The size prefix is checked against a limit
*before* any of the body is buffered, so a hostile prefix cannot make us
allocate.
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

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer)

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
