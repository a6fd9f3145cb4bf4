import os

from hypothesis import HealthCheck, settings

# CI runs a deterministic profile so a red build is reproducible; locally,
# hypothesis explores new examples each run.
settings.register_profile(
    "ci", derandomize=True, max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """One moto S3 server for the session (each test makes its own bucket)."""
    from devkit.s3_server import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory):
    """One SeaweedFS S3 server for the session (each test uses its own prefix)."""
    from devkit.seaweed_server import SeaweedServer

    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


def pytest_collection_modifyitems(items):
    """pytest-trio runs only the async fixtures a test names as arguments (its issue #123): an
    autouse or usefixtures async fixture would silently never run, nor its cleanup."""
    import inspect

    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        for name in set(info.initialnames) - set(info.argnames):
            for fixturedef in info.name2fixturedefs.get(name, ()):
                if inspect.iscoroutinefunction(fixturedef.func) or inspect.isasyncgenfunction(fixturedef.func):
                    raise pytest.UsageError(f"{item.nodeid}: async fixture {name!r} is autouse or in usefixtures; "
                                            "pytest-trio would never run it: name it as an argument")
