"""Validations, job failures, resolutions of blocked epochs, and the status report.

The interface (base.py) and its SQL implementation (sql.py).
"""
