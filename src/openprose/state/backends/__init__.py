"""Storage backends behind the state contract: filesystem (default), SQLite, PostgreSQL."""
