"""Answers leave in pieces: under TLS regrouped into chunks of bounded size, byte-exact."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from kafscale.gateway.answers import _chunks


@given(pieces=st.lists(st.binary(max_size=50), max_size=12), size=st.integers(1, 40))
def test_chunks_keep_every_byte_in_order_and_none_is_too_large(pieces, size):
    chunks = list(_chunks(pieces, size))
    assert b"".join(chunks) == b"".join(pieces)
    assert all(0 < len(chunk) <= size for chunk in chunks)
    # Small pieces are joined: never two chunks in a row that would have fit in one.
    assert all(len(a) + len(b) > size for a, b in itertools.pairwise(chunks))
