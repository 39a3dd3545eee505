"""Job leases: one live instance per job, fenced by the lease's generation.

The interface (base.py) and its SQL implementation (sql.py).
"""
