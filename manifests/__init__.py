"""Deployment manifests: the SPEC 2.12 format (msgspec Structs and the JSON Schema generated
from them), its validator, examples, and the Kubernetes manifests deploying the service."""
