"""What operators see: per-table status, lineage and epoch listings, as plain data."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

from catalog import Catalog, EpochState


@dataclass(frozen=True)
class TableStatusRow:
    table: str
    kind: str
    writer_job: str | None
    latest_processed: int | None
    latest_written: int | None
    written_at: datetime | None
    lag_epochs: int | None
    lag_seconds: float | None
    last_commit: int | None
    blocked: str | None


def status_rows(catalog: Catalog) -> list[TableStatusRow]:
    newest = catalog.latest_epoch()
    commit = catalog.latest_commit()
    rows = []
    for status in catalog.table_status():
        written = status.latest_written
        lag_epochs = lag_seconds = None
        if newest is not None:
            done = written.epoch if written else 0
            lag_epochs = newest.id - done
            if written is not None:
                lag_seconds = (
                    newest.barrier_ts - catalog.get_epoch(written.epoch).barrier_ts
                ).total_seconds()
        blocked = None
        validation = status.latest_validation
        processed = status.latest_processed
        # GateOutcome.summary(): "blocking" lists the failed expectations that keep the
        # epoch from being sealed (empty under `warn`, or when the rest could be sealed).
        blocking = validation.results.get("blocking") if validation is not None else None
        if (
            validation is not None
            and isinstance(blocking, list)
            and blocking
            and processed is not None
            and processed.epoch == validation.epoch
            and processed.state is EpochState.PROCESSED
        ):
            blocked = f"epoch {validation.epoch} failed validation: {', '.join(map(str, blocking))}"
        rows.append(
            TableStatusRow(
                table=status.table,
                kind=status.kind,
                writer_job=status.writer_job,
                latest_processed=processed.epoch if processed else None,
                latest_written=written.epoch if written else None,
                written_at=written.updated_at if written else None,
                lag_epochs=lag_epochs,
                lag_seconds=lag_seconds,
                last_commit=commit.epoch if commit else None,
                blocked=blocked,
            )
        )
    return rows


def to_json(rows: list) -> str:
    """Rows of dataclasses as JSON (datetimes in ISO-8601, states by name)."""
    return json.dumps([asdict(r) for r in rows], default=_json_default, indent=2)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, EpochState):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__}")


def lineage_graph(catalog: Catalog) -> dict[str, list[dict[str, str]]]:
    """Nodes (sources, jobs, tables) and edges of the lineage."""
    nodes: dict[str, str] = {}
    edges = []
    for job in catalog.list_jobs():
        nodes[job.name] = "job"
        if job.source:
            nodes[job.source] = "source"
            edges.append({"from": job.source, "to": job.name})
        for table in job.inputs:
            nodes.setdefault(table, "table")
            edges.append({"from": table, "to": job.name})
        for table in (job.output, *job.side_outputs):
            nodes.setdefault(table, "table")
            edges.append({"from": job.name, "to": table})
    for info in catalog.list_tables():
        nodes.setdefault(info.name, "table")
    return {
        "nodes": [{"name": n, "kind": k} for n, k in sorted(nodes.items())],
        "edges": edges,
    }


def lineage_text(graph: dict, *, fmt: str) -> str:
    kinds = {n["name"]: n["kind"] for n in graph["nodes"]}
    if fmt == "json":
        return json.dumps(graph, indent=2)
    if fmt == "dot":
        shapes = {"source": "cylinder", "job": "box", "table": "folder"}
        lines = ["digraph lineage {", "  rankdir=LR;"]
        lines += [f'  "{n}" [shape={shapes[k]}];' for n, k in kinds.items()]
        lines += [f'  "{e["from"]}" -> "{e["to"]}";' for e in graph["edges"]]
        return "\n".join([*lines, "}"])
    if fmt == "mermaid":
        shape = {"source": ("[(", ")]"), "job": ("[", "]"), "table": ("[/", "/]")}
        lines = ["flowchart LR"]
        lines += [f"  {n}{shape[k][0]}{n}{shape[k][1]}" for n, k in kinds.items()]
        lines += [f"  {e['from']} --> {e['to']}" for e in graph["edges"]]
        return "\n".join(lines)
    outgoing: dict[str, list[str]] = {}
    for edge in graph["edges"]:
        outgoing.setdefault(edge["from"], []).append(edge["to"])
    targets = {e["to"] for e in graph["edges"]}
    lines = []

    def walk(node: str, depth: int, path: tuple[str, ...]) -> None:
        lines.append(f"{'  ' * depth}{node} ({kinds.get(node, '?')})")
        for child in outgoing.get(node, []):
            if child not in path:
                walk(child, depth + 1, (*path, child))

    for root in sorted(n for n in kinds if n not in targets):
        walk(root, 0, (root,))
    return "\n".join(lines)


__all__ = [
    "TableStatusRow",
    "lineage_graph",
    "lineage_text",
    "status_rows",
    "to_json",
]
