"""Where LFS objects live and how clients reach them: two explicit modes.

- :class:`PresignedObjects` (S3 and S3-compatible stores): clients upload and download with
  pre-signed URLs, so the bytes never pass through the gateway; the gateway only starts,
  completes and aborts multipart uploads and HEADs objects (botocore, which signs any S3
  request; obstore signs only whole-object GET and PUT).
- :class:`GatewayHeldObjects` (the filesystem, memory): no URL to sign, so the gateway's
  endpoint takes the bytes and streams them into the store, and serves them back in ranges.

Both are blocking and run in worker threads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from kafscale.storage_backends import ObjectStore, ObjectStream, S3Options, StorageError, StorageUnavailable

__all__ = ["LfsObjects", "PresignedObjects", "GatewayHeldObjects", "Part", "UploadPlan"]


@dataclass(frozen=True, slots=True)
class Part:
    number: int
    etag: str


@dataclass(frozen=True, slots=True)
class UploadPlan:
    """What a client is told to do: ``method`` is ``put`` (one URL), ``multipart`` (a URL per
    part of ``part_bytes``) or ``gateway`` (send the bytes to the gateway's endpoint)."""

    method: str
    urls: list[str]
    part_bytes: int
    multipart_id: str | None = None


class LfsObjects(Protocol):
    presigned: bool

    def default_bucket(self) -> str: ...
    def full_key(self, key: str) -> str: ...
    def plan_upload(self, bucket: str, key: str, size: int | None, content_type: str,
                    expires_s: int) -> UploadPlan: ...
    def part_urls(self, bucket: str, key: str, multipart_id: str, numbers: range, expires_s: int) -> list[str]: ...
    def complete(self, bucket: str, key: str, multipart_id: str | None, parts: list[Part]) -> None: ...
    def abort(self, bucket: str, key: str, multipart_id: str | None) -> None: ...
    def size(self, bucket: str, key: str) -> int | None: ...
    def delete(self, bucket: str, key: str) -> None: ...
    def download_url(self, bucket: str, key: str, expires_s: int) -> str | None: ...
    def open_stream(self, bucket: str, key: str) -> ObjectStream: ...
    def read(self, bucket: str, key: str, chunk: int) -> Iterator[bytes]: ...


class PresignedObjects:
    presigned = True

    def __init__(self, bucket: str, prefix: str, options: S3Options, part_bytes: int) -> None:
        self._bucket = bucket
        self._prefix = f"{prefix}/" if prefix else ""
        self._part_bytes = part_bytes
        self._options = options

    @functools.cached_property
    def _client(self):
        """Made on first use: a gateway whose topics never use LFS never imports botocore."""
        import botocore.config
        import botocore.session

        options = self._options
        session = botocore.session.get_session()
        return session.create_client(
            "s3", endpoint_url=options.endpoint, region_name=options.region or "us-east-1",
            aws_access_key_id=options.access_key_id, aws_secret_access_key=options.secret_access_key,
            config=botocore.config.Config(
                signature_version="s3v4", retries={"max_attempts": options.retries + 1, "mode": "standard"},
                connect_timeout=min(options.timeout_ms / 1000, 5), read_timeout=options.timeout_ms / 1000,
                s3={"addressing_style": "path" if options.path_style else "virtual"}),
        )

    def default_bucket(self) -> str:
        return self._bucket

    def full_key(self, key: str) -> str:
        """The key in the bucket of a store key (the store's own prefix in front)."""
        return self._prefix + key

    def _call(self, operation: str, **params):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, operation)(**params)
        except ClientError as exc:
            raise StorageError(f"S3 {operation} {params.get('Key', '')}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"S3 {operation} {params.get('Key', '')}: {exc}") from exc

    def plan_upload(self, bucket: str, key: str, size: int | None, content_type: str,
                    expires_s: int) -> UploadPlan:
        """One PUT URL up to a part's size; else a multipart upload, with a URL per part when the
        size is known (none when it is not: the client asks for them as its parts come)."""
        if size is not None and size <= self._part_bytes:
            url = self._client.generate_presigned_url(
                "put_object", Params={"Bucket": bucket, "Key": key, "ContentType": content_type},
                ExpiresIn=expires_s)
            return UploadPlan("put", [url], self._part_bytes)
        started = self._call("create_multipart_upload", Bucket=bucket, Key=key, ContentType=content_type)
        upload_id = started["UploadId"]
        parts = range(1, -(-size // self._part_bytes) + 1) if size is not None else range(1, 1)
        return UploadPlan("multipart", self.part_urls(bucket, key, upload_id, parts, expires_s), self._part_bytes,
                          upload_id)

    def part_urls(self, bucket: str, key: str, multipart_id: str, numbers: range, expires_s: int) -> list[str]:
        return [self._client.generate_presigned_url(
            "upload_part", Params={"Bucket": bucket, "Key": key, "UploadId": multipart_id, "PartNumber": number},
            ExpiresIn=expires_s) for number in numbers]

    def complete(self, bucket: str, key: str, multipart_id: str | None, parts: list[Part]) -> None:
        if multipart_id is None:
            return
        self._call("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=multipart_id,
                   MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})

    def abort(self, bucket: str, key: str, multipart_id: str | None) -> None:
        if multipart_id is not None:
            try:
                self._call("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=multipart_id)
            except StorageError as exc:
                if "NoSuchUpload" not in str(exc):
                    raise
        self.delete(bucket, key)

    def size(self, bucket: str, key: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            return int(self._client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StorageError(f"S3 HEAD {key}: {exc}") from exc
        except Exception as exc:
            raise StorageUnavailable(f"S3 HEAD {key}: {exc}") from exc

    def delete(self, bucket: str, key: str) -> None:
        self._call("delete_object", Bucket=bucket, Key=key)

    def download_url(self, bucket: str, key: str, expires_s: int) -> str | None:
        return self._client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                   ExpiresIn=expires_s)

    def open_stream(self, bucket: str, key: str) -> ObjectStream:
        raise StorageError("on S3, clients upload with pre-signed URLs, not through the gateway")

    def read(self, bucket: str, key: str, chunk: int) -> Iterator[bytes]:
        raise StorageError("on S3, clients download with pre-signed URLs, not through the gateway")


class GatewayHeldObjects:
    """The store itself (filesystem or memory): one bucket, named ``local``."""

    presigned = False
    BUCKET = "local"

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def default_bucket(self) -> str:
        return self.BUCKET

    def full_key(self, key: str) -> str:
        return key

    def _check(self, bucket: str) -> None:
        if bucket != self.BUCKET:
            raise StorageError(f"bucket {bucket!r}: this gateway's store has one bucket, {self.BUCKET!r}")

    def plan_upload(self, bucket: str, key: str, size: int | None, content_type: str,
                    expires_s: int) -> UploadPlan:
        self._check(bucket)
        return UploadPlan("gateway", [], 0)

    def part_urls(self, bucket: str, key: str, multipart_id: str, numbers: range, expires_s: int) -> list[str]:
        raise StorageError("the gateway-held store has no parts to sign")

    def complete(self, bucket: str, key: str, multipart_id: str | None, parts: list[Part]) -> None:
        return None

    def abort(self, bucket: str, key: str, multipart_id: str | None) -> None:
        self.delete(bucket, key)

    def size(self, bucket: str, key: str) -> int | None:
        self._check(bucket)
        info = self._store.head(key)
        return None if info is None else info.size

    def delete(self, bucket: str, key: str) -> None:
        self._check(bucket)
        self._store.delete(key)

    def download_url(self, bucket: str, key: str, expires_s: int) -> str | None:
        return None

    def open_stream(self, bucket: str, key: str) -> ObjectStream:
        self._check(bucket)
        return self._store.open_stream(key)

    def read(self, bucket: str, key: str, chunk: int) -> Iterator[bytes]:
        self._check(bucket)
        size = self.size(bucket, key)
        if size is None:
            return
        for start in range(0, size, chunk):
            yield self._store.get_range(key, start, min(start + chunk, size))
