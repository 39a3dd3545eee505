"""Loading a pipeline file: a Python file that exposes a ``pipeline`` object."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

from etl.errors import DeltaBarrierError, PipelineLoadError
from etl.pipeline import Pipeline, parameters


def load_pipeline(path: str | Path, params: Mapping[str, str] | None = None) -> Pipeline:
    """Execute the pipeline file with ``params`` visible to :func:`etl.param`."""
    file = Path(path)
    if not file.is_file():
        raise PipelineLoadError(path=str(path), problem="no such file")
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
            path=str(path), problem=f"syntax error at line {exc.lineno}: {exc.msg}"
        ) from exc
    except DeltaBarrierError:
        raise
    except Exception as exc:
        raise PipelineLoadError(path=str(path), problem=f"{type(exc).__name__}: {exc}") from exc
    finally:
        sys.modules.pop(module_name, None)
    pipeline = getattr(module, "pipeline", None)
    if not isinstance(pipeline, Pipeline):
        raise PipelineLoadError(
            path=str(path),
            problem="it must define a variable `pipeline` holding an etl.Pipeline",
        )
    return pipeline
