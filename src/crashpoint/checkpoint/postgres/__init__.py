"""The checkpoint store in PostgreSQL, its leases, and the fleet of workers."""
