"""The attempt lifecycle: dispatch, retry, refresh, cancel, the materialisation saga and its
fences, runner capacity, and session turns."""
