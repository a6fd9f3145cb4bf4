"""Ports for servers started by tests and benchmarks."""

from __future__ import annotations

import socket

__all__ = ["free_port"]

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before in this test run: the OS may give a
    just-closed port again, and two listeners of one gateway must not get the same one."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
