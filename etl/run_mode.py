"""How a run opens epochs: once (for cron or Airflow), or continuously until stopped.
The one place that says which options go with which (``etl run`` passes its flags)."""

from __future__ import annotations

from dataclasses import dataclass

from etl.errors import UsageError

DEFAULT_EPOCH_INTERVAL_SECONDS = 10.0


@dataclass(frozen=True)
class RunMode:
    """Once, or continuously: an epoch every ``epoch_interval`` seconds, at most
    ``max_epochs`` of them, maintenance every ``maintenance_interval`` seconds (None: off)."""

    continuous: bool
    epoch_interval: float = DEFAULT_EPOCH_INTERVAL_SECONDS
    max_epochs: int | None = None
    maintenance_interval: float | None = None

    @classmethod
    def from_options(
        cls,
        *,
        once: bool,
        continuous: bool,
        epoch_interval: float | None = None,
        max_epochs: int | None = None,
        maintenance_interval: float | None = None,
    ) -> RunMode:
        """The mode the options ask for; UsageError (in option names) for one of --once and
        --continuous missing or both given, or a continuous-only option with --once."""
        if once == continuous:
            raise UsageError("give exactly one of --once or --continuous")
        if once and max_epochs is not None:
            raise UsageError("--max-epochs goes with --continuous, not --once")
        if once and epoch_interval is not None:
            raise UsageError("--epoch-interval goes with --continuous, not --once")
        if once and maintenance_interval is not None:
            raise UsageError(
                "--maintenance-interval goes with --continuous, not --once "
                "(after a run --once, run `etl maintain` itself)"
            )
        return cls(
            continuous=continuous,
            epoch_interval=epoch_interval or DEFAULT_EPOCH_INTERVAL_SECONDS,
            max_epochs=max_epochs,
            maintenance_interval=maintenance_interval,
        )


__all__ = ["DEFAULT_EPOCH_INTERVAL_SECONDS", "RunMode"]
