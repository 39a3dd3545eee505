"""Revisions (etl recompute): begun, switched at once, or discarded.

The interface (base.py) and its SQL implementation (sql.py).
"""
