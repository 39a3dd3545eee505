"""What ``etl run`` shows while it works.

- stderr is not a terminal (cron, Airflow, a log file): one log line per sealed (or
  blocked) batch, on the ``etl.progress`` logger, naming the job, its epoch(s) and rows;
- stderr is a terminal: the same line printed above a Rich progress display with one
  row per job (its latest epoch, batches and rows so far).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from etl.cli.render import err, stderr_console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from etl.engine.batch import BatchResult

LOGGER = "etl.progress"
log = logging.getLogger(LOGGER)


def batch_line(batch: BatchResult) -> str:
    """One batch in words: ``job etl1 epoch 3 sealed: 12 rows`` (``epoch 2..5`` when
    coalesced)."""
    span = (
        f"{batch.first_epoch}..{batch.epoch}" if batch.first_epoch != batch.epoch else batch.epoch
    )
    state = "sealed" if batch.sealed else f"blocked ({batch.blocked_reason})"
    return f"job {batch.job} epoch {span} {state}: {batch.rows} rows"


class BatchProgress:
    """The runner's ``on_batch`` callback; a context manager around the run."""

    def __init__(self, jobs: Sequence[str]) -> None:
        self._jobs = list(jobs)
        self._display: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._totals: dict[str, tuple[int, int]] = {}

    def __enter__(self) -> BatchProgress:
        if err.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.table import Column

            # A row that wrapped would leave stale frames behind when redrawn (tmux):
            # every row stays one line, cut with an ellipsis.
            def one_line() -> Column:
                return Column(no_wrap=True, overflow="ellipsis")

            self._display = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", table_column=one_line()),
                TextColumn("{task.fields[status]}", table_column=one_line()),
                TimeElapsedColumn(),
                console=stderr_console(),
                transient=True,
                refresh_per_second=4,
            )
            for job in self._jobs:
                self._tasks[job] = self._display.add_task(
                    f"job {job}", total=None, status="waiting for its first epoch"
                )
            self._display.start()
        return self

    def __call__(self, batch: BatchResult) -> None:
        line = batch_line(batch)
        if self._display is None:
            log.info(line)
            return
        self._display.console.print(f"  {line}", markup=False, highlight=False)
        batches, rows = self._totals.get(batch.job, (0, 0))
        self._totals[batch.job] = (batches + 1, rows + batch.rows)
        task = self._tasks.get(batch.job)
        if task is not None:
            self._display.update(
                task,
                status=f"epoch {batch.epoch}, {batches + 1} batch(es), {rows + batch.rows} rows",
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._display is not None:
            self._display.stop()


__all__ = ["LOGGER", "BatchProgress", "batch_line"]
