"""Deployment manifests (to come): the SPEC 2.12 JSON Schema, its validator, examples and the
Kubernetes manifests that deploy the service itself."""
