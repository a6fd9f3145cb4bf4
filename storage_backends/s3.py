"""S3 and S3-compatible stores (MinIO, SeaweedFS, moto) over obstore's S3Store.

Credentials come from the options, else from the standard AWS environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``...), which
obstore reads itself. A MinIO-like server is the same adapter with an endpoint,
path-style requests and plain HTTP allowed.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from obstore.store import S3Store

from .base import StorageUnavailable
from .obstore_backend import ObstoreBackend

__all__ = ["S3Options", "S3Backend"]


@dataclass(frozen=True, slots=True)
class S3Options:
    endpoint: str | None = None  # e.g. http://127.0.0.1:9000 for MinIO
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    path_style: bool = False  # MinIO and most self-hosted servers want path-style requests
    allow_http: bool = False
    timeout_ms: int = 30_000
    retries: int = 5


class S3Backend(ObstoreBackend):
    def __init__(self, bucket: str, prefix: str, options: S3Options) -> None:
        config: dict[str, object] = {"virtual_hosted_style_request": not options.path_style}
        for key, value in (("endpoint", options.endpoint), ("region", options.region),
                           ("access_key_id", options.access_key_id),
                           ("secret_access_key", options.secret_access_key)):
            if value:
                config[key] = value
        if options.endpoint and not options.region:
            config["region"] = "us-east-1"  # S3-compatible servers accept any region
        timeout = datetime.timedelta(milliseconds=options.timeout_ms)
        store = S3Store(
            bucket,
            prefix=prefix or None,
            config=config,  # type: ignore[arg-type]  # obstore's S3Config TypedDict, built key by key
            client_options={"allow_http": options.allow_http, "timeout": timeout,
                            "connect_timeout": min(timeout, datetime.timedelta(seconds=5))},
            retry_config={"max_retries": options.retries, "retry_timeout": timeout,
                          "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                                      "max_backoff": datetime.timedelta(seconds=5), "base": 2}},
        )
        where = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        if options.endpoint:
            where += f" at {options.endpoint}"
        super().__init__(store, where)
        self.bucket = bucket

    def check(self) -> None:
        try:
            self.list("~probe/")
        except StorageUnavailable as exc:
            raise StorageUnavailable(f"cannot list bucket {self.bucket!r} ({self.describe()}): "
                                     f"{_what_to_do(str(exc))}: {exc}") from exc


def _what_to_do(failure: str) -> str:
    """The likely cause of a failed first listing, in words an operator acts on."""
    if any(code in failure for code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidSignature")):
        return "the store refused the credentials: check the access key id and the secret access key"
    if "AccessDenied" in failure or "403" in failure:
        return "access denied: these credentials may not list this bucket"
    if "NoSuchBucket" in failure or "404" in failure:
        return "the bucket does not exist (Kafscale does not create buckets)"
    return "it must exist (Kafscale does not create buckets) and be reachable"
