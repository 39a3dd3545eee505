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
command that needs it, so that ``etl status`` answers without starting a JVM.
"""

from __future__ import annotations

import os
import sys
from functools import wraps
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from catalog import Catalog, DeltaBarrierError, load_catalog
from etl.cli.render import err
from etl.errors import InternalError, JobError, PipelineBusyError, PipelineLoadError, UsageError

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_BLOCKED = 0, 1, 2, 3, 4

app = typer.Typer(
    name="etl",
    help="Delta Barrier: consistent multi-table ETL on Spark and Delta Lake.\n\n"
    "Example: etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

catalog_app = typer.Typer(
    help="Catalog maintenance.\n\nExample: etl catalog upgrade --warehouse ./warehouse",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")

Warehouse = Annotated[
    Path,
    typer.Option(
        "--warehouse",
        envvar="ETL_WAREHOUSE",
        help="Directory holding the Delta tables (and the default SQLite catalog).",
    ),
]

CatalogUrl = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        envvar="ETL_CATALOG_URL",
        help="Catalog URL (default: SQLite file in the warehouse; postgresql://... to share).",
    ),
]


def open_catalog(warehouse: Path, catalog_url: str | None, *, create: bool = False) -> Catalog:
    """The catalog; only ``create`` (running a pipeline) may start a new embedded one."""
    if catalog_url is None and not create:
        from catalog.sql import CATALOG_FILE_NAME

        if not (warehouse / CATALOG_FILE_NAME).is_file():
            raise UsageError(
                f"no catalog in warehouse {str(warehouse)!r} (no {CATALOG_FILE_NAME} there): "
                "pass --warehouse DIR (or set ETL_WAREHOUSE) for a warehouse that has been "
                "run, or --catalog URL"
            )
    return load_catalog(catalog_url, warehouse=warehouse)


def fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def guard(fn):
    """Turn project errors into exit codes with a clear message (no tracebacks)."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PipelineBusyError as exc:
            raise fail(str(exc), EXIT_BUSY) from None
        except (UsageError, PipelineLoadError) as exc:
            raise fail(str(exc), EXIT_USAGE) from None
        except InternalError as exc:
            raise fail(
                f"internal error: {exc}. This is a bug in Delta Barrier; please report it",
                EXIT_JOB_FAILED,
            ) from None
        except DeltaBarrierError as exc:
            code = EXIT_JOB_FAILED if isinstance(exc, JobError) else EXIT_USAGE
            raise fail(str(exc), code) from None

    return wrapper


def parse_params(items: list[str]) -> dict[str, str]:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param takes key=value, got {item!r}")
        params[key] = value
    return params


def main() -> None:
    """The ``etl`` entry point (the commands register on :data:`app` in :mod:`etl.cli`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    app()


__all__ = [
    "EXIT_BLOCKED",
    "EXIT_BUSY",
    "EXIT_JOB_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CatalogUrl",
    "Warehouse",
    "app",
    "catalog_app",
    "fail",
    "guard",
    "main",
    "open_catalog",
    "parse_params",
]
