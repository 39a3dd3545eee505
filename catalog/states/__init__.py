"""Epoch states of each table, seals and COMMIT manifests: the interface (base.py) and its SQL implementation (sql.py)."""
