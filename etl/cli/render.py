"""The one renderer of the ``etl`` command: rows as a Rich table, CSV or JSON.

Rich is imported when something is printed through it: a command whose output is CSV,
JSON or plain lines (``etl sql --format csv``) does without it."""

from __future__ import annotations

import base64
import contextlib
import csv
import functools
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console
    from rich.table import Table

    from etl.reader import QueryRows


class _FirstUse:
    """A Rich console made when first used."""

    def __init__(self, make: Callable[[], Console]):
        self._make = make
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = self._make()
        return getattr(self._console, name)


@functools.cache
def stdout_console() -> Console:
    """The Rich console of stdout (:data:`out`)."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or captured with no width given: tables take their natural width instead
        # of truncating cells to 80. A terminal, or COLUMNS, sets the width tables fit.
        console = Console(soft_wrap=True, width=1000)
    return console


@functools.cache
def stderr_console() -> Console:
    """The Rich console of stderr (:data:`err`)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


out: Console = _FirstUse(stdout_console)  # type: ignore[assignment]
err: Console = _FirstUse(stderr_console)  # type: ignore[assignment]


def escape(markup: str) -> str:
    """``markup`` with Rich's markup escaped (shown as written)."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


def note(line: str) -> None:
    """One line of plain text on stderr, shown as written (no Rich)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def text(value: object) -> str:
    """A cell's text: ``-`` for nothing; timestamps in ISO-8601 with their zone."""
    if value is None:
        return "-"
    if isinstance(value, datetime | date | time):
        return _iso(value)
    if isinstance(value, Mapping | list | tuple):
        return json_text(value)
    return str(value)


# -- typed JSON ------------------------------------------------------------------------


def _iso(value: datetime | date | time) -> str:
    if isinstance(value, datetime) and value.tzinfo is None:
        # Spark and the catalog keep UTC (spark.sql.session.timeZone=UTC): say so.
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def json_text(value: Any) -> str:
    """``value`` as JSON, typed: numbers (decimals too, every digit kept) as numbers,
    timestamps as ISO-8601 with their zone, structs as objects by field name, binary as
    base64, NaN/infinity as null."""
    return "".join(_encode(value))


def _encode(value: Any) -> Iterator[str]:
    if value is None:
        yield "null"
    elif isinstance(value, bool):
        yield "true" if value else "false"
    elif isinstance(value, int):
        yield str(value)
    elif isinstance(value, float):
        yield json.dumps(value) if math.isfinite(value) else "null"
    elif isinstance(value, Decimal):
        yield format(value, "f") if value.is_finite() else "null"
    elif isinstance(value, str):
        yield json.dumps(value, ensure_ascii=False)
    elif isinstance(value, datetime | date | time):
        yield json.dumps(_iso(value))
    elif isinstance(value, timedelta):
        yield json.dumps(value.total_seconds())
    elif isinstance(value, bytes | bytearray | memoryview):
        yield json.dumps(base64.b64encode(bytes(value)).decode())
    elif isinstance(value, Enum):
        yield from _encode(value.value)
    elif isinstance(value, Mapping):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            if index:
                yield ", "
            yield json.dumps(str(key), ensure_ascii=False)
            yield ": "
            yield from _encode(item)
        yield "}"
    elif isinstance(value, list | tuple | set | frozenset):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ", "
            yield from _encode(item)
        yield "]"
    elif hasattr(value, "asDict"):  # a Spark Row: fields by name
        yield from _encode(value.asDict(recursive=True))
    else:
        yield json.dumps(str(value), ensure_ascii=False)


# -- stdout that may be a closed pipe --------------------------------------------------


@contextlib.contextmanager
def stdout_guard() -> Iterator[None]:
    """Writing into a closed pipe (``etl sql ... | head -2``) ends the command quietly."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        raise typer.Exit(0) from None


def quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush stays silent."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def echo(line: str) -> None:
    """One line of text on stdout."""
    with stdout_guard():
        typer.echo(line)


def print_json(value: Any) -> None:
    """``value`` as typed JSON on stdout (see :func:`json_text`)."""
    echo(json_text(value))


def _csv_cell(value: Any) -> str:
    """A CSV cell: empty for nothing, a decimal in plain notation, else as :func:`text`."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    return text(value)


def rows_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    null: str = "-",
) -> Table:
    """A Rich table of ``rows``; every cell is shown as text, markup escaped, and ``None``
    as ``null`` (Rich markup)."""
    from rich.table import Table  # only a table needs it, not CSV or JSON

    table = Table(title=title)
    for column in columns:
        table.add_column(escape(column))
    for row in rows:
        table.add_row(*(null if v is None else escape(text(v)) for v in row))
    return table


def fitted_columns(
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    width: int,
    drop_first: Sequence[str],
) -> tuple[list[str], list[list[object]]]:
    """``columns`` and ``rows`` without the columns of ``drop_first`` (in that order) that
    a Rich table of natural width ``width`` has no room for: whole columns go, so that the
    cells that stay are not cut."""
    kept = list(columns)

    def natural() -> int:
        widths = [
            max([len(name), *(len(text(row[columns.index(name)])) for row in rows)])
            for name in kept
        ]
        return sum(widths) + 3 * len(kept) + 1  # "│ " + cell + " " per column, and "│"

    for name in drop_first:
        if natural() <= width:
            break
        if name in kept and len(kept) > 1:
            kept.remove(name)
    indexes = [columns.index(name) for name in kept]
    return kept, [[row[i] for i in indexes] for row in rows]


def print_rows(
    columns: Sequence[str], rows: Sequence[Sequence[object]], fmt: str, *, null: str = "-"
) -> None:
    """Rows on stdout as ``table`` (``None`` as ``null``), ``csv`` or ``json`` (a list of
    objects, typed)."""
    fmt = str(getattr(fmt, "value", fmt))
    with stdout_guard():
        if fmt == "json":
            typer.echo(json_text([dict(zip(columns, r, strict=True)) for r in rows]))
        elif fmt == "csv":
            writer = csv.writer(sys.stdout)
            writer.writerow(columns)
            writer.writerows([_csv_cell(v) for v in row] for row in rows)
        else:
            out.print(rows_table(columns, rows, null=null))


def print_query(result: QueryRows, fmt: str) -> None:
    """A query's rows on stdout (see :func:`print_rows`); a table shows SQL NULL as a dim
    ``NULL``, never as a string could be (``-``). Columns are taken by position: a
    result may name two the same."""
    print_rows(result.columns, result.rows, fmt, null="[dim italic]NULL[/]")


def pipeline_cuts(cut: dict) -> str:
    """A cut over tables of several pipelines (``SnapshotReader.describe()``) in one line:
    each pipeline's epoch and barrier, and the barrier time they are aligned at."""
    return f"aligned_at={cut['aligned_at']} " + " ".join(
        f"{p['pipeline']}:epoch={p['epoch']},barrier_ts={p['barrier_ts']}" for p in cut["pipelines"]
    )


__all__ = [
    "echo",
    "err",
    "escape",
    "json_text",
    "note",
    "out",
    "pipeline_cuts",
    "print_json",
    "print_query",
    "print_rows",
    "quiet_stdout",
    "stdout_guard",
    "rows_table",
    "stderr_console",
    "stdout_console",
    "text",
]
