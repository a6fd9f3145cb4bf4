"""Regular expressions clients send (consumer-group subscriptions, ListTransactions' id
pattern): RE2's syntax, as Kafka's RE2/J, so matching time stays linear in the input
whatever the pattern; a pattern RE2 refuses is INVALID_REGULAR_EXPRESSION."""

from __future__ import annotations

import re2  # type: ignore[import-untyped]

from kafscale.protocol.errors import ErrorCode, KafkaError

__all__ = ["compile_regex"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is its error answer, not a line on our stderr
# RE2's own bound (max_mem, 8 MiB by default) caps what compiling one pattern may take.


def compile_regex(pattern: str) -> re2._Regexp:
    """``pattern`` compiled; callers match whole names (``fullmatch``), as Kafka does."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise KafkaError(ErrorCode.invalid_regular_expression,
                         f"invalid regular expression {pattern!r}: {exc}") from None
