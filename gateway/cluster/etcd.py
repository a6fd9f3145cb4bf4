"""A small etcd v3 client over etcd's JSON gateway (``/v3/...``) and httpx.

Why not python-etcd3: its PyPI release no longer imports with current protobuf,
and its gRPC calls block a thread each. The JSON gateway ships with every etcd
server, httpx runs natively on trio (cancellation and timeouts just work), and
the few calls we need — range, put, delete, transactions, leases — are plain
POSTs. Keys and values are bytes on the wire (base64 in JSON).
"""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass

import httpx

from kafscale.protocol.errors import ErrorCode, KafkaError

__all__ = ["EtcdClient", "EtcdError", "EtcdUnavailable", "KeyValue", "Compare", "WatchEvent", "prefix_end"]


class EtcdError(KafkaError):
    """etcd answered with an error (clients see UNKNOWN_SERVER_ERROR)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.unknown_server_error) -> None:
        super().__init__(code, message)


class EtcdUnavailable(EtcdError):
    """No etcd endpoint could be reached in time (clients see a retriable REQUEST_TIMED_OUT)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.request_timed_out)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    deleted: bool
    kv: KeyValue  # for a delete, only the key and mod_revision are set


@dataclass(frozen=True, slots=True)
class Compare:
    """One transaction guard: ``target`` is VALUE, CREATE, MOD or LEASE."""

    key: str
    target: str
    value: int | bytes
    result: str = "EQUAL"

    def to_json(self) -> dict:
        field = {"VALUE": "value", "CREATE": "create_revision", "MOD": "mod_revision", "LEASE": "lease"}[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key.encode()), "target": self.target, "result": self.result, field: value}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: str) -> str:
    """The first key after every key starting with ``prefix`` (etcd's range_end)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


def _kv(item: dict) -> KeyValue:
    return KeyValue(
        base64.b64decode(item["key"]).decode(), base64.b64decode(item.get("value", "")),
        int(item.get("create_revision", 0)), int(item.get("mod_revision", 0)), int(item.get("lease", 0)),
    )


def put_op(key: str, value: bytes, lease: int = 0) -> dict:
    return {"request_put": {"key": _b64(key.encode()), "value": _b64(value), "lease": str(lease)}}


def delete_op(key: str) -> dict:
    return {"request_delete_range": {"key": _b64(key.encode())}}


def range_op(key: str) -> dict:
    return {"request_range": {"key": _b64(key.encode())}}


class EtcdClient:
    """Round-robins over the endpoints; a failed endpoint is skipped for the next call."""

    def __init__(self, endpoints: list[str], timeout_ms: int) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints given")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._order = itertools.cycle(range(len(self.endpoints)))
        self._http = httpx.AsyncClient(timeout=timeout_ms / 1000)
        self.requests = 0  # calls made (reads and writes), for the benchmarks
        self.writes = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict) -> dict:
        self.requests += 1
        errors = []
        for _ in range(len(self.endpoints)):
            endpoint = self.endpoints[next(self._order)]
            try:
                response = await self._http.post(endpoint + path, json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{endpoint}: {exc!r}")
                continue
            if response.status_code != 200:
                raise EtcdError(f"etcd {path} failed with HTTP {response.status_code}: {response.text[:200]}")
            return response.json()
        raise EtcdUnavailable("etcd is unreachable: " + "; ".join(errors))

    async def get(self, key: str) -> KeyValue | None:
        found = await self._call("/v3/kv/range", {"key": _b64(key.encode())})
        kvs = found.get("kvs", [])
        return _kv(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        return (await self.range_prefix(prefix))[0]

    async def range_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` and the store revision they were read at."""
        found = await self._call("/v3/kv/range", {"key": _b64(prefix.encode()),
                                                  "range_end": _b64(prefix_end(prefix).encode())})
        return [_kv(item) for item in found.get("kvs", [])], int(found["header"]["revision"])

    async def watch_prefix(self, prefix: str, start_revision: int):
        """Changes under ``prefix`` from ``start_revision`` on, as lists of events in revision
        order, until the stream breaks (EtcdUnavailable) or etcd cancels it (EtcdError, e.g.
        the revision was compacted): the caller then reads the prefix again and re-watches."""
        body = {"create_request": {"key": _b64(prefix.encode()), "range_end": _b64(prefix_end(prefix).encode()),
                                   "start_revision": str(start_revision)}}
        endpoint = self.endpoints[next(self._order)]
        self.requests += 1
        try:
            async with self._http.stream("POST", endpoint + "/v3/watch", json=body,
                                         timeout=httpx.Timeout(self._http.timeout.connect, read=None)) as response:
                if response.status_code != 200:
                    raise EtcdError(f"etcd watch failed with HTTP {response.status_code}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("canceled") or int(result.get("compact_revision", 0)):
                        raise EtcdError(f"etcd cancelled the watch: {result.get('cancel_reason') or 'compacted'}")
                    events = [WatchEvent(item.get("type") == "DELETE", _kv(item["kv"]))
                              for item in result.get("events", [])]
                    if events:
                        yield events
        except httpx.HTTPError as exc:
            raise EtcdUnavailable(f"watch stream from {endpoint} broke: {exc!r}") from exc
        raise EtcdUnavailable(f"etcd at {endpoint} closed the watch stream")

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        self.writes += 1
        await self._call("/v3/kv/put", put_op(key, value, lease)["request_put"])

    async def delete(self, key: str) -> None:
        self.writes += 1
        await self._call("/v3/kv/deleterange", {"key": _b64(key.encode())})

    async def txn(self, compare: list[Compare], success: list[dict], failure: list[dict] = ()) -> tuple[bool, list]:
        """Atomically: if every guard holds, run ``success``, else ``failure``.
        Returns whether the guards held and the responses of the branch run."""
        self.writes += 1
        answer = await self._call("/v3/kv/txn", {"compare": [c.to_json() for c in compare],
                                                 "success": list(success), "failure": list(failure)})
        responses = []
        for item in answer.get("responses", []):
            found = item.get("response_range")
            responses.append([_kv(kv) for kv in found.get("kvs", [])] if found is not None else item)
        return bool(answer.get("succeeded", False)), responses

    async def lease_grant(self, ttl_s: int) -> int:
        self.writes += 1
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        if answer.get("error"):
            raise EtcdError(f"lease grant failed: {answer['error']}")
        return int(answer["ID"])

    async def lease_keepalive(self, lease: int) -> int:
        """Refreshes the lease; returns its new TTL in seconds (0: the lease is gone)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def lease_revoke(self, lease: int) -> None:
        self.writes += 1
        await self._call("/v3/lease/revoke", {"ID": str(lease)})
