"""Loading a pipeline file: a Python file that exposes a ``pipeline`` object."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from etl.errors import DeltaBarrierError, PipelineLoadError
from etl.pipeline import Pipeline, parameters


def load_pipeline(path: str | Path, params: Mapping[str, str] | None = None) -> Pipeline:
    """Execute the pipeline file with ``params`` visible to :func:`etl.param`."""
    file = Path(path)
    if not file.is_file():
        problem = "it is a directory" if file.is_dir() else "no such file"
        raise PipelineLoadError(path=str(path), problem=f"{problem} ({file.resolve()})")
    module_name = f"_delta_barrier_pipeline_{abs(hash(file.resolve()))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise PipelineLoadError(path=str(path), problem="not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with parameters(params or {}):
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise PipelineLoadError(
            path=str(path),
            problem=f"syntax error at {exc.filename or path}:{exc.lineno}: {exc.msg}",
        ) from exc
    except DeltaBarrierError:
        raise
    except Exception as exc:
        raise PipelineLoadError(
            path=str(path), problem=f"{type(exc).__name__}: {exc}{_where(exc, file)}"
        ) from exc
    finally:
        sys.modules.pop(module_name, None)
    pipeline = getattr(module, "pipeline", None)
    if not isinstance(pipeline, Pipeline):
        found = "it defines none" if pipeline is None else f"it is a {type(pipeline).__name__}"
        raise PipelineLoadError(
            path=str(path),
            problem=f"it must define a variable `pipeline` holding an etl.Pipeline ({found})",
        )
    return pipeline


def _where(exc: BaseException, file: Path) -> str:
    """`` (at FILE:LINE)``: the last line of the pipeline file the error passed through."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).resolve() == file.resolve()
    ]
    return f" (at {file}:{lines[-1]})" if lines else ""


__all__ = [
    "load_pipeline",
]
