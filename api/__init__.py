"""The HTTP JSON API (Litestar) under ``/api/v1``: routes, wire types, error envelope."""
