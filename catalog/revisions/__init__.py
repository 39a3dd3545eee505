"""Revisions (etl recompute): begun, switched at once, or discarded: the interface (base.py) and its SQL implementation (sql.py)."""
