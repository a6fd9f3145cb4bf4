#!/usr/bin/env python3
"""A longer fuzz campaign than CI's: ``.venv/bin/python scripts/fuzz.py [--frames N] [--seed S]``.

Same harness as tests/gateway/test_fuzz.py (mutated real-client frames and generated
requests against an in-process gateway); prints frames tried, answers, closes, hangs,
peak RSS and unexpected handler errors. Exit 1 if anything hung or failed unexpectedly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devkit.fuzz import run_campaign  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    async def campaign():
        async with trio.open_nursery() as nursery:
            report = await run_campaign(nursery, mutations=args.frames * 7 // 10,
                                        generated=args.frames * 3 // 10, seed=args.seed)
            nursery.cancel_scope.cancel()
        return report

    report = trio.run(campaign)
    print(report.line())
    return 1 if report.hangs or report.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
