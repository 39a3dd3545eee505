"""The names Spark gives a query's output columns, whichever engine ran it: a rule of
our read path, applied to a plan of names that :mod:`etl.reader.query` makes with sqlglot
and :mod:`etl.reader.translation` keeps (so that applying it needs no sqlglot)."""

from __future__ import annotations

from collections.abc import Sequence

OutputNames = tuple[str | None, ...] | None
"""The names Spark gives a query's output columns, one per column the query writes (None
for a star, whose columns keep the names the engine gives); None when the engine's names
are kept (the query is not a SELECT)."""


def spark_column_names(output: OutputNames, returned: Sequence[str]) -> list[str]:
    """A result's column names, the same whichever engine ran the query: each column the
    query names (``output``) is named as Spark names it (``count(*)`` is ``count(1)``),
    not as the engine that ran it did (DuckDB: ``count_star()``). ``returned``: the names
    the engine gave, star columns included (columns before the first star and after the
    last are matched by position from either end)."""
    if output is None:
        return list(returned)
    stars = [index for index, name in enumerate(output) if name is None]
    if not stars and len(output) != len(returned):
        return list(returned)
    names = list(returned)
    for index, name in enumerate(output):
        if name is None:
            continue
        if not stars or index < stars[0]:
            names[index] = name
        elif index > stars[-1]:
            names[len(names) - (len(output) - index)] = name
    return names


__all__ = ["OutputNames", "spark_column_names"]
