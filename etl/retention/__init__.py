"""Retention at run time (issue 11): pins held by open snapshots, tags, expiry, vacuum,
compaction and Delta log upkeep. The pure selection of cuts is consistency/retention.py."""
