"""Pipelines, tables, jobs and lineage: what is registered, and retiring it.

The interface (base.py) and its SQL implementation (sql.py).
"""
