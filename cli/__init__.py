"""The ``svc`` command-line program (cyclopts)."""
