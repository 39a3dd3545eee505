"""Retiring a whole pipeline: its registration leaves the catalog (``Catalog.retire_pipeline``),
and its tables' Delta files are kept, or deleted when asked."""

from __future__ import annotations

from dataclasses import dataclass

from pyarrow import fs as pafs

from catalog import Catalog, RetiredPipeline
from etl.delta.layout import filesystem, normalize_location


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
    retired = catalog.retire_pipeline(name)
    dropped = []
    if drop_tables:
        for table in retired.tables:
            files, root = filesystem(normalize_location(table.location))
            if files.get_file_info(root).type is not pafs.FileType.NotFound:
                files.delete_dir(root)
                dropped.append(table.location)
    return PipelineRetirement(retired=retired, dropped=tuple(dropped))


__all__ = ["PipelineRetirement", "retire_pipeline"]
