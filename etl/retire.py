"""Retiring what a pipeline no longer declares: a job (with the tables it wrote), a table,
or a whole pipeline, whose registration leaves the catalog (``Catalog.retire_pipeline``)
and whose tables' Delta files are kept, or deleted when asked. No Spark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalog import RetirementBlockedError

if TYPE_CHECKING:
    from catalog import Catalog, RetiredPipeline


@dataclass(frozen=True)
class JobRetirement:
    """What retiring a job did."""

    job: str
    tables: tuple[str, ...]
    """Its output and side outputs that were retired with it."""


def retire_job(catalog: Catalog, name: str) -> JobRetirement:
    """Retire job ``name``: it no longer runs or holds its pipeline's COMMIT back. Its output
    and side outputs are retired with it unless one cannot be yet (RetirementBlockedError
    for it: it stays registered). RetirementBlockedError if the job itself cannot be."""
    info = catalog.retire_job(name)
    retired = []
    for table in (info.output, *info.side_outputs):
        try:
            catalog.retire_table(table)
        except RetirementBlockedError:
            continue
        retired.append(table)
    return JobRetirement(job=name, tables=tuple(retired))


@dataclass(frozen=True)
class PipelineRetirement:
    """What retiring a pipeline did."""

    retired: RetiredPipeline
    dropped: tuple[str, ...] = ()
    """The table locations whose files were deleted (with ``drop_tables``)."""


def retire_pipeline(
    catalog: Catalog, name: str, *, drop_tables: bool = False
) -> PipelineRetirement:
    """Remove pipeline ``name``'s registration; with ``drop_tables`` also its tables' files.

    The catalog goes first, so no registration ever points at deleted files. Refused
    (RetirementBlockedError, nothing changed) while a run of the pipeline holds a live lease.
    """
    from pyarrow import fs as pafs

    from etl.delta.layout import filesystem, normalize_location

    retired = catalog.retire_pipeline(name)
    dropped = []
    if drop_tables:
        for table in retired.tables:
            files, root = filesystem(normalize_location(table.location))
            if files.get_file_info(root).type is not pafs.FileType.NotFound:
                files.delete_dir(root)
                dropped.append(table.location)
    return PipelineRetirement(retired=retired, dropped=tuple(dropped))


__all__ = ["JobRetirement", "PipelineRetirement", "retire_job", "retire_pipeline"]
