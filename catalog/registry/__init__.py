"""Pipelines, tables, jobs and lineage: what is registered, and retiring it: the interface (base.py) and its SQL implementation (sql.py)."""
