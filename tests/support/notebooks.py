"""Running the notebooks of notebooks/ the way a user's Jupyter does, in the tests."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def run_notebook(path: Path) -> None:
    """Run the notebook top to bottom in a kernel of this interpreter, which inherits this
    process's environment (set ``ETL_WAREHOUSE`` and friends first); raises
    CellExecutionError, naming the cell, if a cell fails."""
    notebook = nbformat.read(path, as_version=4)
    # "python3" is this interpreter (jupyter_client maps it to sys.executable); the
    # user-wide "delta-barrier" kernel may belong to another checkout.
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=240,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
