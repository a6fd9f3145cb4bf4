"""Fuzz the gateway in-process: mutated frames of real clients and generated requests.
Nothing may crash it, hang a connection or keep memory; a real client still gets through
after every batch. ``scripts/fuzz.py`` runs the same for longer."""

from devkit.fuzz import run_campaign


async def test_fuzzing_neither_crashes_nor_hangs_nor_leaks(nursery):
    report = await run_campaign(nursery, mutations=3500, generated=1500, seed=20261122)
    assert report.frames == 5000
    assert not report.hangs, f"{len(report.hangs)} frames got neither an answer nor a close: {report.hangs[:3]!r}"
    assert report.answered > 500 and report.closed > 100  # both outcomes were exercised
    assert report.unexpected == 0  # no handler met a request it could not answer with a Kafka error
