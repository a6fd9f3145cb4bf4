"""``kafscale-gateway --workers N``: a parent and N gateway processes, every core used.

The parent serves no client. It starts the workers (this program again, each told its
slot), and each is a cluster gateway: it binds the listeners' ports shared with the others
(SO_REUSEPORT) and one port of its own that Metadata advertises, holds a node id and its
partitions under a lease, and hands them over when it stops, as cluster gateways do.
Their etcd is the configured one or, with none configured, the parent's own store
(:mod:`.kv_server`) on a private unix socket, kept in the storage directory
(:mod:`.journal`) and fenced by the same leases; a lone gateway's state found in that
directory is copied into it first (:mod:`.adoption`).

A worker that dies is started again (after a pause that grows while it keeps dying); its
partitions move to the others when its lease ends, and acknowledged records are in the
store already. A worker that fails on its first start stops them all: the error is the
user's to fix (a port in use, a bad option). SIGTERM or SIGINT is passed on to every
worker, and the parent exits when they have.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from kafscale.storage_backends import StorageError, filesystem_directory, open_store

from ..config import GatewayConfig
from ..etcd import EtcdClient, EtcdError
from ..metadata import MetadataUnreadable
from ..storage import AsyncStore
from ..transactions.store import TransactionsUnreadable
from .adoption import AdoptionRefused, a_lone_gateway_ran_in, adopt_lone_gateway
from .journal import Journal, JournalUnreadable
from .kv import KeyValueStore
from .kv_server import KvServer

__all__ = ["COORDINATION_DIR", "Coordination", "WorkersRefused", "coordination_directory", "exit_with_parent",
           "private_directory", "serve_coordination", "supervise"]

log = logging.getLogger("kafscale.workers")

COORDINATION_DIR = ".kafscale-coordination"  # in the storage directory, beside the namespaces
_FIRST_RUN_S = 15.0  # a worker that dies sooner on its first start failed to start
_MAX_PAUSE_S = 30.0


class WorkersRefused(Exception):
    """The workers cannot run on this configuration or directory; the message says why."""


def coordination_directory(config: GatewayConfig) -> Path | None:
    """Where the parent of workers keeps their coordination, for a filesystem store."""
    directory = filesystem_directory(config.storage.storage)
    return None if directory is None else Path(directory) / COORDINATION_DIR


async def exit_with_parent(parent_pid: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """In a worker: exit at once when the parent is gone (it was killed): a worker must not
    outlive the coordination that fences it. (PR_SET_PDEATHSIG would fire when the thread
    that started the worker ends, not the parent, and trio starts processes from a thread.)
    What was acknowledged is in the store already."""
    task_status.started()
    while os.getppid() == parent_pid:
        await trio.sleep(0.5)
    log.error("the workers' parent (pid %d) is gone: exiting", parent_pid)
    os._exit(1)


@contextmanager
def _held(directory: Path):
    """The directory's lock, for the parent's life: one set of workers per directory."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkersRefused(f"another kafscale-gateway --workers runs on {directory.parent}") from None
        yield


@contextmanager
def private_directory():
    """Where the parent and its workers keep their unix sockets (the coordination store's,
    each worker's metrics page): mode 0700, only this user reaches them."""
    private = tempfile.mkdtemp(prefix="kafscale-workers-")
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


@dataclass(frozen=True)
class Coordination:
    """The workers' store as the parent holds it: where workers reach it, and how the parent
    ends the leases of a worker it saw die."""

    endpoint: str
    server: KvServer


async def serve_coordination(directory: Path, private: str, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The workers' store, on a unix socket in the ``private`` directory; started() with its
    :class:`Coordination`."""
    journal = Journal(directory / "journal")
    try:
        revision, data = journal.load()
    except (JournalUnreadable, ValueError, KeyError) as exc:
        raise WorkersRefused(f"the workers' coordination journal is unreadable: {exc} (restore it from a backup)") \
            from exc
    kv = KeyValueStore(revision, data, on_change=journal.append)
    server = KvServer(kv)
    path = os.path.join(private, "coordination.sock")
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        sock.listen(256)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.run)

            async def compact() -> None:
                while True:
                    await trio.sleep(10)
                    if journal.needs_rewrite:
                        journal.rewrite(kv.revision, kv.items())

            nursery.start_soon(compact)
            nursery.start_soon(trio.serve_listeners, server.serve, [trio.SocketListener(sock)])
            task_status.started(Coordination(f"unix://{path}", server))
    finally:
        sock.close()
        journal.close()
        with suppress(OSError):
            os.unlink(path)


class _Worker:
    def __init__(self, slot: int, command: list[str], on_exit: Callable[[int], None]) -> None:
        self.slot = slot
        self.command = command
        self._on_exit = on_exit  # told the pid of each run that ended
        self.process: trio.Process | None = None
        self.failed_start: int | None = None  # exit code of a first start that failed

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signum)

    async def keep_running(self, stopping: trio.Event, failed: trio.Event) -> None:
        pause, first = 0.5, True
        while not stopping.is_set():
            started = trio.current_time()
            self.process = await trio.lowlevel.open_process(self.command, start_new_session=True)
            code = await self.process.wait()
            self._on_exit(self.process.pid)
            if stopping.is_set():
                return
            ran_s = trio.current_time() - started
            if first and ran_s < _FIRST_RUN_S and code in (1, 2):
                self.failed_start = code
                failed.set()
                return
            first = False
            pause = 0.5 if ran_s > 60 else min(_MAX_PAUSE_S, pause * 2)
            log.warning("worker %d exited (%s) after %.1f s; starting it again in %.1f s", self.slot,
                        f"signal {-code}" if code < 0 else f"code {code}", ran_s, pause)
            with trio.move_on_after(pause):
                await stopping.wait()


async def supervise(config: GatewayConfig, argv: list[str]) -> int:
    """Runs the workers until SIGTERM or SIGINT; the exit code."""
    try:
        return await _supervise(config, argv)
    except* WorkersRefused as refused:  # from a task of the nursery: the reason alone, not a group
        raise refused.exceptions[0] from None


async def _supervise(config: GatewayConfig, argv: list[str]) -> int:
    count = config.network.worker_count
    directory = coordination_directory(config)
    # A gateway's catalog or log here: a lone gateway's, or the workers' own (the adoption
    # tells them apart by what the coordination store holds).
    lone_data = directory is not None and a_lone_gateway_ran_in(directory.parent, config.storage.namespace)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals, private_directory() as private, \
                (_held(directory) if directory is not None and not config.cluster.enabled else nullcontext()):
            extra: list[str] = []
            on_exit: Callable[[int], None] = _leases_run_out
            if not config.cluster.enabled:
                assert directory is not None  # config refuses workers on S3 without etcd
                coordination: Coordination = await nursery.start(serve_coordination, directory, private)
                await _take_over_a_lone_gateway(config, coordination.endpoint, lone_data)
                extra = ["--etcd-endpoints", coordination.endpoint]
                on_exit = partial(_release, coordination.server)
            base = [sys.executable, "-m", "kafscale.gateway.cli", *argv, *extra, "--worker-parent", str(os.getpid()),
                    "--worker-sockets", private]
            workers = [_Worker(slot, [*base, "--worker-slot", str(slot)], on_exit) for slot in range(count)]
            stopping, failed = trio.Event(), trio.Event()
            log.info("starting %d workers", count)
            async with trio.open_nursery() as running:
                for worker in workers:
                    running.start_soon(worker.keep_running, stopping, failed)

                async def stop_on_signal_or_failure() -> None:
                    async with trio.open_nursery() as waiting:  # whichever comes first
                        async def on_signal() -> None:
                            await signals.__anext__()
                            waiting.cancel_scope.cancel()

                        async def on_failure() -> None:
                            await failed.wait()
                            waiting.cancel_scope.cancel()

                        waiting.start_soon(on_signal)
                        waiting.start_soon(on_failure)
                    stopping.set()
                    for worker in workers:
                        worker.signal(signal.SIGTERM)

                running.start_soon(stop_on_signal_or_failure)
                # Once every worker is gone (stopping), the signal task ends too.
            nursery.cancel_scope.cancel()
    codes = [w.failed_start for w in workers if w.failed_start is not None]
    if codes:
        print(f"kafscale-gateway: a worker failed to start (exit {codes[0]}); see its message above",
              file=sys.stderr)
        return codes[0]
    return 0


async def _take_over_a_lone_gateway(config: GatewayConfig, endpoint: str, lone_data: bool) -> None:
    """The state of a gateway that ran alone on this directory, copied into the coordination
    store at ``endpoint`` before any worker starts (:mod:`.adoption`)."""
    etcd = EtcdClient([endpoint], config.cluster.etcd_timeout_ms)
    try:
        backend = open_store(config.storage.storage, fsync=config.storage.fsync)
        await adopt_lone_gateway(config, AsyncStore(backend, config.limits.storage_threads), etcd, lone_data)
    except (AdoptionRefused, MetadataUnreadable, TransactionsUnreadable, StorageError, EtcdError, OSError,
            ValueError) as exc:
        raise WorkersRefused(f"cannot take over the state of the gateway that ran alone on {config.storage.storage}: "
                             f"{exc}") from exc
    finally:
        await etcd.aclose()


def _leases_run_out(pid: int) -> None:
    """With a real etcd, a dead worker's leases end when their TTL runs out."""


def _release(server: KvServer, pid: int) -> None:
    """A worker's process is gone (it cannot write any more): its partitions move now, not
    when its leases would have run out."""
    ended = server.end_leases_of(pid)
    if ended:
        log.info("coordination: ended %d lease(s) of worker process %d, which exited", ended, pid)
