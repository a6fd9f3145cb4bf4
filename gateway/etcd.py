"""A small etcd v3 client over etcd's JSON gateway (``/v3/...``) and httpx.

Why not python-etcd3: its PyPI release no longer imports with current protobuf,
and its gRPC calls block a thread each. The JSON gateway ships with every etcd
server, httpx runs natively on trio (cancellation and timeouts just work), and
the few calls we need — range, put, delete, transactions, leases — are plain
POSTs. Keys and values are bytes on the wire (base64 in JSON).

Security: https endpoints are verified against ``cafile`` (else the system CAs), with a
client certificate for etcd's ``--client-cert-auth``. With etcd's auth enabled the client
logs in with a user name and password (``/v3/auth/authenticate``) and sends the token on
every call; an expired token (HTTP 401) is replaced once and the call repeated. etcd's JSON
gateway cannot pass a certificate's CommonName on as the user (it answers 400 to such
certificates once auth is enabled), so with auth the identity is always the password's.
"""

from __future__ import annotations

import base64
import itertools
import json
import ssl
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass

import httpx
import trio

REWATCH_S = 1.0  # how long a broken watch waits before it reads and watches again

__all__ = ["REWATCH_S", "EtcdClient", "EtcdError", "EtcdUnavailable", "EtcdAuthFailed", "KeyValue", "Compare", "WatchEvent", "prefix_end"]


class EtcdError(Exception):
    """etcd answered with an error, or could not be reached. Its own kind, not a Kafka error:
    what a client is answered is decided in one place (:mod:`kafscale.gateway.failures`)."""


class EtcdUnavailable(EtcdError):
    """No etcd endpoint could be reached in time (clients see a retriable REQUEST_TIMED_OUT)."""


class EtcdAuthFailed(EtcdError):
    """etcd refused the configured user name and password."""


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


def _failure(exc: BaseException) -> str:
    """What went wrong reaching etcd: the root cause, since httpx often says only
    ``ConnectError('')`` when TLS failed (a refused client certificate, an unknown CA)."""
    cause = exc
    while (deeper := cause.__cause__ or cause.__context__) is not None:
        cause = deeper
    return f"{exc!r}" if cause is exc else f"{type(exc).__name__}: {cause}"


def _reason(response: httpx.Response) -> str:
    """etcd's own message from an error answer (never a token: only error bodies get here)."""
    try:
        return str(response.json().get("error") or response.text[:200])
    except ValueError:
        return response.text[:200]


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


def tls_context(cafile: str = "", certfile: str = "", keyfile: str = "") -> ssl.SSLContext:
    """How https endpoints are verified (``cafile``, else the system CAs) and the client
    certificate offered to them. Raises OSError or ssl.SSLError for unreadable files."""
    context = ssl.create_default_context(cafile=cafile or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        context.load_cert_chain(certfile, keyfile or None)
    elif keyfile:
        raise ValueError("an etcd client key was given without its certificate")
    return context


class EtcdClient:
    """Round-robins over the endpoints; a failed endpoint is skipped for the next call."""

    def __init__(self, endpoints: list[str], timeout_ms: int, *, tls: ssl.SSLContext | None = None,
                 username: str = "", password: str = "") -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints given")
        if password and not username:
            raise ValueError("an etcd password was given without a user name")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._order = itertools.cycle(range(len(self.endpoints)))
        transport = None
        if self.endpoints[0].startswith("unix://"):  # a --workers parent's store, on its private socket
            if len(self.endpoints) > 1:
                raise ValueError("a unix:// etcd endpoint comes alone")
            transport = httpx.AsyncHTTPTransport(uds=self.endpoints[0][len("unix://"):])
            self.endpoints = ["http://localhost"]
        self._http = httpx.AsyncClient(timeout=timeout_ms / 1000, verify=tls if tls is not None else True,
                                       transport=transport)
        self._credentials = {"name": username, "password": password} if username else None
        self._token: str | None = None
        self._login = trio.Lock()  # one authentication at a time; the others reuse its token
        self.requests = 0  # calls made (reads and writes), for the benchmarks
        self.writes = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _headers(self) -> dict[str, str]:
        if self._credentials is None:
            return {}
        if self._token is None:
            await self._authenticate(None)
        assert self._token is not None  # _authenticate sets it or raises
        return {"Authorization": self._token}

    async def _authenticate(self, stale: str | None) -> None:
        """Logs in again unless another task already replaced the ``stale`` token."""
        async with self._login:
            if self._token is not None and self._token != stale:
                return
            self._token = None
            credentials = self._credentials
            assert credentials is not None  # only called with credentials (see _headers)
            answer = await self._post("/v3/auth/authenticate", credentials, {})
            if answer.status_code != 200:
                raise EtcdAuthFailed(f"etcd refused user {credentials['name']!r}: {_reason(answer)}")
            self._token = answer.json()["token"]

    async def _post(self, path: str, body: dict, headers: dict[str, str]) -> httpx.Response:
        errors = []
        for _ in range(len(self.endpoints)):
            endpoint = self.endpoints[next(self._order)]
            try:
                return await self._http.post(endpoint + path, json=body, headers=headers)
            except httpx.HTTPError as exc:
                errors.append(f"{endpoint}: {_failure(exc)}")
        raise EtcdUnavailable("etcd is unreachable: " + "; ".join(errors))

    async def _call(self, path: str, body: dict) -> dict:
        self.requests += 1
        headers = await self._headers()
        response = await self._post(path, body, headers)
        if response.status_code == 401 and self._credentials is not None:  # the token expired
            await self._authenticate(headers["Authorization"])
            response = await self._post(path, body, await self._headers())
        if self._credentials is None and (response.status_code == 401 or "user name is empty" in response.text):
            raise EtcdAuthFailed(f"etcd asks for a user ({_reason(response)}): set etcd_username, and etcd_password "
                                 "through the environment (KAFSCALE_ETCD_PASSWORD)")
        if response.status_code != 200:
            raise EtcdError(f"etcd {path} failed with HTTP {response.status_code}: {_reason(response)}")
        return response.json()

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
        headers = await self._headers()
        endpoint = self.endpoints[next(self._order)]
        self.requests += 1
        try:
            async with self._http.stream("POST", endpoint + "/v3/watch", json=body, headers=headers,
                                         timeout=httpx.Timeout(self._http.timeout.connect, read=None)) as response:
                if response.status_code != 200:
                    raise EtcdError(f"etcd watch failed with HTTP {response.status_code}")
                # closed even when we raise (an async generator, though typed as an iterator)
                async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
                    async for line in lines:
                        if not line.strip():
                            continue
                        result = json.loads(line).get("result", {})
                        if result.get("canceled") or int(result.get("compact_revision", 0)):
                            reason = result.get("cancel_reason") or "compacted"
                            if "permission denied" in reason and headers:
                                # An expired token cancels the watch this way: log in again first.
                                await self._authenticate(headers["Authorization"])
                            raise EtcdError(f"etcd cancelled the watch: {reason}")
                        events = [WatchEvent(item.get("type") == "DELETE", _kv(item["kv"]))
                                  for item in result.get("events", [])]
                        if events:
                            yield events
        except httpx.HTTPError as exc:
            raise EtcdUnavailable(f"watch stream from {endpoint} broke: {_failure(exc)}") from exc
        raise EtcdUnavailable(f"etcd at {endpoint} closed the watch stream")

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        self.writes += 1
        await self._call("/v3/kv/put", put_op(key, value, lease)["request_put"])

    async def delete(self, key: str) -> None:
        self.writes += 1
        await self._call("/v3/kv/deleterange", {"key": _b64(key.encode())})

    async def txn(self, compare: list[Compare], success: list[dict], failure: Sequence[dict] = ()) -> tuple[bool, list]:
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
