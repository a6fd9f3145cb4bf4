"""Protocol hot paths: produce validation (CRC-32C + structure + re-stamp) and record decoding."""

from __future__ import annotations

import time

from kafscale.protocol.compression import Compression
from kafscale.protocol.records import build_batch, iter_records, restamp, validate_record_set

from . import report


def _best(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _record_set(value_size: int, records_per_batch: int, batches: int, codec=Compression.NONE) -> bytes:
    payload = bytes((i * 7) & 0xFF for i in range(value_size))
    batch = build_batch(
        [(b"key-%08d" % i, payload) for i in range(records_per_batch)],
        base_timestamp=1_700_000_000_000,
        compression=codec,
    )
    return batch * batches


def bench_validation() -> list[list]:
    """The produce hot path, with and without the record walk (count, offset deltas and
    field lengths checked against each batch header), so its cost is visible."""
    from kafscale.protocol.records import split_batches

    rows = []
    for label, value_size, per_batch, batches, codec in [
        ("16 KiB batches of 100 B (librdkafka default)", 100, 140, 512, Compression.NONE),
        ("16 KiB batches of 100 B, lz4", 100, 140, 512, Compression.LZ4),
        ("1 MiB batches of 1 KiB", 1000, 1000, 8, Compression.NONE),
    ]:
        data = _record_set(value_size, per_batch, batches, codec)
        count = per_batch * batches

        def headers_only(data=data):
            buffer = bytearray(data)  # the copy a produce handler makes to re-stamp
            restamp(buffer, split_batches(buffer), 0)

        def with_records(data=data):
            buffer = bytearray(data)
            restamp(buffer, validate_record_set(buffer), 0)

        before, after = _best(headers_only), _best(with_records)
        for name, seconds in (("header + CRC + re-stamp", before), ("+ record walk (produce today)", after)):
            rows.append([name, label, f"{count:,} records",
                         f"{count / seconds / 1e6:.2f} M records/s, {seconds / count * 1e9:.0f} ns/record"])
    return rows


def bench_decode() -> list[list]:
    rows = []
    for codec in Compression:
        data = _record_set(100, 500, 40, codec)
        from kafscale.protocol.records import split_batches

        headers = split_batches(data)
        count = sum(h.records_count for h in headers)

        def run(data=data, headers=headers):
            for header in headers:
                for _ in iter_records(data, header):
                    pass

        seconds = _best(run, 3)
        rows.append(["decode records (100 B values)", codec.name.lower(), f"{count:,} records",
                     f"{count / seconds / 1e6:.2f} M records/s ({count * 100 / seconds / 1e6:.0f} MB/s of values)"])
    return rows


def bench_columns() -> list[list]:
    from kafscale.protocol.records import decode_columns, split_batches

    data = _record_set(100, 500, 40)
    headers = split_batches(data)
    count = sum(h.records_count for h in headers)

    def run():
        columns = ([], [], [], [], None)
        for header in headers:
            decode_columns(data, header, 0, 1 << 62, columns)

    seconds = _best(run, 3)
    return [["decode into columns (Spark reader path)", "none", f"{count:,} records",
             f"{count / seconds / 1e6:.2f} M records/s"]]


def run() -> None:
    rows = bench_validation() + bench_decode() + bench_columns()
    for row in rows:
        print(" | ".join(row))
    report.save(
        "10-protocol",
        "Protocol layer: produce validation and record decoding",
        "python -m bench protocol",
        "Single thread, best of several runs. Validation parses each batch header, checks "
        "its CRC-32C, re-stamps the base offset in a copy of the record set, and (since the "
        "hostile-clients issue) walks the records after decompression to check their count, "
        "offset deltas and field lengths against the header; both rows are shown. Decoding "
        "is pure Python (varints, keys, values, headers) after decompression.",
        ["operation", "input", "size", "throughput"],
        rows,
    )
