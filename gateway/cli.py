"""``kafscale-gateway``: run the gateway until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import sys

# kio registers hypothesis strategies whenever hypothesis can be imported, and importing it
# makes a .hypothesis folder in the working directory: the server needs neither.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

import trio  # noqa: E402

from .config import ConfigError, resolve_config  # noqa: E402
from .heap import collect_rarely, return_large_buffers  # noqa: E402
from .logsetup import setup_logging  # noqa: E402
from .server import StartupError, serve  # noqa: E402
from .workers.supervisor import (  # noqa: E402
    WorkersRefused,
    coordination_directory,
    exit_with_parent,
    supervise,
)


async def _run(config) -> None:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        async def on_signals():
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    shutdown.set()
                    return

        nursery.start_soon(on_signals)
        if config.network.is_worker:
            await nursery.start(exit_with_parent, config.network.worker_parent)
        await serve(config, shutdown)
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    try:
        loaded = resolve_config(argv)
    except ConfigError as exc:
        print(f"kafscale-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    if loaded.print_config:
        sys.stdout.write(loaded.describe())
        return 0
    config = loaded.config
    setup_logging(config.logging.log_level, config.logging.log_format)
    if config.network.worker_count > 1 and not config.network.is_worker:
        try:
            return trio.run(supervise, config, sys.argv[1:] if argv is None else argv)
        except WorkersRefused as exc:
            print(f"kafscale-gateway: {exc}", file=sys.stderr)
            return 1
    return_large_buffers()
    collect_rarely()
    try:
        _check_directory_owner(config)
        trio.run(_run, config)
    except (StartupError, BaseExceptionGroup) as exc:
        reason = _startup_error(exc)  # trio's nurseries wrap it in exception groups
        if reason is None:
            raise
        print(f"kafscale-gateway: {reason}", file=sys.stderr)
        return 1
    return 0


def _check_directory_owner(config) -> None:
    """A lone gateway would take the store of workers over as an earlier run of itself."""
    directory = coordination_directory(config)
    if not config.network.is_worker and not config.cluster.enabled and directory is not None and directory.exists():
        raise StartupError(f"{directory.parent} is run by kafscale-gateway --workers (its coordination is in "
                           f"{directory.name}): start it with --workers 2 or more")


def _startup_error(exc: BaseException) -> StartupError | None:
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _startup_error(inner)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
