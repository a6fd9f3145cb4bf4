"""The workers' metrics under one /metrics: each worker's own series, labelled ``worker``.

The workers share the HTTP port, and the kernel hands each scrape to any one of them; a
page of that worker's counters alone would jump between workers from scrape to scrape. So
each worker also offers its own page on a unix socket in the parent's private directory
(connect, read to the end: no request to parse), and the worker that takes a scrape reads
its siblings' pages and answers all of them, each sample labelled with its worker's slot,
and ``kafscale_worker_up`` saying which answered.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["MetricsPage", "own_page", "serve_own_page", "workers_page"]

log = logging.getLogger("kafscale.workers")

MetricsPage = Callable[[], Awaitable[bytes]]  # what /metrics answers

_SIBLING_ANSWER_S = 2.0
_PAGE_MAX = 64 << 20  # a page larger than this is not a page of ours


def own_page(registry: CollectorRegistry) -> MetricsPage:
    """A lone gateway's /metrics: its registry."""
    async def page() -> bytes:
        return generate_latest(registry)
    return page


def page_socket(directory: str, slot: int) -> str:
    return os.path.join(directory, f"metrics-{slot}.sock")


async def serve_own_page(registry: CollectorRegistry, directory: str, slot: int,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """This worker's page, to each sibling that connects to its socket."""
    path = page_socket(directory, slot)
    if os.path.exists(path):  # left by this slot's previous run, killed
        os.unlink(path)
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        sock.listen(64)

        async def send_page(stream: trio.SocketStream) -> None:
            async with stream:
                with trio.move_on_after(_SIBLING_ANSWER_S):
                    await stream.send_all(generate_latest(registry))

        listener = trio.SocketListener(sock)
        task_status.started()
        await trio.serve_listeners(send_page, [listener])
    finally:
        sock.close()


def workers_page(registry: CollectorRegistry, directory: str, slot: int, count: int) -> MetricsPage:
    """A worker's /metrics: every worker's series, labelled with its slot."""
    async def page() -> bytes:
        pages: dict[int, bytes | None] = {slot: generate_latest(registry)}

        async def read(sibling: int) -> None:
            pages[sibling] = await _sibling_page(page_socket(directory, sibling))

        async with trio.open_nursery() as nursery:
            for sibling in range(count):
                if sibling != slot:
                    nursery.start_soon(read, sibling)
        return _merged(pages)
    return page


async def _sibling_page(path: str) -> bytes | None:
    """A sibling's page; None when it does not answer (stopped, restarting, stuck)."""
    with trio.move_on_after(_SIBLING_ANSWER_S):
        try:
            stream = await trio.open_unix_socket(path)
        except OSError:
            return None
        async with stream:
            chunks, size = [], 0
            while chunk := await stream.receive_some(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > _PAGE_MAX:
                    return None
            return b"".join(chunks)
    return None


def _merged(pages: dict[int, bytes | None]) -> bytes:
    families: dict[str, Metric] = {}
    up = Metric("kafscale_worker_up", "1 when the worker answered this scrape with its own series", "gauge")
    for slot in sorted(pages):
        page = pages[slot]
        up.add_sample("kafscale_worker_up", {"worker": str(slot)}, 0 if page is None else 1)
        if page is None:
            continue
        try:
            parsed = list(text_string_to_metric_families(page.decode()))
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("worker %d's metrics page is unreadable: %s", slot, exc)
            continue
        for family in parsed:
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                             family.unit))
            merged.samples.extend(Sample(sample.name, {**sample.labels, "worker": str(slot)}, sample.value,
                                         sample.timestamp, sample.exemplar) for sample in family.samples)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*families.values(), up]))
    return generate_latest(registry)


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
