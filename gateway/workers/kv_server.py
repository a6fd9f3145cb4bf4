"""The workers' coordination store served as etcd's JSON gateway (``/v3/kv/*``,
``/v3/watch``, ``/v3/lease/*``) on a unix socket, so a worker is an ordinary cluster
gateway whose etcd is its parent: the cluster code, its fencing by leases and its tests
apply unchanged. Only the calls :mod:`kafscale.gateway.etcd` makes are served.

One trio task per connection (HTTP/1.1 with keep-alive, h11); a watch streams JSON lines
until its client goes. Leases are ended on time by :meth:`KvServer.run`, and at once by
:meth:`KvServer.end_leases_of` when the process that took them is known to be dead: the
kernel names each unix-socket client's process (SO_PEERCRED), so the parent, seeing a
worker exit, frees its partitions without waiting for its leases to run out.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import struct
from collections.abc import Callable

import h11
import trio

from .kv import Compare, Entry, KeyValueStore, LeaseNotFound, Op

__all__ = ["KvServer"]

log = logging.getLogger("kafscale.workers")

MAX_BODY_BYTES = 4 * 2**20  # etcd's own request limit is 1.5 MiB
_IDLE_S = 300.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _raw(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def _kv(key: bytes, entry: Entry) -> dict:
    return {"key": _b64(key), "value": _b64(entry.value), "create_revision": str(entry.create_revision),
            "mod_revision": str(entry.mod_revision), "version": str(entry.version), "lease": str(entry.lease)}


def _compare(item: dict) -> Compare:
    target = item.get("target", "VERSION")
    field = {"VALUE": "value", "CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version",
             "LEASE": "lease"}[target]
    raw = item.get(field)
    value: int | bytes = _raw(raw) if target == "VALUE" else int(raw or 0)
    return Compare(_raw(item.get("key")), target, value, item.get("result", "EQUAL"))


def _op(item: dict) -> Op:
    if "request_range" in item:
        body = item["request_range"]
        return Op("range", _raw(body.get("key")), _raw(body.get("range_end")))
    if "request_put" in item:
        body = item["request_put"]
        return Op("put", _raw(body.get("key")), value=_raw(body.get("value")), lease=int(body.get("lease") or 0))
    if "request_delete_range" in item:
        body = item["request_delete_range"]
        return Op("delete", _raw(body.get("key")), _raw(body.get("range_end")))
    raise ValueError(f"unknown transaction op {sorted(item)}")


class KvServer:
    def __init__(self, kv: KeyValueStore, clock: Callable[[], float] = trio.current_time) -> None:
        self.kv = kv
        self._clock = clock
        self._changed = trio.Event()  # set (and replaced) at every write: watches look again
        self._granted_to: dict[int, int] = {}  # lease -> pid of the process that asked for it

    def _header(self) -> dict:
        return {"revision": str(self.kv.revision)}

    def _wrote(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- the calls

    def end_leases_of(self, pid: int) -> int:
        """Ends every lease the (dead) process ``pid`` took; how many were still held."""
        ended = 0
        for lease, holder in list(self._granted_to.items()):
            if not self.kv.holds(lease):
                del self._granted_to[lease]  # ended already: forget it
            elif holder == pid:
                del self._granted_to[lease]
                self.kv.revoke(lease)
                ended += 1
        if ended:
            self._wrote()
        return ended

    def call(self, path: str, body: dict, peer_pid: int = 0) -> dict:
        """One unary call's answer; raises ValueError (400) or LeaseNotFound (404).
        ``peer_pid``: the calling process, when the socket tells it (0: unknown)."""
        before = self.kv.revision
        try:
            if path == "/v3/kv/range":
                found = self.kv.range(_raw(body.get("key")), _raw(body.get("range_end")))
                return {"header": self._header(), "kvs": [_kv(k, e) for k, e in found], "count": str(len(found))}
            if path == "/v3/kv/put":
                self.kv.put(_raw(body.get("key")), _raw(body.get("value")), int(body.get("lease") or 0))
                return {"header": self._header()}
            if path == "/v3/kv/deleterange":
                deleted = self.kv.delete(_raw(body.get("key")), _raw(body.get("range_end")))
                return {"header": self._header(), "deleted": str(deleted)}
            if path == "/v3/kv/txn":
                held, answers = self.kv.txn([_compare(c) for c in body.get("compare", ())],
                                            [_op(o) for o in body.get("success", ())],
                                            [_op(o) for o in body.get("failure", ())])
                return {"header": self._header(), "succeeded": held, "responses": [_response(a) for a in answers]}
            if path == "/v3/lease/grant":
                ttl = max(1, int(body.get("TTL") or 0))
                lease = self.kv.grant(ttl, self._clock())
                if peer_pid:
                    self._granted_to[lease] = peer_pid
                return {"header": self._header(), "ID": str(lease), "TTL": str(ttl)}
            if path == "/v3/lease/keepalive":
                lease = int(body.get("ID") or 0)
                ttl = self.kv.keepalive(lease, self._clock())
                return {"result": {"header": self._header(), "ID": str(lease), "TTL": str(ttl)}}
            if path == "/v3/lease/revoke":
                if not self.kv.revoke(int(body.get("ID") or 0)):
                    raise LeaseNotFound("requested lease not found")
                return {"header": self._header()}
        finally:
            if self.kv.revision != before:
                self._wrote()
        raise ValueError(f"not served here: {path}")

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Ends leases on time."""
        task_status.started()
        while True:
            deadline = self.kv.next_deadline()
            await trio.sleep_until(min(deadline, self._clock() + 1.0) if deadline is not None else self._clock() + 1.0)
            before = self.kv.revision
            for lease in self.kv.expire(self._clock()):
                log.info("coordination: lease %x ended (its worker stopped keeping it alive)", lease)
            if self.kv.revision != before:
                self._wrote()

    # -- HTTP

    async def serve(self, stream: trio.abc.Stream) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        peer_pid = _peer_pid(stream)
        try:
            while True:
                request = await self._request(stream, connection)
                if request is None:
                    return
                path, body = request
                if not isinstance(body, dict):
                    await self._send(stream, connection, 400, b'{"error": "the body is not a JSON object", "code": 3}')
                    connection.start_next_cycle()
                    continue
                if path == "/v3/watch":
                    await self._watch(stream, connection, body)
                    return
                try:
                    status, answer = 200, self.call(path, body, peer_pid)
                except LeaseNotFound as exc:
                    status, answer = 404, {"error": f"etcdserver: {exc}", "code": 5}
                except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a body not shaped as etcd's
                    status, answer = 400, {"error": f"bad request: {exc!r}", "code": 3}
                await self._send(stream, connection, status, json.dumps(answer).encode())
                if connection.our_state is h11.MUST_CLOSE:
                    return
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError, trio.TooSlowError):
            return
        except Exception:  # one connection's failure must not end the parent and with it every worker
            log.exception("coordination: a connection failed")
            return
        finally:
            await trio.aclose_forcefully(stream)

    async def _request(self, stream: trio.abc.Stream, connection: h11.Connection) -> tuple[str, object] | None:
        """The next request's path and JSON body (None when it is not JSON); None at the end."""
        path, chunks, size = "", [], 0
        with trio.fail_after(_IDLE_S):
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    connection.receive_data(data)
                    continue
                if isinstance(event, h11.ConnectionClosed):
                    return None
                if isinstance(event, h11.Request):
                    path = event.target.decode()
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > MAX_BODY_BYTES:
                        raise h11.RemoteProtocolError("request body too large")
                    chunks.append(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    try:
                        body = json.loads(b"".join(chunks) or b"{}")
                    except ValueError:
                        body = None
                    return path, body

    async def _send(self, stream: trio.abc.Stream, connection: h11.Connection, status: int, payload: bytes) -> None:
        headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
        await stream.send_all(connection.send(h11.Response(status_code=status, headers=headers))
                              + connection.send(h11.Data(data=payload)) + connection.send(h11.EndOfMessage()))

    async def _watch(self, stream: trio.abc.Stream, connection: h11.Connection, body: dict) -> None:
        create = body.get("create_request", {})
        key, range_end = _raw(create.get("key")), _raw(create.get("range_end"))
        start = int(create.get("start_revision") or 0) or self.kv.revision + 1
        await stream.send_all(connection.send(h11.Response(status_code=200, headers=[
            ("content-type", "application/json"), ("transfer-encoding", "chunked")])))

        async def line(result: dict) -> None:
            await stream.send_all(connection.send(h11.Data(data=json.dumps({"result": result}).encode() + b"\n")))

        await line({"header": self._header(), "created": True})
        async with trio.open_nursery() as nursery:
            async def until_gone() -> None:  # the client closes the stream to end a watch
                while await stream.receive_some(4096):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_gone)
            while True:
                changed = self._changed
                events = self.kv.events_since(start, key, range_end)
                if events is None:
                    await line({"header": self._header(), "canceled": True, "compact_revision": str(self.kv.compacted),
                                "cancel_reason": "mvcc: required revision has been compacted"})
                    nursery.cancel_scope.cancel()
                    return
                by_revision: dict[int, list] = {}
                for event in events:
                    by_revision.setdefault(event.revision, []).append(event)
                for revision, group in by_revision.items():
                    await line({"header": {"revision": str(revision)}, "events": [
                        {"type": "DELETE", "kv": {"key": _b64(e.key), "mod_revision": str(e.revision)}}
                        if e.entry is None else {"type": "PUT", "kv": _kv(e.key, e.entry)} for e in group]})
                    start = revision + 1
                await changed.wait()


def _peer_pid(stream: trio.abc.Stream) -> int:
    """The process at the other end of a unix socket (0 for any other stream)."""
    sock = getattr(stream, "socket", None)
    if sock is None or sock.family != socket.AF_UNIX:
        return 0
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[0]


def _response(answer: list[tuple[bytes, Entry]] | int | None) -> dict:
    if answer is None:
        return {"response_put": {}}
    if isinstance(answer, int):
        return {"response_delete_range": {"deleted": str(answer)}}
    return {"response_range": {"kvs": [_kv(k, e) for k, e in answer], "count": str(len(answer))}}
