"""Validations, job failures, resolutions of blocked epochs, and the status report: the interface (base.py) and its SQL implementation (sql.py)."""
