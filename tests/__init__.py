"""Tests: real Postgres (embedded, or SVC_DATABASE_URL), the real Litestar app, the real CLI."""
