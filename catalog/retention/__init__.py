"""Retention: pins, tags, expired epochs and retention policies.

The interface (base.py) and its SQL implementation (sql.py).
"""
