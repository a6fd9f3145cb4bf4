import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol import FrameDecoder, FrameTooLarge, MalformedFrame, encode_frame


@given(
    frames=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=30),
)
def test_frames_survive_any_chunking(frames, cuts):
    stream = b"".join(encode_frame(frame) for frame in frames)
    decoder = FrameDecoder(max_frame_size=1024)
    received = []
    boundaries = sorted({cut % (len(stream) + 1) for cut in cuts} | {0, len(stream)})
    for start, end in zip(boundaries, boundaries[1:], strict=False):
        decoder.feed(stream[start:end])
        while (frame := decoder.next_frame()) is not None:
            received.append(frame)
    assert received == frames
    assert decoder.buffered == 0


def test_oversized_frame_is_refused_before_buffering():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert info.value.size == 101 and info.value.limit == 100


def test_frame_at_the_limit_is_accepted():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(encode_frame(b"x" * 100))
    assert decoder.next_frame() == b"x" * 100


def test_negative_size_is_malformed():
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", -5))
    with pytest.raises(MalformedFrame):
        decoder.next_frame()


def test_partial_prefix_waits_for_more():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00")
    assert decoder.next_frame() is None
    decoder.feed(b"\x00\x01z")
    assert decoder.next_frame() == b"z"


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=0)
