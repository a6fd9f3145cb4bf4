"""The LFS endpoint on the gateway's HTTP listener (docs/lfs.md):

- ``GET  /lfs/topics/{topic}``: the topic's LFS settings (DESCRIBE on the topic);
- ``POST /lfs/uploads`` ``{"topic", "size", "content_type"?, "checksum"?}``: an upload
  session and where to send the bytes (WRITE on the topic);
- ``PUT  /lfs/uploads/{id}/data``: the bytes, on a store without pre-signed URLs;
- ``POST /lfs/uploads/{id}/parts`` ``{"first", "count"}``: more part URLs (a stream's upload);
- ``POST /lfs/uploads/{id}/complete`` ``{"checksum", "parts"?: [{"number", "etag"}]}``:
  checks the object and answers the pointer record's value;
- ``GET  /lfs/objects?bucket=&key=``: an object (READ on its topic): a redirect to a
  pre-signed URL on S3, the bytes themselves elsewhere.

Clients authenticate as :mod:`.http_auth` says; the principal is then authorized by the
ACLs exactly as a Kafka request of that principal would be.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from kafscale.storage_backends import InvalidKey, StorageError

from .context import GatewayContext
from .http_auth import principal_of, require
from .http_exchange import HttpError, HttpExchange
from .lfs import LfsRefused
from .lfs.objects import Part
from .security.acl import Operation, ResourceType

__all__ = ["serve_lfs"]

_DOWNLOAD_CHUNK = 4 * 2**20
# RFC 6838 type/subtype names, and parameters after ';' in printable ASCII.
_CONTENT_TYPE = re.compile(r"(?=.{3,255}$)[A-Za-z0-9][\w!#$&^.+-]*/[A-Za-z0-9][\w!#$&^.+-]*(;[ -~]*)?")


def _field(document: dict, name: str, kind: type, default=None):
    value = document.get(name, default)
    if value is None and default is None:
        raise HttpError(400, f"{name} is required")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise HttpError(400, f"{name} must be a {kind.__name__}")
    return value


async def serve_lfs(ctx: GatewayContext, exchange: HttpExchange) -> None:
    try:
        await _serve(ctx, exchange)
    except LfsRefused as exc:
        raise HttpError(exc.status, str(exc)) from None
    except InvalidKey as exc:  # a client's key with "." or ".." segments, empty ones...
        raise HttpError(400, str(exc)) from None
    except StorageError as exc:
        raise HttpError(503, f"the object store is unavailable (retry): {exc}") from None


async def _serve(ctx: GatewayContext, exchange: HttpExchange) -> None:
    lfs = ctx.lfs
    parts = exchange.path.strip("/").split("/")  # "lfs", ...
    method = exchange.method
    principal = await principal_of(ctx, exchange)
    if method == "GET" and len(parts) == 3 and parts[1] == "topics":
        topic = parts[2]
        require(ctx, exchange, principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        settings = lfs.lfs_policy(topic)
        await exchange.respond_json(200, {"topic": topic, "enabled": settings.enabled,
                                          "min_bytes": settings.min_bytes, "require_sdk": settings.require_sdk})
    elif method == "POST" and parts == ["lfs", "uploads"]:
        document = await exchange.json_body()
        topic = _field(document, "topic", str)
        require(ctx, exchange, principal, Operation.WRITE, ResourceType.TOPIC, topic)
        size = document.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
            raise HttpError(400, "size must be an int (or absent: a stream whose size is not known)")
        content_type = _field(document, "content_type", str, "application/octet-stream")
        if not _CONTENT_TYPE.fullmatch(content_type):
            raise HttpError(400, "content_type must be a media type (type/subtype, at most 255 characters)")
        upload, plan = await lfs.start(principal, topic, size, content_type,
                                       _field(document, "checksum", str, "sha256"))
        await exchange.respond_json(201, {
            "id": upload.id, "bucket": upload.bucket, "key": upload.key, "size": upload.size,
            "checksum": upload.checksum_alg, "expires_at_ms": upload.expires_ms, "method": plan.method,
            "urls": plan.urls if plan.method != "gateway" else [f"/lfs/uploads/{upload.id}/data"],
            "part_bytes": plan.part_bytes,
        })
    elif method == "PUT" and len(parts) == 4 and parts[1] == "uploads" and parts[3] == "data":
        if exchange.content_length is None and "chunked" not in exchange.headers.get("transfer-encoding", ""):
            raise HttpError(411, "the upload needs a Content-Length or chunked transfer encoding")
        upload = await lfs.receive(parts[2], principal, exchange.body())
        await exchange.respond_json(200, {"id": upload.id, "received": upload.size})
    elif method == "POST" and len(parts) == 4 and parts[1] == "uploads" and parts[3] == "parts":
        document = await exchange.json_body()
        urls = await lfs.part_urls(parts[2], principal, _field(document, "first", int), _field(document, "count", int))
        await exchange.respond_json(200, {"urls": urls})
    elif method == "POST" and len(parts) == 4 and parts[1] == "uploads" and parts[3] == "complete":
        document = await exchange.json_body()
        try:
            uploaded = [Part(int(p["number"]), str(p["etag"])) for p in document.get("parts", [])]
        except (KeyError, TypeError, ValueError):
            raise HttpError(400, "parts must be a list of {number, etag}") from None
        pointer = await lfs.complete(parts[2], principal, _field(document, "checksum", str), uploaded)
        await exchange.respond(200, pointer.encode(), "application/json")
    elif method == "GET" and parts == ["lfs", "objects"]:
        bucket = exchange.query.get("bucket", [""])[0]
        key = exchange.query.get("key", [""])[0]
        require(ctx, exchange, principal, Operation.READ, ResourceType.TOPIC, lfs.owner_of(bucket, key))
        url = await lfs.download_url(bucket, key)
        if url is not None:
            await exchange.respond(307, b"", headers=[("Location", url)])
            return
        size = await lfs.size(bucket, key)
        if size is None:
            raise HttpError(404, f"no object {bucket}/{key}")
        await exchange.respond_stream(200, _chunks(ctx, bucket, key), size)
    else:
        raise HttpError(404, f"no LFS endpoint {method} {exchange.path}")


async def _chunks(ctx: GatewayContext, bucket: str, key: str) -> AsyncIterator[bytes]:
    chunks = ctx.lfs.objects.read(bucket, key, _DOWNLOAD_CHUNK)
    while (chunk := await ctx.lfs.read_chunk(chunks)) is not None:
        yield chunk
