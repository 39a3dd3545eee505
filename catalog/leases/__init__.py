"""Job leases: one live instance per job, fenced by the lease's generation: the interface (base.py) and its SQL implementation (sql.py)."""
