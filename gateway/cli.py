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


async def _run(config) -> None:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        async def on_signals():
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    shutdown.set()
                    return

        nursery.start_soon(on_signals)
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
    return_large_buffers()
    collect_rarely()
    try:
        trio.run(_run, config)
    except (StartupError, BaseExceptionGroup) as exc:
        reason = _startup_error(exc)  # trio's nurseries wrap it in exception groups
        if reason is None:
            raise
        print(f"kafscale-gateway: {reason}", file=sys.stderr)
        return 1
    return 0


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
