"""The connector's own errors."""

__all__ = ["OptionError"]


class OptionError(ValueError):
    """An option is unknown, malformed or contradicts another."""
