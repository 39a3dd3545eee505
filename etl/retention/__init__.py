"""Retention at run time (issue 11): pins held by open snapshots, tags, expiry, vacuum,
compaction and Delta log upkeep, from ``etl maintain`` or inside a continuous run
(in_run.py, gate.py). The pure selection of cuts is consistency/retention.py."""
