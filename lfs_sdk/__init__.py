"""Kafscale Large File Support SDK: put big payloads in the object store, produce a pointer with
the Kafka client you already have, and read pointers back as verified streams.

    from kafscale.lfs_sdk import LfsClient

    lfs = LfsClient("http://127.0.0.1:9094")
    pointer = lfs.upload("videos", open("big.mp4", "rb"))          # streamed, checksummed
    producer.produce("videos", key=b"clip-1", value=pointer.encode())

    with lfs.open(message.value()) as stream:                      # a pointer, or None
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            ...                                                    # checked at the end

:meth:`LfsClient.produce` does the threshold test: values below the topic's
``kafscale.lfs.min_bytes`` go as they are.
"""

from kafscale.protocol.lfs import InvalidPointer, LfsPointer, maybe_pointer, parse_pointer

from .client import LfsClient, LfsError, ObjectStream

__all__ = ["LfsClient", "LfsError", "ObjectStream", "LfsPointer", "InvalidPointer", "parse_pointer", "is_pointer",
           "maybe_pointer"]


def is_pointer(value: bytes | None) -> bool:
    """Whether ``value`` is a valid LFS pointer record value."""
    if not maybe_pointer(value):
        return False
    assert value is not None
    try:
        parse_pointer(value)
    except InvalidPointer:
        return False
    return True
