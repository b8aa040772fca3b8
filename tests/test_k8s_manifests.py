"""The Kubernetes manifests that deploy the service: official schemas, Pod Security
"restricted", least-privilege RBAC, and the example deployment manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner_assembly.assembly.names import manager_url

K8S = Path("manifests/k8s")
KUBERNETES_VERSION = "1.30"


def objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def kinds() -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects():
        by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    present = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == present
    assert set(kinds()) == {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap",
                            "Deployment", "Service", "NetworkPolicy"}


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_validates_against_the_official_schema(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    if obj["kind"] != "Namespace":
        assert obj["metadata"]["namespace"] == "svc-v01"


def pod_security_violations(pod: dict[str, Any]) -> list[str]:
    """The checks of the Pod Security Standards "restricted" profile that apply here."""
    problems = []
    pod_ctx = pod.get("securityContext", {})
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        problems.append("host namespaces")
    for volume in pod.get("volumes", []):
        allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret", "name"}
        if set(volume) - allowed:
            problems.append(f"volume type {set(volume) - allowed}")
    if pod_ctx.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
        problems.append("pod seccompProfile")
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        ctx = container.get("securityContext", {})
        name = container["name"]
        if ctx.get("privileged"):
            problems.append(f"{name}: privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser 0")
        if ctx.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities must drop ALL")
        if set(ctx.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: added capabilities")
        if any(p.get("hostPort") for p in container.get("ports", [])):
            problems.append(f"{name}: hostPort")
        if "@sha256:" not in container["image"]:
            problems.append(f"{name}: image must be digest-pinned")
    return problems


def test_the_deployment_meets_pod_security_restricted() -> None:
    (deployment,) = kinds()["Deployment"]
    assert pod_security_violations(deployment["spec"]["template"]["spec"]) == []
    (namespace,) = kinds()["Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_checker_catches_what_restricted_forbids() -> None:
    pod = {"containers": [{"name": "c", "image": "busybox:latest",
                           "securityContext": {"privileged": True}}],
           "volumes": [{"name": "h", "hostPath": {"path": "/"}}], "hostNetwork": True}
    problems = pod_security_violations(pod)
    assert {"host namespaces", "pod seccompProfile", "c: privileged",
            "c: image must be digest-pinned"} <= set(problems)


ALLOWED = {("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
           ("", "secrets"): {"create"},
           ("", "pods"): {"get", "list"},
           ("", "persistentvolumeclaims"): {"create", "get", "list", "delete"}}


def test_rbac_grants_nothing_broader_than_jobs_secrets_and_pvcs_in_svc_v01() -> None:
    by_kind = kinds()
    assert "ClusterRole" not in by_kind and "ClusterRoleBinding" not in by_kind
    (role,) = by_kind["Role"]
    assert role["metadata"]["namespace"] == "svc-v01"
    for rule in role["rules"]:
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"]
        assert "resourceNames" not in rule or rule["resourceNames"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) in ALLOWED, (group, resource)
                assert set(rule["verbs"]) <= ALLOWED[(group, resource)]
    (binding,) = by_kind["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    (account,) = by_kind["ServiceAccount"]
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": account["metadata"]["name"],
                                    "namespace": "svc-v01"}]
    (deployment,) = by_kind["Deployment"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == \
        account["metadata"]["name"]


def test_the_example_manifest_describes_this_deployment() -> None:
    example = yaml.safe_load(Path("manifests/examples/svc-dev.yaml").read_text())
    (deployment,) = kinds()["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    (service,) = example["services"]
    assert service["image"] == container["image"]
    assert service["replicas"] == deployment["spec"]["replicas"]
    assert service["namespace"] == deployment["metadata"]["namespace"] == example["namespace"]
    assert service["healthPath"] == container["livenessProbe"]["httpGet"]["path"]


def test_runner_pods_may_reach_the_manager_service_and_nothing_new_beyond_it() -> None:
    policies = {p["metadata"]["name"]: p for p in kinds()["NetworkPolicy"]}
    (service,) = kinds()["Service"]
    (deployment,) = kinds()["Deployment"]
    (config,) = kinds()["ConfigMap"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    (port,) = [p["containerPort"] for p in container["ports"]
               if p["name"] == service["spec"]["ports"][0]["targetPort"]]
    runner_egress = policies["svc-runner"]["spec"]["egress"]
    to_manager = [rule for rule in runner_egress if rule.get("to")]
    assert to_manager == [{"to": [{"podSelector": {"matchLabels": service["spec"]["selector"]}}],
                           "ports": [{"port": port, "protocol": "TCP"}]}]
    other_ports = sorted(p["port"] for rule in runner_egress if not rule.get("to")
                         for p in rule["ports"])
    assert other_ports == [22, 53, 53, 443], "DNS, and HTTPS/SSH for bundles and providers"
    manager_in = policies["svc-manager"]["spec"]["ingress"]
    assert any(p["port"] == port for rule in manager_in for p in rule["ports"])
    url = f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert config["data"]["SVC_RUNNER_API_URL"] == url == manager_url("svc-v01")
