"""The write side: event types, pure decide functions, the Postgres event store and migrations."""
