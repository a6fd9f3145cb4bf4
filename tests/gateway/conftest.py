import pytest


@pytest.fixture
async def opened():
    """Streams a test opens; closed when it ends, whatever happened."""
    streams: list = []
    yield streams
    while streams:
        await streams.pop().aclose()
