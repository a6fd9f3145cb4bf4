from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import Buffer

_Header = TypeVar("_Header", bound=tuple[Any, ...])

def walk(buffer: Buffer, pos: int, end: int, count: int, keyless: list[int] | None = None, /) -> int: ...
def split(buffer: Buffer, header_type: type[_Header], crc: Callable[[Buffer], int] | None, /) -> list[_Header]: ...
def validate(buffer: Buffer, header_type: type[_Header], crc: Callable[[Buffer], int], /) -> list[_Header]: ...
