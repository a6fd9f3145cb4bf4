"""What security costs: one gateway with PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) listeners,
the same produce and consume load through each in turn (same process, same run), with the
gateway's CPU per GiB, and the cost of opening an authenticated connection. Tansu (the peer)
runs the same load over PLAINTEXT; its TLS could not be started (see the notes)."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

from devkit.certs import CertificateAuthority
from devkit.ports import free_port

from . import report
from .broker_bench import Broker, _load, tansu_binary

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
RUNS = [("100 B", 100, 600_000), ("1 KiB", 1024, 300_000)]
CONNECTIONS = 100  # new clients, one after another, for the connection cost


def _clients(ca: Path, password: str) -> dict[str, dict]:
    tls = {"ssl.ca.location": str(ca)}
    return {
        "PLAINTEXT": {},
        "SSL": {"security.protocol": "SSL", **tls},
        "SASL_SSL": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
                     "sasl.password": password, **tls},
    }


def _cpu(broker: Broker) -> float:
    user, system = broker.cpu_seconds()
    return user + system


def _measure(broker: Broker, bootstrap: str, client: dict, topic: str, size: int, count: int) -> dict:
    before = _cpu(broker)
    produced = _load("produce", bootstrap, topic, count, size, client=client)
    between = _cpu(broker)
    consumed = _load("consume", bootstrap, topic, count, 3, client=client)
    after = _cpu(broker)
    gib = produced["bytes"] / 2**30
    return {"produce_msgs": produced["messages"] / produced["seconds"],
            "produce_mb": produced["bytes"] / produced["seconds"] / 1e6, "errors": produced["errors"],
            "produce_cpu": (between - before) / gib, "consume_msgs": consumed["messages"] / consumed["seconds"],
            "consumed": consumed["messages"], "count": count, "consume_cpu": (after - between) / gib}


def _connections(broker: Broker, bootstrap: str, client: dict) -> dict:
    before = _cpu(broker)
    done = _load("connect", bootstrap, CONNECTIONS, client=client)
    return {"per_second": done["connections"] / done["seconds"],
            "cpu_ms": (_cpu(broker) - before) * 1000 / done["connections"]}


def _row(name: str, label: str, found: dict, plaintext: dict | None) -> list[str]:
    def versus(key: str) -> str:
        return f" ({found[key] / plaintext[key]:.0%} of PLAINTEXT)" if plaintext and plaintext is not found else ""

    produce = f"{found['produce_msgs']:,.0f} msgs/s ({found['produce_mb']:.1f} MB/s){versus('produce_msgs')}"
    if found["errors"]:
        produce += f", {found['errors']} errors"
    return [name, label, produce, f"{found['produce_cpu']:.1f} s",
            f"{found['consume_msgs']:,.0f} msgs/s ({found['consumed']:,}/{found['count']:,}){versus('consume_msgs')}",
            f"{found['consume_cpu']:.1f} s"]


def run() -> None:
    rows = []
    password = secrets.token_urlsafe(18)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ca = CertificateAuthority(workdir / "ca")
        server = ca.issue("gateway", "localhost", server=True)
        ports = {protocol: free_port() for protocol in PROTOCOLS}
        command = [sys.executable, "-m", "kafscale.gateway.cli",
                   "--listeners", ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
                   "--http-port", str(free_port()), "--storage", str(workdir / "data"), "--log-level", "WARNING",
                   "--ssl-certfile", str(server.cert), "--ssl-keyfile", str(server.key),
                   "--sasl-bootstrap-user", "bench", "--sasl-enabled-mechanisms", "SCRAM-SHA-512"]
        env = {**os.environ, "KAFSCALE_SASL_BOOTSTRAP_PASSWORD": password}
        clients = _clients(ca.cert_path, password)
        name = f"kafscale {report.commit()}"
        with Broker(name, command, ports["PLAINTEXT"], workdir, env=env) as gateway:
            for label, size, count in RUNS:
                found: dict[str, dict] = {}
                for protocol in PROTOCOLS:  # interleaved, so drift over the run hits each alike
                    found[protocol] = _measure(gateway, f"127.0.0.1:{ports[protocol]}", clients[protocol],
                                               f"bench-{protocol.lower()}-{size}", size, count)
                for protocol in PROTOCOLS:
                    rows.append(_row(f"{name} {protocol}", label, found[protocol], found["PLAINTEXT"]))
                    print(" | ".join(rows[-1]))
            for protocol in PROTOCOLS:
                cost = _connections(gateway, f"127.0.0.1:{ports[protocol]}", clients[protocol])
                rows.append([f"{name} {protocol}", f"{CONNECTIONS} new clients, one after another",
                             f"{cost['per_second']:,.0f} connections/s", f"{cost['cpu_ms']:.1f} ms per connection",
                             "", ""])
                print(" | ".join(rows[-1]))
        tansu = tansu_binary()
        if tansu is not None:
            port = free_port()
            url = f"tcp://127.0.0.1:{port}"
            with Broker("tansu 0.6 (memory) PLAINTEXT", [str(tansu), "broker", "--listener-url", url,
                                                       "--advertised-listener-url", url], port, workdir) as peer:
                for label, size, count in RUNS:
                    rows.append(_row(peer.name, label, _measure(peer, peer.bootstrap, {}, f"bench-{size}", size, count),
                                     None))
                    print(" | ".join(rows[-1]))
    report.save(
        "60-security",
        "Security: PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) listeners of one gateway",
        "python -m bench security",
        "One gateway process with three listeners (filesystem storage, fsync, default config); confluent-kafka "
        "2.16 in a separate process runs the same load through each listener in turn, interleaved per message "
        "size: produce = 3 partitions, acks=all, linger.ms=5, uncompressed; consume = assign from offset 0. "
        "CPU = the gateway's user+system seconds per GiB of payload during that phase (TLS adds the cipher "
        "work: AES-GCM through Python's ssl module, i.e. OpenSSL, on both directions). Connections = a new "
        "AdminClient per connection doing ApiVersions, the TLS handshake and SCRAM where the listener asks for "
        "them, and Metadata; gateway CPU per connection includes the TLS handshake (ECDSA P-256 certificate) "
        "and SCRAM's HMACs (the client does the 4096 PBKDF2 iterations). SCRAM credentials are the bootstrap "
        "user's, made at start. Peer: Tansu 0.6 over PLAINTEXT with the same load in the same run; its TLS "
        "could not be used (tansu 0.6.0 refuses --cert with --key, and given one PEM with both it still "
        "serves plaintext), so there is no peer figure for TLS. Before the gateway read TLS through its own "
        "memory-BIO stream (commit fbebb43, trio.SSLStream: one TLS record per read, and librdkafka writes ~3 KB "
        "records), the same run gave SSL 1 KiB produce 117,990 msgs/s at 9.6 s of gateway CPU per GiB (28% of "
        "PLAINTEXT). The connection rows are dominated by the client starting a new AdminClient each time and "
        "vary by a few ms between runs.",
        ["listener", "load", "produce", "gateway CPU per GiB produced", "consume", "gateway CPU per GiB consumed"],
        rows,
    )
