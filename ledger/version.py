"""The service's version: one constant, importable without Litestar."""

VERSION = "0.1.0"
