"""The coordination store of a ``--workers`` parent, served in a test's nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from kafscale.gateway.etcd import EtcdClient
from kafscale.gateway.workers.supervisor import serve_coordination


@asynccontextmanager
async def coordination_client(nursery: trio.Nursery, directory: Path, private: str) -> AsyncIterator[EtcdClient]:
    """An etcd client of the store kept in ``directory`` and served on a socket in ``private``,
    as the workers reach it."""
    endpoint = (await nursery.start(serve_coordination, directory, private)).endpoint
    etcd = EtcdClient([endpoint], 5000)
    try:
        yield etcd
    finally:
        await etcd.aclose()
