"""The ``etl`` command: a thin layer over the runner, the snapshot reader and the catalog.

Exit codes: 0 done; 1 a job failed (the message names the job and epoch; the failure is
on record: ``etl status``), or an internal error (a bug: please report it); 2 usage or
configuration error; 3 another run holds the pipeline (nothing was written; the message
says who, since and until when, whether that process lives; ``--wait S``); 4 an epoch is
blocked by a quality gate (``etl status`` names it and the ``etl resolve`` command).

The commands live in :mod:`etl.cli.run` (run, recover), :mod:`etl.cli.show` (status,
lineage, epochs), :mod:`etl.cli.operate` (resolve, retire), :mod:`etl.cli.sql` and
:mod:`etl.cli.admin`; what they print goes
through :mod:`etl.cli.render`. Every heavy import (PySpark above all) happens inside the
command that needs it, so that ``etl status`` answers without starting a JVM; the catalog
(SQLAlchemy) is imported by the commands that open it, so that ``etl --version`` and
``etl --help`` import neither (tests/etl/cli/test_cli_imports.py).
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
from collections.abc import Callable
from enum import StrEnum
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import typer.core

from etl.cli.render import err, escape
from etl.config import scrub

if TYPE_CHECKING:
    from catalog import Catalog, CatalogReads

_Opened = TypeVar("_Opened")

CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="etl",
    help="Delta Barrier: consistent multi-table ETL on Spark and Delta Lake.\n\n"
    "Example: etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)

catalog_app = typer.Typer(
    help="Catalog maintenance.\n\nExample: etl catalog upgrade --warehouse ./warehouse",
    no_args_is_help=True,
    context_settings=CONTEXT,
)
app.add_typer(catalog_app, name="catalog")


class Consistency(StrEnum):
    """The consistency levels, as ``--consistency`` takes them."""

    READ_UNCOMMITTED = "read-uncommitted"
    READ_COMMITTED = "read-committed"
    REPEATABLE_READ = "repeatable-read"


class Format(StrEnum):
    """Output formats. ``table`` is the default of every command (the human one)."""

    TABLE = "table"
    CSV = "csv"
    JSON = "json"


class TableOrJson(StrEnum):
    TABLE = "table"
    JSON = "json"


DEFAULT_FORMAT = Format.TABLE

_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+")


def warehouse_location(value: Any) -> Any:
    """A URL warehouse (``s3://bucket/prefix``) as its URL text (a Path has folded ``//``),
    a local one as a Path."""
    if value is None:
        return value
    text = str(value)
    if text.startswith("file:"):
        return Path(text.removeprefix("file:").removeprefix("//"))
    if match := _URL_SCHEME.match(text):
        return f"{match.group(1)}://{text[match.end() :]}".rstrip("/")
    return Path(text)


def warehouse_root(warehouse: Path | str) -> str:
    """The warehouse as the runtime takes it: an absolute directory, or the URL."""
    return warehouse if isinstance(warehouse, str) else str(warehouse.resolve())


_current_catalog_url: str | None = None


def _remember_url(value: str | None) -> str | None:
    global _current_catalog_url
    _current_catalog_url = value
    return value


# Typed str for typer, which would make a Path of the callback's URL again (folding ``//``):
# the value a command gets is the callback's, a Path for a directory or the URL's text.
Warehouse = Annotated[
    str,
    typer.Option(
        "--warehouse",
        envvar="ETL_WAREHOUSE",
        metavar="DIR|URL",
        callback=warehouse_location,
        help="Directory or object-store URL (s3://bucket/prefix) holding the Delta tables "
        "(and, for a directory, the default SQLite catalog).",
    ),
]

CatalogUrl = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        envvar="ETL_CATALOG_URL",
        metavar="URL",
        callback=_remember_url,
        help="Catalog URL (default: SQLite file in the warehouse; postgresql://... to share).",
    ),
]

PipelineFile = Annotated[Path, typer.Argument(help="Python file that defines `pipeline`.")]

Params = Annotated[
    list[str],
    typer.Option(
        "--param",
        metavar="KEY=VALUE",
        help="Pipeline parameter (repeatable); a recovery or resolution takes the run's.",
    ),
]

PipelineName = Annotated[
    str | None,
    typer.Option(
        "--pipeline", metavar="NAME", help="Only this pipeline (its name in the catalog)."
    ),
]


SparkMaster = Annotated[
    str | None,
    typer.Option("--master", envvar="ETL_SPARK_MASTER", help="Spark master (default local[*])."),
]

SparkVerbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show Spark's log and full error traces.")
]

TableOrJsonFormat = Annotated[TableOrJson, typer.Option("--format", case_sensitive=False)]
"""``--format table|json`` (table: the human one)."""


def _complete_levels(incomplete: str) -> list[str]:
    return [level.value for level in Consistency if level.value.startswith(incomplete)]


ConsistencyOption = Annotated[
    str,
    typer.Option(
        "--consistency",
        metavar="[" + "|".join(level.value for level in Consistency) + "]",
        autocompletion=_complete_levels,
        help="Consistency level of the read (RU, RC, RR also accepted).",
    ),
]


def parse_consistency(text: str | Consistency) -> Consistency:
    """``--consistency`` checked (forgiving: case, separators, RU/RC/RR); exit 2 listing
    the levels otherwise."""
    from consistency import parse_level

    return Consistency(parse_level(str(getattr(text, "value", text))).value)


def open_catalog(
    warehouse: Path | str, catalog_url: str | None, *, create: bool = False
) -> Catalog:
    """The catalog; only ``create`` (running a pipeline) may start a new one. Without it
    nothing is created (no directory, file or table), and a read-only SQLite catalog is
    opened read-only."""
    from catalog import load_catalog

    return _opened(
        lambda: load_catalog(catalog_url, warehouse=warehouse, create=create),
        warehouse,
        catalog_url,
        create=create,
    )


def open_catalog_reads(warehouse: Path | str, catalog_url: str | None) -> CatalogReads:
    """The catalog for a command that reads snapshots (``etl sql``, ``etl snapshot``):
    as :func:`open_catalog`, without SQLAlchemy where it is the embedded SQLite file."""
    from catalog import open_for_reads

    return _opened(
        lambda: open_for_reads(catalog_url, warehouse=warehouse),
        warehouse,
        catalog_url,
        create=False,
    )


def _opened(
    opening: Callable[[], _Opened], warehouse: Path | str, catalog_url: str | None, *, create: bool
) -> _Opened:
    from catalog import CatalogNotFoundError
    from etl.errors import UsageError

    if catalog_url is None and isinstance(warehouse, str):
        raise UsageError(
            f"a warehouse on object storage ({warehouse}) needs a catalog URL: --catalog "
            "postgresql://user@host/db (or ETL_CATALOG_URL) to share it, or "
            "sqlite:////local/path/catalog.sqlite for one machine; the embedded catalog "
            "is a file inside a local warehouse"
        )
    if catalog_url is None and not create and isinstance(warehouse, Path):
        from catalog import CATALOG_FILE_NAME

        if not (warehouse / CATALOG_FILE_NAME).is_file():
            raise UsageError(
                f"no catalog in warehouse {str(warehouse)!r} (no {CATALOG_FILE_NAME} there): "
                "pass --warehouse DIR (or set ETL_WAREHOUSE) for a warehouse that has been "
                "run, or --catalog URL"
            )
    try:
        return opening()
    except ValueError:
        # SQLAlchemy cannot split the URL (often an unencoded @, : or / in the password);
        # its message would quote the URL, so it is not passed on.
        raise UsageError(
            "the catalog URL does not parse: percent-encode special characters of the user "
            "and password (@ as %40, : as %3A, / as %2F)"
        ) from None
    except CatalogNotFoundError as exc:
        raise UsageError(
            f"{exc}; read commands never create a catalog: check --catalog / --warehouse, "
            "or run a pipeline first"
        ) from None


def _catalog_url_in_use() -> str | None:
    return _current_catalog_url or os.environ.get("ETL_CATALOG_URL")


class _ScrubbingFormatter(logging.Formatter):
    """Log lines never carry the catalog password (a driver's message may quote the URL)."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record), _catalog_url_in_use())


def fail(message: str, code: int) -> typer.Exit:
    message = scrub(message, _catalog_url_in_use())
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def guard(fn):
    """Turn project errors into exit codes with a clear message (no tracebacks)."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            failure = exit_for(exc)
            if failure is None:
                raise
            message, code = failure
            raise fail(message, code) from None

    return wrapper


def exit_for(exc: Exception) -> tuple[str, int] | None:
    """The message and exit code of a project error; None for any other exception."""
    # Imported here, once a command failed: etl.errors imports the catalog (SQLAlchemy).
    from etl.errors import (
        DeltaBarrierError,
        ExitCode,
        InternalError,
        JobError,
        PipelineBusyError,
        PipelineLoadError,
        UsageError,
    )

    if isinstance(exc, PipelineBusyError):
        return str(exc), ExitCode.BUSY
    if isinstance(exc, UsageError | PipelineLoadError):
        return str(exc), ExitCode.USAGE
    if isinstance(exc, InternalError):
        return (
            f"internal error: {exc}. This is a bug in Delta Barrier; please report it",
            ExitCode.JOB_FAILED,
        )
    if isinstance(exc, DeltaBarrierError):
        return str(exc), ExitCode.JOB_FAILED if isinstance(exc, JobError) else ExitCode.USAGE
    return None


def parse_params(items: list[str]) -> dict[str, str]:
    from etl.errors import UsageError

    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param takes key=value, got {item!r}")
        params[key] = value
    return params


def quiet_pyspark(verbose: bool) -> None:
    """PySpark's Python-side log reaches stderr only with -v (``etl``'s own log lines follow
    -v / --log-level before the command)."""
    import logging

    if verbose:
        root = logging.getLogger()
        root.setLevel(min(root.level, logging.INFO))
        return
    for name in ("py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def quiet_spark_log(spark, verbose: bool):
    """Spark's JVM log (with its stack traces) on stderr only with -v."""
    if not verbose:
        import logging

        from pyspark.logger import PySparkLogger

        spark.sparkContext.setLogLevel("OFF")
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            # PySpark logs a failed query with its Java stack trace (JSON on stderr); the
            # failure is reported in one line and kept in the catalog instead.
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    return spark


def load_pipeline_file(
    pipeline_file: Path, items: list[str], catalog: Catalog | None, *, check_sources: bool = True
):
    """The pipeline file loaded and validated (:mod:`etl.validation`): every problem at
    once, before Spark starts and before the catalog is written."""
    from etl.validation import validate_file

    params = parse_params(items)
    return validate_file(
        pipeline_file, params, catalog=catalog, check_sources=check_sources
    ).checked()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("delta-barrier")
        except PackageNotFoundError:
            number = "unknown"
        typer.echo(f"etl (Delta Barrier) {number}")
        raise typer.Exit(0)


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@app.callback()
def _global(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, show_default=False, help="More log lines (-vv: debug)."
        ),
    ] = 0,
    log_level: Annotated[
        LogLevel | None,
        typer.Option("--log-level", case_sensitive=False, help="Log level (overrides -v)."),
    ] = None,
    spark_ui: Annotated[
        bool,
        typer.Option(
            "--spark-ui", help="Turn the Spark web UI on (off by default); prints its URL."
        ),
    ] = False,
) -> None:
    """Delta Barrier: consistent multi-table ETL on Spark and Delta Lake."""
    level = (
        log_level.value.upper()
        if log_level is not None
        else ("DEBUG" if verbose >= 2 else "INFO" if verbose == 1 else "WARNING")
    )
    # A batch's progress line is shown unless --log-level asks for less than info.
    configure_logging(level, progress=log_level is None or level in ("DEBUG", "INFO"))
    if spark_ui:
        os.environ["ETL_SPARK_UI"] = "true"


_LIBRARIES = ("py4j", "sqlglot", "urllib3", "kafka", "great_expectations", "sqlalchemy")
"""Third-party packages whose log lines show only from WARNING on."""


def configure_logging(level: str, *, progress: bool = True) -> None:
    """Log lines on stderr at ``level``; third-party chatter stays at WARNING. With
    ``progress``, ``etl run``'s line per batch (see :mod:`etl.cli.progress`) is shown
    even below ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ScrubbingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    quiet = max(logging.WARNING, logging.getLevelName(level))
    # A library may set its own loggers' levels (Great Expectations sets some to INFO):
    # the handler drops their records below ``quiet`` whatever those levels are.
    handler.addFilter(
        lambda record: record.levelno >= quiet or record.name.split(".")[0] not in _LIBRARIES
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for library in _LIBRARIES:
        logging.getLogger(library).setLevel(quiet)
    from etl.cli.progress import LOGGER

    logging.getLogger(LOGGER).setLevel(logging.INFO if progress else logging.NOTSET)


_TYPE_LABELS = {
    "str": "TEXT",
    "int": "INTEGER",
    "float": "NUMBER",
    "int range": "INTEGER",
    "float range": "NUMBER",
}
"""Help's word for each of typer's parameter types (typer writes ``<str>``, ``<int range>``)."""


def _type_label(text: str) -> str:
    """A type as help shows it: ``<str>`` as ``TEXT``, ``<table|json>`` as ``[table|json]``."""
    inner, dots = (text[:-3], "...") if text.endswith("...") else (text, "")
    inner = inner.strip("<>")
    if "|" in inner:
        return f"[{inner}]{dots}"
    return _TYPE_LABELS.get(inner, inner.upper()) + dots


# Help shows flags and metavars, never Python types (``--once``, ``--param KEY=VALUE``,
# ``--format [table|json]``, ``pipeline_file PATH``). Typer (pinned below 0.29: its 0.29
# coerces every option through a pydantic TypeAdapter, a tenth of a second at each start)
# shows its own type names; these three methods turn them into those words.
def _option_metavar(original: Any) -> Any:
    def make_metavar(self: Any, ctx: Any) -> str:
        if self.is_flag or self.count:
            return ""
        if self.metavar is not None:
            return str(self.metavar)
        return _type_label(original(self, ctx))

    return make_metavar


def _argument_type(original: Any) -> Any:
    def get_metavar(self: Any, param: Any, ctx: Any) -> str | None:
        if isinstance(param, typer.core.TyperArgument):
            return param.metavar or _type_label(self.name)
        return original(self, param, ctx)

    return get_metavar


def _argument_usage(original: Any) -> Any:
    def make_metavar(self: Any, ctx: Any, *, usage: bool = False) -> str:
        """An argument in the usage line is its name (``{pipeline_file}``), not its type."""
        if self.metavar is not None:
            return original(self, ctx, usage=usage)
        name = self.name or ""
        if usage:
            name = f"{{{name}}}" if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    return make_metavar


typer.core.TyperOption.make_metavar = _option_metavar(typer.core.TyperOption.make_metavar)  # type: ignore[method-assign]
typer.core.types.ParamType.get_metavar = _argument_type(typer.core.types.ParamType.get_metavar)  # type: ignore[method-assign]
typer.core.TyperArgument.make_metavar = _argument_usage(typer.core.TyperArgument.make_metavar)  # type: ignore[method-assign]


def main() -> None:
    """The ``etl`` entry point (the commands register on :data:`app` in :mod:`etl.cli`).

    Settings come from flags, then the environment, then the project file (etl.toml or
    [tool.etl], see :mod:`etl.config`), then the defaults. The Spark UI is off unless
    ``--spark-ui``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("ETL_SPARK_UI", "false")
    from etl.config import default_map, load_project_config

    command = command_for(sys.argv[1:])
    try:
        defaults = default_map(command, load_project_config())
    except Exception as exc:
        failure = exit_for(exc)
        if failure is None:
            raise
        err.print(f"[bold red]error:[/] {escape(failure[0])}", highlight=False)
        sys.exit(failure[1])
    command.main(
        args=hoist_global_options(command, sys.argv[1:]), prog_name="etl", default_map=defaults
    )


def _past_options(args: list[str], position: int = 0) -> int:
    """The position of the first word of ``args`` from ``position`` on that is not an
    option (nor the value of ``--log-level``): the name of a command."""
    while position < len(args) and args[position].startswith("-"):
        position += 2 if args[position] == "--log-level" else 1
    return position


def command_for(args: list[str]) -> Any:
    """The click group that runs ``etl ARGS``, with only the command ARGS name built when
    they name one, and none for ``etl --version``: building every command's options costs
    more than a short command's own work. The whole group otherwise: ``etl`` and ``etl
    --help`` list the commands, a mistyped one gets suggestions, completion offers them."""
    position = _past_options(args)
    named = args[position] if position < len(args) else None
    global_options = args[:position]
    commands = [
        info
        for info in app.registered_commands
        if (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", "")))
        == named
    ]
    groups = [info for info in app.registered_groups if info.name == named]
    version_only = named is None and "--version" in global_options
    if not (commands or groups or version_only) or {"-h", "--help"} & set(global_options):
        return typer.main.get_command(app)
    built = copy.copy(app)
    built.registered_commands = commands
    built.registered_groups = groups
    return typer.main.get_command(built)


_GLOBAL_OPTION = re.compile(r"^(-v+|--verbose|--spark-ui|--log-level(=.*)?)$")


def hoist_global_options(command: Any, args: list[str]) -> list[str]:
    """``args`` with the global options (``-v``, ``-vv``, ``--log-level``, ``--spark-ui``)
    given after a command moved before it, so that every command takes them (``etl status
    -v``), unless the command has an option of that name itself (``etl run -v``)."""
    position = 0
    while hasattr(command, "commands"):
        position = _past_options(args, position)
        if position >= len(args):
            break
        command = command.commands.get(args[position])
        if command is None:
            return args
        position += 1
    own = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    hoisted: list[str] = []
    rest: list[str] = []
    words = iter(args[position:])
    for word in words:
        if word == "--":
            rest += [word, *words]
            break
        name = "-v" if word.startswith("-v") and not word.startswith("--") else word.split("=")[0]
        if not _GLOBAL_OPTION.match(word) or name in own:
            rest.append(word)
            continue
        hoisted.append(word)
        if word == "--log-level":
            hoisted.append(next(words, ""))
    return [*hoisted, *args[:position], *rest]


__all__ = [
    "load_pipeline_file",
    "quiet_pyspark",
    "quiet_spark_log",
    "DEFAULT_FORMAT",
    "CatalogUrl",
    "Consistency",
    "SparkMaster",
    "SparkVerbose",
    "ConsistencyOption",
    "Format",
    "TableOrJson",
    "TableOrJsonFormat",
    "Warehouse",
    "app",
    "catalog_app",
    "command_for",
    "exit_for",
    "fail",
    "guard",
    "main",
    "open_catalog",
    "parse_consistency",
    "parse_params",
]
