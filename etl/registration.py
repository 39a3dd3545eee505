"""A pipeline's registration in the catalog: its name there, and its tables and jobs,
registered in one catalog transaction, or checked read-only before anything starts
(``Catalog.register_pipeline``, ``Catalog.check_registration``)."""

from __future__ import annotations

from pyarrow import fs as pafs

from catalog import PIPELINE_DEFAULT, Catalog, JobSpec, TableSpec, UnknownTableError
from etl.delta.layout import filesystem, normalize_location
from etl.errors import UsageError
from etl.pipeline import Pipeline


def catalog_pipeline_name(pipeline: Pipeline, catalog: Catalog, warehouse: str) -> str:
    """The pipeline's name in the catalog: ``pipeline.name``, except for a warehouse whose
    tables were registered before pipelines were a catalog notion (they stay in the
    default pipeline)."""
    for spec in pipeline.table_specs(warehouse):
        try:
            known = catalog.get_table(spec.name)
        except UnknownTableError:
            continue
        return PIPELINE_DEFAULT if known.pipeline == PIPELINE_DEFAULT else pipeline.name
    return pipeline.name


def _specs(pipeline: Pipeline, warehouse: str) -> tuple[list[TableSpec], list[JobSpec]]:
    return pipeline.table_specs(warehouse), [pipeline.job_spec(j) for j in pipeline.ordered_jobs()]


def register_pipeline(catalog: Catalog, pipeline: Pipeline, warehouse: str, name: str) -> None:
    """Register the pipeline's tables and jobs as pipeline ``name`` (idempotent); a name
    another pipeline owns is refused (NameOwnedError) and nothing is registered."""
    catalog.register_pipeline(name, *_specs(pipeline, warehouse))


def check_registration(catalog: Catalog, pipeline: Pipeline, warehouse: str) -> None:
    """Refuse, read-only, what registering the pipeline would refuse up front: names another
    pipeline owns (NameOwnedError), input tables of another pipeline (PipelineMismatchError),
    and (UsageError) a new table whose location already holds a Delta table: its commits
    name epochs this catalog never issued (say, a table `etl retire pipeline` kept)."""
    name = catalog_pipeline_name(pipeline, catalog, warehouse)
    tables, jobs = _specs(pipeline, warehouse)
    catalog.check_registration(name, tables, jobs)
    registered = {info.name for info in catalog.list_tables(include_retired=True)}
    for spec in tables:
        if spec.name not in registered and _holds_delta_table(spec.location):
            raise UsageError(
                f"table {spec.name!r} is not registered in the catalog, but its location "
                f"{spec.location} holds a Delta table (left by a removed pipeline, or written "
                "with another catalog): its commits name epochs this catalog never issued. "
                "Move it away or delete it, then run again"
            )


def _holds_delta_table(location: str) -> bool:
    files, root = filesystem(normalize_location(location))
    return files.get_file_info(f"{root}/_delta_log").type is not pafs.FileType.NotFound


__all__ = ["catalog_pipeline_name", "check_registration", "register_pipeline"]
