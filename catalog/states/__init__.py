"""Epoch states of each table, seals and COMMIT manifests.

The interface (base.py) and its SQL implementation (sql.py).
"""
