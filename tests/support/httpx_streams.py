"""Leaving an httpx stream early (a cancelled or refused etcd watch) leaves httpx's and
httpcore's inner async generators to trio's finalizer, which closes them but warns; they are
theirs, not leaks of ours."""

import pytest

IGNORE_ABANDONED_STREAMS = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <async_generator object (Response\.aiter_|BoundAsyncStream|"
    r"AsyncResponseStream|PoolByteStream|HTTP11ConnectionByteStream|AsyncHTTP11Connection)"
    r":pytest.PytestUnraisableExceptionWarning")
