"""Retention: pins, tags, expired epochs and retention policies: the interface (base.py) and its SQL implementation (sql.py)."""
