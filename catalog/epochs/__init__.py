"""Epochs (barriers) and the source slices recorded for them: the interface (base.py) and its SQL implementation (sql.py)."""
