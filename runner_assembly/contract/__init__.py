"""The manager ↔ runner contract: the plan's types, the job file and the runner protocol's
messages; msgspec only, so the isolated runner imports it as cheaply as the manager."""
