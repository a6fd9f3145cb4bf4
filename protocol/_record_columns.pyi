from typing_extensions import Buffer

def decode(payload: Buffer, base_offset: int, base_timestamp: int, max_timestamp: int, log_append: bool,
           count: int, start: int, end: int, buffers: list[bytearray], /) -> int: ...
