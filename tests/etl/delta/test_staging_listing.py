"""Staging directories listed while their writers remove them (a batch that committed):
maintenance sees the ones that stay, and a vanished one is neither an error nor reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import etl.delta.maintenance as maintenance
from etl.delta.files import STAGING_PREFIX
from etl.delta.maintenance import staging_dirs
from etl.storage import list_directory


def _staging(table: Path, name: str) -> Path:
    directory = table / f"{STAGING_PREFIX}{name}"
    (directory / "part=1").mkdir(parents=True)
    (directory / "part=1" / "part-0.parquet").write_bytes(b"x" * 10)
    return directory


def test_a_staging_directory_removed_while_listed_is_skipped(tmp_path, monkeypatch):
    table = tmp_path / "facts"
    crashed = _staging(table, "crashed")
    committed = _staging(table, "committed")

    def listing_then_commit(fs, path, *, recursive=False):
        listed = list_directory(fs, path, recursive=recursive)
        if Path(path) == table:  # the root was listed: the live writer commits now
            shutil.rmtree(committed)
        return listed

    monkeypatch.setattr(maintenance, "list_directory", listing_then_commit)
    found = staging_dirs(str(table))
    assert [d.path for d in found] == [crashed.name]
    assert found[0].size == 10


def test_every_staging_directory_is_reported_when_none_goes(tmp_path):
    table = tmp_path / "facts"
    names = sorted(_staging(table, name).name for name in ("a", "b"))
    (table / "_delta_log").mkdir()
    assert sorted(d.path for d in staging_dirs(str(table))) == names
