"""Runtime assembly and runner jobs, in four sub-packages: ``orchestration`` (the attempt
lifecycle), ``assembly`` (model, resolution, plan, rendering), ``drivers`` (local and
kubernetes) and ``runner`` (the program inside a job)."""
