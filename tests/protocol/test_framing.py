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


@given(
    frames=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=30),
    direct=st.lists(st.booleans(), min_size=1, max_size=30),
)
def test_bodies_received_directly_or_fed_come_out_alike(frames, cuts, direct):
    """Received into the body's view (as a socket's recv_into writes) or fed, in any mix."""
    stream = b"".join(encode_frame(frame) for frame in frames)
    decoder = FrameDecoder(max_frame_size=1024)
    received = []
    boundaries = sorted({cut % (len(stream) + 1) for cut in cuts} | {0, len(stream)})
    position, turn = 0, 0
    while position < len(stream) or decoder.buffered:
        while (frame := decoder.next_frame()) is not None:
            received.append(frame)
        if position >= len(stream):
            break
        end = next((b for b in boundaries if b > position), len(stream))
        view = decoder.body_view() if direct[turn % len(direct)] else None
        turn += 1
        if view is not None:
            count = min(len(view), end - position)
            view[:count] = stream[position:position + count]
            decoder.received_into(count)
            position += count
        else:
            decoder.feed(stream[position:end])
            position = end
    while (frame := decoder.next_frame()) is not None:
        received.append(frame)
    assert received == frames
    assert decoder.buffered == 0


def test_a_body_view_exists_only_once_the_size_is_known_and_until_the_body_is_whole():
    decoder = FrameDecoder(max_frame_size=100)
    assert decoder.body_view() is None
    decoder.feed(struct.pack(">i", 5) + b"ab")
    assert decoder.body_view() is None  # the prefix is read by next_frame
    assert decoder.next_frame() is None
    view = decoder.body_view()
    assert len(view) == 3
    view[:3] = b"cde"
    decoder.received_into(3)
    assert decoder.body_view() is None
    with pytest.raises(ValueError):
        decoder.received_into(1)
    assert decoder.next_frame() == b"abcde" and decoder.buffered == 0


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
