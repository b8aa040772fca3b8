"""The program inside a runner job (local process or pod), its assembly steps, and the
reference backend."""
