"""Read queries in Spark SQL, read by sqlglot: the tables a query reads (scope analysis),
its text in DuckDB's dialect with Spark's typing and column names kept, and parse errors
in words. Only the Spark and DuckDB dialects are loaded."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from etl.errors import SqlTablesError, without_ansi
from etl.reader.names import OutputNames, spark_column_names


@dataclass(frozen=True)
class ParsedQuery:
    """A read query: its text, its parsed form (Spark SQL) and the tables it reads."""

    text: str
    expression: exp.Query
    tables: tuple[str, ...]
    """Real tables the query reads, in order of appearance, as written (case kept)."""

    def for_duckdb(self, schema: Mapping[str, Mapping[str, str]] | None = None) -> str:
        """The query in DuckDB's dialect (Spark hints, which DuckDB has none of, dropped).

        With the tables' ``schema`` ({table: {column: Spark type}}), Spark's typing rules
        that DuckDB lacks are applied: AVG of DECIMAL(p, s) is DECIMAL(p+4, s+4) in Spark
        (a DOUBLE in DuckDB), so the DuckDB answer is cast to it.
        """
        from sqlglot.errors import ErrorLevel

        expression = self.expression
        if schema and self.averages:
            expression = _spark_decimal_averages(expression, schema)
        return expression.sql(dialect="duckdb", unsupported_level=ErrorLevel.IGNORE)

    @functools.cached_property
    def output_names(self) -> OutputNames:
        """The name Spark gives each output column the query writes (None for a star):
        as the query writes it (an alias, a column), else as Spark names an unnamed one
        (``count(*)`` is ``count(1)``); None when the query is not a SELECT (its columns
        keep the engine's names). A UNION's columns are named by its first query."""
        select = self.expression
        while isinstance(select, exp.SetOperation):
            select = select.left
        if not isinstance(select, exp.Select):
            return None
        return tuple(
            None
            if projection.is_star
            else projection.alias_or_name
            if isinstance(projection, exp.Alias | exp.Column)
            else _spark_column_name(projection)
            for projection in select.expressions
        )

    @property
    def averages(self) -> bool:
        """Whether the query's DuckDB text depends on the tables' column types (it takes
        an AVG, typed by Spark's rules: :meth:`for_duckdb`)."""
        return self.expression.find(exp.Avg) is not None

    def column_names(self, returned: Sequence[str]) -> list[str]:
        """The result's column names, the same whichever engine ran the query
        (:func:`~etl.reader.names.spark_column_names`)."""
        return spark_column_names(self.output_names, returned)


def _spark_column_name(expression: exp.Expression) -> str:
    """The name Spark gives an unnamed output column: its SQL with functions in lower case,
    ``count(*)`` as ``count(1)``, binary operations parenthesized, string literals unquoted
    and columns without their table (``max(c.cnt) + 1`` -> ``(max(cnt) + 1)``)."""

    def spark_form(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            return exp.Count(this=exp.Literal.number(1))
        if isinstance(node, exp.Column) and node.table:
            return exp.column(node.this.copy())
        if isinstance(node, exp.Literal) and node.is_string:
            return exp.Var(this=node.this)
        return node

    if isinstance(expression, exp.Literal) and expression.is_string:
        return expression.this
    holder = exp.Tuple(expressions=[expression.copy().transform(spark_form)])
    for binary in reversed(list(holder.find_all(exp.Binary))):  # innermost first
        if not isinstance(binary.parent, exp.Paren):
            binary.replace(exp.Paren(this=binary.copy()))
    return holder.expressions[0].sql(dialect="spark", normalize_functions="lower")


def _spark_decimal_averages(
    expression: exp.Query, schema: Mapping[str, Mapping[str, str]]
) -> exp.Query:
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    try:
        typed = qualify(
            expression.copy(),
            schema={k: dict(v) for k, v in schema.items()},
            dialect="spark",
            validate_qualify_columns=False,
            quote_identifiers=False,
        )
        annotate_types(typed, schema={k: dict(v) for k, v in schema.items()}, dialect="spark")
    except Exception:  # noqa: BLE001 - typing is best effort; the query still runs
        return expression
    types = [avg.this.type for avg in typed.find_all(exp.Avg, bfs=False)]
    result = expression.copy()
    originals = list(result.find_all(exp.Avg, bfs=False))
    if len(types) != len(originals):
        return expression
    for avg, kind in zip(originals, types, strict=True):
        if kind is None or not kind.is_type(exp.DataType.Type.DECIMAL):
            continue
        params = [p.this.name if hasattr(p.this, "name") else p.name for p in kind.expressions]
        try:
            precision, scale = (int(params[0]), int(params[1])) if len(params) == 2 else (10, 0)
        except ValueError:
            continue
        scale_out = min(scale + 4, 38)
        target = exp.DataType.build(f"DECIMAL({min(precision + 4, 38)}, {scale_out})")
        name = f"avg({avg.this.sql(dialect='spark')})"
        cast = exp.Cast(this=avg.copy(), to=target)
        if isinstance(avg.parent, exp.Select):
            avg.replace(exp.alias_(cast, name, quoted=True))
        else:
            avg.replace(cast)
    return result


@functools.lru_cache(maxsize=64)
def parse_query(sql: str) -> ParsedQuery:
    """Parse one read query (Spark SQL) and find the tables it reads by scope analysis.

    Kept for the process (a read parses its query to check it, to find its tables and to
    run it): the parsed expression is shared, never changed in place.

    A name counts as a table when a query scope selects from it and it is not a CTE or
    derived table visible in that scope: so a CTE hides a table of the same name only
    where the CTE is in scope, a hint's arguments (``/*+ BROADCAST(w) */``) and aliases
    are not tables, and table-valued functions are not tables. Raises SqlTablesError for
    text that does not parse (the message says where, without sqlglot's internals), for
    more than one statement, and for anything but a query (INSERT, DROP, ...).
    """
    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise SqlTablesError(sql=sql, problem=_parse_problem(exc)) from None
    except sqlglot.errors.TokenError as exc:
        raise SqlTablesError(
            sql=sql, problem=f"cannot read the SQL: {without_ansi(str(exc))}"
        ) from None
    if not statements:
        raise SqlTablesError(sql=sql, problem="the SQL is empty")
    if len(statements) > 1:
        raise SqlTablesError(sql=sql, problem="give one query, not several statements")
    (statement,) = statements
    if not isinstance(statement, exp.Query):
        kind = statement.key.upper()
        raise SqlTablesError(
            sql=sql, problem=f"only queries (SELECT, WITH ... SELECT) are read, not {kind}"
        )
    root = build_scope(statement)
    names: list[str] = []
    seen: set[str] = set()
    if root is not None:
        for scope in root.traverse():
            for source in scope.sources.values():
                if not isinstance(source, exp.Table) or not source.name:
                    continue  # a CTE, a derived table, a table-valued function
                if not isinstance(source.this, exp.Identifier):
                    continue
                name = ".".join(part.name for part in source.parts)
                if name.lower() not in seen:
                    seen.add(name.lower())
                    names.append(name)
    # Scopes are visited innermost first; report tables in the order the text names them.
    names.sort(key=lambda n: _position(statement, n))
    return ParsedQuery(text=sql, expression=statement, tables=tuple(names))


def _position(statement: exp.Expression | exp.Query, name: str) -> int:
    for index, table in enumerate(statement.find_all(exp.Table, bfs=False)):
        if ".".join(part.name for part in table.parts).lower() == name.lower():
            return index
    return 0


def _parse_problem(exc: sqlglot.errors.ParseError) -> str:
    """A parse error in words: where, and what (never sqlglot's class names or ANSI codes)."""
    if not exc.errors:
        return f"cannot parse the SQL: {without_ansi(str(exc)).splitlines()[0]}"
    first = exc.errors[0]
    description = str(first.get("description") or "syntax error")
    if description.startswith("Required keyword") or "missing for <class" in description:
        description = "incomplete expression"
    description = re.sub(r"\s*for <class [^>]*>", "", description)
    near = without_ansi(str(first.get("highlight") or "")).strip()
    before = without_ansi(str(first.get("start_context") or "")).strip()
    where = f"line {first.get('line')}, column {first.get('col')}"
    if near:
        where += f", at {near!r}"
    elif before:
        where += f", after {before[-30:]!r}"
    return f"cannot parse the SQL: {description} ({where})"


__all__ = ["ParsedQuery", "parse_query"]
