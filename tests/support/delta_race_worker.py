"""A process racing others on one Delta table through the fenced commit path.

Usage: python delta_race_worker.py LOCATION JOB GENERATION NAME COMMITS START_AT
           [--claim W] [--for SECONDS] [--no-checkpoints]

Waits until START_AT (a Unix time) and claims the table for JOB at GENERATION (a runner
commits only to tables it claimed); with ``--claim W``, it first waits until worker W has
5 commits in the log. Then it commits COMMITS empty commits (metadata: worker NAME, index
i), or with ``--for``, as many as it can until fenced or SECONDS have passed; with
``--no-checkpoints`` it writes no checkpoint (no pause every tenth commit). Prints one
JSON object: the versions its commits returned, the claim's version, and how it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from deltalake.exceptions import DeltaError  # noqa: E402

import etl.delta.commit  # noqa: E402
from etl.delta import CommitRequest, Fence, claim_table, commit_files  # noqa: E402
from etl.errors import FencedError  # noqa: E402


def _commits_of(location: str, worker: str) -> int:
    try:
        return sum(e.get("race.worker") == worker for e in DeltaTable(location).history())
    except DeltaError:  # a listing that missed an entry being written: look again
        return 0


def main(argv: list[str]) -> int:
    location, job, generation, name, commits, start_at = argv[:6]
    fence = Fence(job, int(generation))
    report: dict[str, object] = {"name": name, "versions": [], "claimed_at": None, "stop": "done"}
    if "--no-checkpoints" in argv:
        etl.delta.commit.checkpoint_due = lambda location, version: False
    while time.time() < float(start_at):
        time.sleep(0.001)
    if "--claim" in argv:
        rival = argv[argv.index("--claim") + 1]
        while _commits_of(location, rival) < 5:
            time.sleep(0.01)
    report["claimed_at"] = claim_table(location, fence=fence)
    schema = pa.schema([("id", pa.int64())])
    until = time.time() + float(argv[argv.index("--for") + 1]) if "--for" in argv else None
    for index in range(int(commits)):
        if until is not None and time.time() > until:
            report["stop"] = "time is up"
            break
        try:
            version = commit_files(
                location,
                CommitRequest(
                    [],
                    schema=schema,
                    mode="append",
                    fence=fence,
                    metadata={"race.worker": name, "race.index": index},
                ),
            )
        except FencedError as exc:
            report["stop"] = f"fenced at {exc.fenced_at}"
            break
        report["versions"].append(version)  # type: ignore[union-attr]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
