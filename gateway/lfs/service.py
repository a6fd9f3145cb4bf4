"""Large File Support on the gateway: upload sessions, the produce-time check of pointers, and
the clean-up of objects no pointer needs.

An upload session is one JSON document, ``{namespace}/~meta/lfs/{id}.json``, in the store every
gateway of a cluster shares (so any gateway completes a session another started). Its state:

- ``open``: URLs handed out (or bytes arriving); expires after ``lfs_upload_expiry_ms``;
- ``complete``: the object exists with the announced size and checksum; a pointer is expected;
- ``claimed``: a pointer naming it was produced (at ``last_pointer_ms``, renewed by each one).

The clean-up deletes an object, and its document, when its session expired open, when it was
completed and no pointer named it within ``lfs_orphan_ms``, when its topic is gone, or when
the topic's time retention has passed since the last pointer named it. Objects this gateway
did not upload (no document) are never touched.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, replace

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import meta_prefix
from kafscale.protocol.lfs import (
    CHECKSUMS,
    InvalidPointer,
    LfsPointer,
    id_time_ms,
    maybe_pointer,
    new_checksum,
    object_id,
    object_key,
    parse_pointer,
    topic_of_key,
)
from kafscale.protocol.records import iter_records, split_batches
from kafscale.storage_backends import ObjectNotFound, StorageError

from ..clock import Clock
from ..config import LfsConfig
from ..maintenance import MaintenanceFailures, every
from ..metrics import Metrics
from ..storage import AsyncStore
from ..topic_configs import LfsPolicy, TopicPolicy
from .objects import LfsObjects, Part, UploadPlan

__all__ = ["LfsService", "Upload", "LfsRefused", "LfsRecordsRefused"]

log = logging.getLogger("kafscale.lfs")

_HEADS_IN_FLIGHT = 8
_MAX_PARTS = 10_000  # S3's limit on the parts of one multipart upload
_RATE_WINDOW_S = 10.0  # an upload's rate is judged over windows this long
_UPLOAD_BLOCK = 2**20  # body bytes gathered before a worker hashes and writes them


class LfsRefused(Exception):
    """An upload request refused: ``status`` is the HTTP status the endpoint answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LfsRecordsRefused(Exception):
    """Produced records that the topic's LFS configs refuse (POLICY_VIOLATION)."""

    def __init__(self, reason: str, indexes: list[int]) -> None:
        super().__init__(reason)
        self.code, self.reason, self.indexes = ErrorCode.policy_violation, reason, indexes


@dataclass(frozen=True, slots=True)
class Upload:
    id: str
    topic: str
    principal: str
    bucket: str
    key: str
    size: int | None  # announced; None: unknown until the bytes are in (a stream's upload)
    checksum_alg: str
    content_type: str
    created_ms: int
    expires_ms: int
    state: str = "open"
    multipart_id: str | None = None
    checksum: str | None = None  # once complete (or, on the gateway-held store, once received)
    last_pointer_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Upload:
        return cls(**json.loads(raw))

    def pointer(self) -> LfsPointer:
        assert self.checksum is not None and self.size is not None
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created_ms / 1000))
        return LfsPointer(self.bucket, self.key, self.size, self.checksum, self.checksum_alg, self.content_type,
                          created)


def _cause(exc: BaseException) -> BaseException:
    """The first exception in ``exc`` or the groups it holds that is not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        for each in exc.exceptions:
            found = _cause(each)
            if not isinstance(found, trio.Cancelled):
                return found
    return exc



class LfsService:
    def __init__(self, store: AsyncStore, objects: LfsObjects, config: LfsConfig, namespace: str,
                 metrics: Metrics, policy_of: Callable[[str], TopicPolicy | None], failures: MaintenanceFailures,
                 clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._failures = failures
        self.objects = objects
        self._config = config
        self._namespace = namespace
        self._metrics = metrics
        self._policy_of = policy_of  # a topic's enforced configs; None if the topic does not exist
        self._prefix = meta_prefix(namespace, "lfs")
        # Short calls (HEADs, multipart control) and streams (an upload or download held open
        # by its client) take threads from separate pools: slow clients never delay the HEADs
        # that produce requests wait on.
        self._threads = trio.CapacityLimiter(4)
        self._streams = trio.CapacityLimiter(8)
        self._uploads_running: dict[str, int] = {}  # principal -> uploads it sends through the gateway now

    def _document(self, upload_id: str) -> str:
        return f"{self._prefix}{upload_id}.json"

    async def _thread(self, function, *args):
        return await trio.to_thread.run_sync(lambda: function(*args), limiter=self._threads)

    async def _load(self, upload_id: str) -> Upload:
        if id_time_ms(upload_id) is None:
            raise LfsRefused(404, f"no upload session {upload_id!r}")
        try:
            return Upload.from_json(await self._store.get(self._document(upload_id)))
        except ObjectNotFound:
            raise LfsRefused(404, f"no upload session {upload_id!r} (never started, expired or cleaned up)") from None

    async def _save(self, upload: Upload) -> None:
        await self._store.put(self._document(upload.id), upload.to_json())

    def lfs_policy(self, topic: str) -> LfsPolicy:
        policy = self._policy_of(topic)
        if policy is None:
            raise LfsRefused(404, f"topic {topic!r} does not exist")
        if not policy.lfs.enabled:
            raise LfsRefused(409, f"topic {topic!r} does not have kafscale.lfs.enabled=true")
        return policy.lfs

    # -- uploads ---------------------------------------------------------------------------

    async def start(self, principal: str, topic: str, size: int | None, content_type: str,
                    checksum_alg: str) -> tuple[Upload, UploadPlan]:
        """A session for an object of ``size`` bytes (None: not known before its end)."""
        lfs = self.lfs_policy(topic)
        if size is not None and not 0 <= size <= self._config.lfs_max_object_bytes:
            raise LfsRefused(400, f"size {size} is outside [0, lfs_max_object_bytes={self._config.lfs_max_object_bytes}]")
        if checksum_alg not in CHECKSUMS:
            raise LfsRefused(400, f"checksum {checksum_alg!r} is not one of {', '.join(CHECKSUMS)}")
        if lfs.bucket and not self.objects.presigned:
            raise LfsRefused(409, "kafscale.lfs.bucket needs an S3 store; this gateway's store holds one bucket")
        bucket = lfs.bucket or self.objects.default_bucket()
        identifier = object_id()
        key = self.objects.full_key(object_key(lfs.prefix or self._namespace, topic, identifier))
        now = self._clock.now_ms()
        expiry_s = self._config.lfs_upload_expiry_ms // 1000
        plan = await self._thread(self.objects.plan_upload, bucket, key, size, content_type, expiry_s)
        upload = Upload(identifier, topic, principal, bucket, key, size, checksum_alg, content_type, now,
                        now + self._config.lfs_upload_expiry_ms, multipart_id=plan.multipart_id)
        await self._save(upload)
        self._metrics.lfs_upload_requests.inc()
        return upload, plan

    async def _open_session(self, upload_id: str, principal: str) -> Upload:
        upload = await self._load(upload_id)
        if upload.principal != principal:
            self._metrics.lfs_validation_errors.labels("foreign_session").inc()
            raise LfsRefused(403, f"upload session {upload_id} belongs to another principal")
        if upload.state != "open":
            raise LfsRefused(409, f"upload session {upload_id} is already {upload.state}")
        if self._clock.now_ms() > upload.expires_ms:
            self._metrics.lfs_validation_errors.labels("expired_session").inc()
            raise LfsRefused(410, f"upload session {upload_id} expired")
        return upload

    async def receive(self, upload_id: str, principal: str, body: AsyncIterator[bytes]) -> Upload:
        """The gateway-held store: stream the request body into the object, computing size and
        checksum as it passes; a body of another size is refused and nothing is kept.

        No thread waits on the client: the body is read on the event loop, and each block
        of it is handed to a worker only to hash and write it. A client that sends slower
        than ``lfs_min_upload_bytes_per_s`` over a window, or past its session's expiry, is
        ended; a principal has at most ``lfs_max_uploads_per_principal`` uploads at once."""
        upload = await self._open_session(upload_id, principal)
        if self.objects.presigned:
            raise LfsRefused(409, "this gateway's store takes uploads at the pre-signed URLs, not here")
        running = self._uploads_running.get(principal, 0)
        if running >= self._config.lfs_max_uploads_per_principal:
            raise LfsRefused(429, f"{principal} has {running} uploads running already "
                                  f"(lfs_max_uploads_per_principal); retry when one ends")
        self._uploads_running[principal] = running + 1
        try:
            received, checksum = await self._stream_body(upload, body)
        finally:
            self._uploads_running[principal] -= 1
            if not self._uploads_running[principal]:
                del self._uploads_running[principal]
        upload = replace(upload, checksum=checksum, size=received)
        await self._save(upload)
        return upload

    async def _stream_body(self, upload: Upload, body: AsyncIterator[bytes]) -> tuple[int, str]:
        """(bytes received, their checksum), the object written whole; nothing kept on failure."""
        limit = self._config.lfs_max_object_bytes if upload.size is None else upload.size
        checksum = new_checksum(upload.checksum_alg)
        stream = await self._thread(self.objects.open_stream, upload.bucket, upload.key)

        def write(block: bytes) -> None:
            checksum.update(block)  # in the worker: hashing a GiB is seconds of CPU
            stream.write(block)

        received = 0
        block = bytearray()
        window_start, window_bytes = trio.current_time(), 0
        min_rate = self._config.lfs_min_upload_bytes_per_s
        expires_in = max(upload.expires_ms - self._clock.now_ms(), 0) / 1000
        try:
            with trio.move_on_after(expires_in) as expiry:
                async for chunk in body:
                    # The rate of each window, judged when the client next sends something (a
                    # client that sends nothing at all is ended by the HTTP idle timeout).
                    elapsed = trio.current_time() - window_start
                    if elapsed >= _RATE_WINDOW_S:
                        if window_bytes < min_rate * elapsed:
                            self._metrics.lfs_validation_errors.labels("upload_too_slow").inc()
                            raise LfsRefused(408, f"the upload sent {window_bytes} bytes in {elapsed:.0f} s, less "
                                                  f"than lfs_min_upload_bytes_per_s ({min_rate}) allows")
                        window_start, window_bytes = trio.current_time(), 0
                    received += len(chunk)
                    window_bytes += len(chunk)
                    if received > limit:
                        raise (LfsRefused(400, f"the body is larger than the announced {limit} bytes")
                               if upload.size is not None
                               else LfsRefused(413, f"the body is larger than lfs_max_object_bytes ({limit})"))
                    block += chunk
                    if len(block) >= _UPLOAD_BLOCK:
                        await self._stream_call(write, bytes(block))
                        block.clear()
            if expiry.cancelled_caught:
                raise LfsRefused(408, f"upload session {upload.id} expired before its body arrived")
            if upload.size is not None and received != upload.size:
                raise LfsRefused(400, f"the body has {received} bytes, the session announced {upload.size}")
            if block:
                await self._stream_call(write, bytes(block))
            await self._stream_call(stream.close)
        except BaseException:
            stream.abort()  # nothing staged stays
            raise
        return received, checksum.hexdigest()

    async def _stream_call(self, function, *args) -> None:
        await trio.to_thread.run_sync(function, *args, limiter=self._streams)

    async def part_urls(self, upload_id: str, principal: str, first: int, count: int) -> list[str]:
        """Pre-signed URLs of parts ``first`` .. ``first + count - 1`` of a multipart upload (for
        a stream whose size was not known: its parts are asked for as they come)."""
        upload = await self._open_session(upload_id, principal)
        if upload.multipart_id is None:
            raise LfsRefused(409, f"upload session {upload_id} is not a multipart upload")
        if not (1 <= first and 1 <= count <= 1000 and first + count - 1 <= _MAX_PARTS):
            raise LfsRefused(400, f"parts are numbered 1 to {_MAX_PARTS}, at most 1000 per request")
        expiry_s = max((upload.expires_ms - self._clock.now_ms()) // 1000, 1)
        return await self._thread(self.objects.part_urls, upload.bucket, upload.key, upload.multipart_id,
                                  range(first, first + count), expiry_s)

    async def complete(self, upload_id: str, principal: str, checksum: str, parts: list[Part]) -> LfsPointer:
        """Check the object: it exists with the announced size, and on the gateway-held store
        the checksum the client gives is the one of the bytes received. The pointer to produce."""
        upload = await self._open_session(upload_id, principal)
        checksum = checksum.lower()
        try:
            int(checksum, 16)
        except ValueError:
            raise LfsRefused(400, f"checksum {checksum!r} is not hex") from None
        try:
            await self._thread(self.objects.complete, upload.bucket, upload.key, upload.multipart_id, parts)
        except StorageError as exc:
            raise LfsRefused(400, f"the store refused to complete the upload: {exc}") from None
        size = await self._thread(self.objects.size, upload.bucket, upload.key)
        refusal = None
        if size is None:
            refusal = "no object was uploaded"
        elif upload.size is None and size > self._config.lfs_max_object_bytes:
            refusal = f"the object has {size} bytes, more than lfs_max_object_bytes"
        elif upload.size is not None and size != upload.size:
            refusal = f"the object has {size} bytes, the session announced {upload.size}"
        elif upload.checksum is not None and upload.checksum != checksum:
            refusal = f"the {upload.checksum_alg} of the bytes received is {upload.checksum}, not {checksum}"
        if refusal is not None:
            self._metrics.lfs_validation_errors.labels("upload_mismatch").inc()
            await self._thread(self.objects.abort, upload.bucket, upload.key, upload.multipart_id)
            await self._store.delete(self._document(upload.id))
            raise LfsRefused(422, refusal + "; the upload is discarded")
        upload = replace(upload, state="complete", checksum=checksum, size=size)
        await self._save(upload)
        self._metrics.lfs_upload_bytes.inc(size)
        return upload.pointer()

    # -- produce ---------------------------------------------------------------------------

    async def check_produce(self, topic: str, lfs: LfsPolicy, records: bytes | memoryview) -> int:
        """Check a produced record set of an LFS topic; returns the pointers it holds (each one's
        session is marked claimed). Raises :class:`LfsRecordsRefused` under require_sdk for a
        value of min_bytes or more that is not a pointer, a malformed pointer, a pointer outside
        the topic's objects, or one to a missing object or of another size."""
        try:
            values = [record.value for header in split_batches(records) if not header.is_control
                      for record in iter_records(memoryview(records)[header.position:header.position + header.size],
                                                 header)]
        except Exception:
            return 0  # not a valid record set: the produce validation refuses it with the right error
        pointers: list[tuple[int, LfsPointer]] = []
        refused: dict[str, list[int]] = {}
        for index, value in enumerate(values):
            if value is not None and maybe_pointer(value):
                try:
                    pointers.append((index, parse_pointer(value)))
                except InvalidPointer as exc:
                    if lfs.require_sdk:
                        refused.setdefault(f"malformed LFS pointer: {exc}", []).append(index)
                continue
            if lfs.require_sdk and value is not None and len(value) >= lfs.min_bytes:
                refused.setdefault(f"a value of {lfs.min_bytes} bytes or more must be an LFS pointer "
                                   "(kafscale.lfs.require_sdk)", []).append(index)
        try:
            if lfs.require_sdk and pointers and not refused:
                await self._check_pointers(topic, lfs, pointers, refused)
            if not refused:
                await self._claim_all(topic, pointers)
        except BaseException as exc:  # the checks run in nurseries: their failures come in groups
            cause = _cause(exc)
            if isinstance(cause, StorageError):  # retriable: the producer tries again
                raise KafkaError(ErrorCode.kafka_storage_error, f"checking LFS pointers: {cause}") from None
            raise
        if refused:
            reason, indexes = next(iter(refused.items()))
            self._metrics.lfs_validation_errors.labels("produce").inc(sum(len(i) for i in refused.values()))
            raise LfsRecordsRefused(reason, sorted(i for each in refused.values() for i in each))
        self._metrics.lfs_pointer_records.inc(len(pointers))
        return len(pointers)

    def _place(self, topic: str, lfs: LfsPolicy) -> tuple[str, str]:
        """(bucket, key prefix) of the topic's objects."""
        return (lfs.bucket or self.objects.default_bucket(),
                self.objects.full_key(f"{lfs.prefix or self._namespace}/{topic}/lfs/"))

    def _names_an_object_of(self, topic: str, lfs: LfsPolicy, bucket: str, key: str) -> bool:
        place_bucket, prefix = self._place(topic, lfs)
        return bucket == place_bucket and key.startswith(prefix) and ".." not in key.split("/")

    def owner_of(self, bucket: str, key: str) -> str:
        """The topic whose object ``bucket``/``key`` is (a download is authorized on it); only
        keys under a topic's LFS prefix, in its bucket, are served."""
        topic = topic_of_key(key)
        policy = None if topic is None else self._policy_of(topic)
        if topic is None or policy is None or not self._names_an_object_of(topic, policy.lfs, bucket, key):
            raise LfsRefused(404, f"{bucket}/{key} is not an LFS object of an existing topic")
        return topic

    async def _check_pointers(self, topic: str, lfs: LfsPolicy, pointers: list[tuple[int, LfsPointer]],
                              refused: dict[str, list[int]]) -> None:
        limiter = trio.CapacityLimiter(_HEADS_IN_FLIGHT)

        async def check(index: int, pointer: LfsPointer) -> None:
            if not self._names_an_object_of(topic, lfs, pointer.bucket, pointer.key):
                bucket, prefix = self._place(topic, lfs)
                refused.setdefault(f"the pointer names {pointer.bucket}/{pointer.key}, not an object of topic "
                                   f"{topic!r} ({bucket}/{prefix}...)", []).append(index)
                return
            async with limiter:
                started = time.perf_counter()
                size = await self._thread(self.objects.size, pointer.bucket, pointer.key)
                self._metrics.lfs_head_latency.observe((time.perf_counter() - started) * 1000)
            if size is None:
                refused.setdefault("the pointer's object does not exist", []).append(index)
            elif size != pointer.size:
                refused.setdefault("the pointer's size is not its object's", []).append(index)

        async with trio.open_nursery() as nursery:
            for index, pointer in pointers:
                nursery.start_soon(check, index, pointer)

    async def _claim_all(self, topic: str, pointers: list[tuple[int, LfsPointer]]) -> None:
        limiter = trio.CapacityLimiter(_HEADS_IN_FLIGHT)

        async def claim(pointer: LfsPointer) -> None:
            async with limiter:
                await self._claim(topic, pointer)

        async with trio.open_nursery() as nursery:
            for _, pointer in pointers:
                nursery.start_soon(claim, pointer)

    async def _claim(self, topic: str, pointer: LfsPointer) -> None:
        """A pointer names this object now: keep it (the clean-up reads last_pointer_ms)."""
        identifier = pointer.object_id
        if id_time_ms(identifier) is None:
            return
        try:
            upload = Upload.from_json(await self._store.get(self._document(identifier)))
        except ObjectNotFound:
            return  # not uploaded through a gateway, or already cleaned up: nothing to keep
        if upload.topic != topic or upload.key != pointer.key or upload.state == "open":
            return
        await self._save(replace(upload, state="claimed", last_pointer_ms=self._clock.now_ms()))

    # -- downloads -------------------------------------------------------------------------

    async def download_url(self, bucket: str, key: str) -> str | None:
        return await self._thread(self.objects.download_url, bucket, key, self._config.lfs_upload_expiry_ms // 1000)

    async def size(self, bucket: str, key: str) -> int | None:
        return await self._thread(self.objects.size, bucket, key)

    async def read_chunk(self, chunks: Iterator[bytes]) -> bytes | None:
        return await trio.to_thread.run_sync(next, chunks, None, limiter=self._streams)

    # -- clean-up --------------------------------------------------------------------------

    async def sweep(self) -> dict[str, int]:
        """One pass of the clean-up: what it deleted, by reason."""
        deleted: dict[str, int] = {}
        now = self._clock.now_ms()
        for info in await self._store.list(self._prefix):
            with self._failures.guard("LFS clean-up", info.key):  # one session it cannot handle holds up no other
                reason = await self._sweep_one(info.key, now)
                if reason is not None:
                    deleted[reason] = deleted.get(reason, 0) + 1
        return deleted

    async def _sweep_one(self, document: str, now: int) -> str | None:
        """Delete one upload session's object and document if it is due: why, or None."""
        try:
            upload = Upload.from_json(await self._store.get(document))
        except ObjectNotFound:
            return None
        except (ValueError, TypeError) as exc:
            log.error("LFS upload document %s is unreadable (left alone): %s", document, exc)
            return None
        reason = self._why_delete(upload, now)
        if reason is None:
            return None
        await self._thread(self.objects.abort, upload.bucket, upload.key, upload.multipart_id)
        await self._store.delete(document)
        log.info("deleted LFS object %s/%s of topic %s: %s", upload.bucket, upload.key, upload.topic, reason)
        self._metrics.lfs_objects_deleted.labels(reason).inc()
        return reason

    def _why_delete(self, upload: Upload, now: int) -> str | None:
        policy = self._policy_of(upload.topic)
        if policy is None:
            return "topic_deleted"
        if upload.state == "open":
            return "upload_expired" if now > upload.expires_ms else None
        if upload.state == "complete":
            return "orphan" if now > upload.created_ms + self._config.lfs_orphan_ms else None
        if policy.delete and not policy.compact and policy.retention_ms >= 0 \
                and now > upload.last_pointer_ms + policy.retention_ms:
            return "past_retention"
        return None

    async def run_sweeps(self, leads: Callable[[], bool]) -> None:
        """Sweep every ``lfs_sweep_interval_ms`` while ``leads()`` (one gateway of a cluster)."""
        async def sweep_if_leading() -> None:
            if leads():
                await self.sweep()

        await every(self._config.lfs_sweep_interval_ms / 1000, "LFS clean-up", sweep_if_leading, self._failures)
