"""The status console: one read-only HTML page at ``/`` of the HTTP listener.

:func:`status` gathers what this gateway knows (the cluster's gateways and who leads each
partition; offsets of the partitions it leads and serves (loaded: a page reads no store); the groups it coordinates, with lag; open
transactions; compaction and cleaner backlog; damage; LFS) and :func:`render` turns it
into a page: server-rendered, no script, no build step. In a cluster each gateway shows the
offsets and groups it serves itself (the others' consoles show theirs).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from kafscale import __version__

from .context import GatewayContext

__all__ = ["Status", "status", "render"]

@dataclass
class PartitionRow:
    partition: int
    leader: int | None
    log_start: int | None = None  # None: led by another gateway (its console shows it), or not loaded
    log_end: int | None = None
    last_stable: int | None = None


@dataclass
class TopicRow:
    name: str
    cleanup_policy: str
    partitions: list[PartitionRow] = field(default_factory=list)


@dataclass
class Status:
    node_id: int
    mode: str
    ready: str
    brokers: list[dict]
    topics: list[TopicRow]
    groups: list[dict]
    transactions: list[dict]
    backlog: dict[str, float]
    damage: list[str]


async def status(ctx: GatewayContext, ready: str) -> Status:
    ownership = ctx.ownership
    led: dict[int, int] = {}
    topics = []
    for name, info in sorted(ctx.logs.topics().items()):
        policy = ctx.logs.policy(info)
        row = TopicRow(name, ",".join(kind for kind, on in (("compact", policy.compact), ("delete", policy.delete))
                                      if on))
        for partition in range(info.partitions):
            leader = ownership.leader(name, partition)
            node = leader[0] if leader is not None else None
            if node is not None:
                led[node] = led.get(node, 0) + 1
            cells = PartitionRow(partition, node)
            # A page costs no store request: a partition not served since start (not loaded)
            # is shown without offsets rather than recovered (in a cluster: fenced) for it.
            log = ctx.logs.loaded_log(name, partition) if ownership.owns(name, partition) else None
            if log is not None:
                cells.log_start, cells.log_end = log.log_start_offset, log.high_watermark
                cells.last_stable = log.last_stable_offset
            row.partitions.append(cells)
        topics.append(row)
    ends = {(t.name, p.partition): p.log_end for t in topics for p in t.partitions if p.log_end is not None}
    groups = []
    for group in sorted(ctx.groups.groups.values(), key=lambda g: g.group_id):
        offsets = []
        for (topic, partition), committed in sorted(group.offsets.items()):
            end = ends.get((topic, partition))
            offsets.append({"topic": topic, "partition": partition, "committed": committed.offset, "log_end": end,
                            "lag": None if end is None else max(0, end - committed.offset)})
        groups.append({"group": group.group_id, "type": group.kind, "state": group.state.value,
                       "members": len(group.members),
                       "offsets": offsets})
    now_ms = ctx.clock.now_ms()
    transactions = [{"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state.value,
                     "age_s": (now_ms - t.started_ms) / 1000 if t.started_ms > 0 else None,
                     "partitions": len(t.partitions)}
                    for t in sorted(await ctx.transactions.unfinished(), key=lambda t: t.transactional_id)]
    brokers = [{"node_id": b.node_id, "host": b.host, "port": b.port, "draining": b.draining,
                "partitions_led": led.get(b.node_id, 0)} for b in ownership.brokers()]
    registry = ctx.metrics.registry
    backlog = {name: registry.get_sample_value(name) or 0.0 for name in (
        "kafscale_compaction_backlog_bytes", "kafscale_compaction_backlog_age_seconds",
        "kafscale_cleaner_dirty_bytes", "kafscale_cleaner_max_dirty_ratio",
        "kafscale_lfs_upload_requests_total", "kafscale_lfs_upload_bytes_total")}
    damage = [ctx.logs.damage.summary()] if len(ctx.logs.damage) else []
    damage += [f"rebuilding the transaction state of {name}" for name in sorted(ctx.logs.damage.rebuilding)]
    damage += [f"group {group_id}: stored state unreadable" for group_id in sorted(ctx.groups.damaged)]
    return Status(ctx.node_id, ownership.mode.value, ready, brokers, topics, groups,
                  transactions, backlog, damage)


def _cell(value: object) -> str:
    return "&ndash;" if value is None else html.escape(str(value))


def _table(headers: list[str], rows: Sequence[Sequence[object]], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d2630;background:#f7f8fa}
h1{font-size:1.4rem;margin:0 0 .2rem}h2{font-size:1.1rem;margin:1.6rem 0 .4rem}
.meta{color:#5a6672}.bad{color:#a4161a;font-weight:600}.ok{color:#1b7a3a;font-weight:600}
table{border-collapse:collapse;background:#fff;margin:.3rem 0 1rem}
th,td{border:1px solid #d8dde3;padding:.25rem .6rem;text-align:left}th{background:#eef1f4}
td{font-variant-numeric:tabular-nums}.empty{color:#5a6672;font-style:italic}
"""


def render(page: Status) -> bytes:
    ready_class = "ok" if page.ready.startswith("ready") else "bad"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>Kafscale node {page.node_id}</title><style>{_STYLE}</style></head><body>",
        f"<h1>Kafscale gateway, node {page.node_id}</h1>",
        f'<p class="meta">{html.escape(page.mode)} mode &middot; version {html.escape(__version__)} &middot; '
        f'<span id="ready" class="{ready_class}">{html.escape(page.ready)}</span></p>',
        "<h2>Gateways</h2>",
        _table(["node", "address", "partitions led", "draining"],
               [[f"{b['node_id']} (this one)" if b["node_id"] == page.node_id else b["node_id"],
                 f"{b['host']}:{b['port']}", b["partitions_led"], "yes" if b["draining"] else "no"]
                for b in page.brokers], "no gateway registered"),
        "<h2>Topics</h2>",
    ]
    rows = [[t.name, p.partition, t.cleanup_policy, p.leader, p.log_start, p.log_end, p.last_stable]
            for t in page.topics for p in t.partitions]
    parts.append(_table(["topic", "partition", "cleanup", "leader", "log start", "log end", "last stable"], rows,
                        "no topics"))
    parts.append("<h2>Consumer groups coordinated here</h2>")
    group_rows = []
    for group in page.groups:
        if not group["offsets"]:
            group_rows.append([group["group"], group["state"], group["members"], None, None, None, None, None])
        for offset in group["offsets"]:
            group_rows.append([group["group"], group["state"], group["members"], offset["topic"], offset["partition"],
                               offset["committed"], offset["log_end"], offset["lag"]])
    parts.append(_table(["group", "state", "members", "topic", "partition", "committed", "log end", "lag"], group_rows,
                        "no groups"))
    parts.append("<h2>Open transactions</h2>")
    parts.append(_table(["transactional id", "producer id", "state", "age (s)", "partitions"],
                        [[t["transactional_id"], t["producer_id"], t["state"],
                          None if t["age_s"] is None else f"{t['age_s']:.1f}", t["partitions"]]
                         for t in page.transactions], "none open"))
    parts.append("<h2>Background work</h2>")
    parts.append(_table(["measure", "value"], [[name.removeprefix("kafscale_"), f"{value:g}"]
                                               for name, value in page.backlog.items()], ""))
    parts.append("<h2>Damage</h2>")
    parts.append("".join(f'<p class="bad">{html.escape(item)}</p>' for item in page.damage)
                 or '<p class="empty">none found</p>')
    parts.append("</body></html>")
    return "".join(parts).encode()
