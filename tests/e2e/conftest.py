import pytest

from tests.support.gateway_process import GatewayProcess


@pytest.fixture
def gateway(tmp_path):
    process = GatewayProcess(tmp_path / "data").start()
    yield process
    process.kill()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
