"""The runner side of assembly: what happens inside a runner job before the backend starts."""
