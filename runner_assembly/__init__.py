"""Runtime assembly (to come): the four elements, run policy, secret references, rendering of
the runner job, bundle materialisation, prompts, skills, and the local and kubernetes drivers."""
