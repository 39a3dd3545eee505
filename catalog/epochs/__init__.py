"""Epochs (barriers) and the source slices recorded for them.

The interface (base.py) and its SQL implementation (sql.py).
"""
