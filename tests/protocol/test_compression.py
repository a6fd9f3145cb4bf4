import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol.compression import Compression, compress, decompress
from kafscale.protocol.errors import CompressionError


@given(data=st.binary(max_size=5000), codec=st.sampled_from(list(Compression)), xerial=st.booleans())
def test_round_trip(data, codec, xerial):
    assert decompress(codec, compress(codec, data, xerial=xerial)) == data


def test_xerial_snappy_with_several_blocks():
    import cramjam

    blocks = [b"a" * 1000, b"b" * 10, b"c" * 70000]
    framed = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        framed += len(raw).to_bytes(4, "big") + raw
    assert decompress(Compression.SNAPPY, framed) == b"".join(blocks)


def test_zstd_without_content_size():
    data = b"streamed " * 1000
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(Compression.ZSTD, frame) == data


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
@given(garbage=st.binary(min_size=1, max_size=200))
def test_garbage_raises_compression_error(codec, garbage):
    try:
        decompress(codec, garbage)
    except CompressionError:
        pass  # the only acceptable failure; some garbage happens to be valid (e.g. raw snappy)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_truncated_payload_is_rejected(codec):
    payload = compress(codec, bytes(range(256)) * 64, xerial=True)
    with pytest.raises(CompressionError):
        decompress(codec, payload[: len(payload) // 2])


def test_gzip_bomb_is_capped():
    payload = compress(Compression.GZIP, b"\x00" * 1_000_000)
    with pytest.raises(CompressionError, match="inflates beyond"):
        decompress(Compression.GZIP, payload, max_size=1000)


def test_unknown_codec():
    with pytest.raises(CompressionError):
        decompress(7, b"x")
