"""Generic lease-and-heartbeat work claiming on SQLAlchemy Core (PostgreSQL and SQLite)."""
