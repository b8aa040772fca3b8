"""The Kubernetes manifests that deploy the service: official schemas, Pod Security
"restricted", least-privilege RBAC, probes that survive a database outage, disruption and
spreading, the overlays as kustomize renders them, and the example deployment manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner_assembly.assembly.names import manager_url

K8S = Path("manifests/k8s/base")
OVERLAYS = sorted(p.name for p in Path("manifests/k8s/overlays").iterdir())
KUBERNETES_VERSION = "1.30"


def objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def merged(base: Any, patch: Any) -> Any:
    """A strategic-merge patch as kustomize applies the ones here: maps merge, ``null``
    deletes, lists of named items merge by name, other values are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merged(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(patch, list) \
            and all(isinstance(i, dict) and "name" in i for i in [*base, *patch]):
        by_name = {item["name"]: item for item in patch}
        return [merged(item, by_name[item["name"]]) if item["name"] in by_name else item
                for item in base]
    return patch


def rendered(overlay: str) -> list[dict[str, Any]]:
    """The overlay's objects: the base with its images, replicas and patches applied."""
    folder = Path("manifests/k8s/overlays") / overlay
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../base"]
    found = objects()
    for patch in kustomization.get("patches", []):
        change = yaml.safe_load((folder / patch["path"]).read_text())
        key = (change["kind"], change["metadata"]["name"])
        targets = [i for i, o in enumerate(found) if (o["kind"], o["metadata"]["name"]) == key]
        assert targets, f"{overlay}: {patch['path']} patches nothing"
        found[targets[0]] = merged(found[targets[0]], change)
    for entry in kustomization.get("replicas", []):
        (deployment,) = [o for o in found if o["kind"] == "Deployment"
                         and o["metadata"]["name"] == entry["name"]]
        deployment["spec"]["replicas"] = entry["count"]
    for image in kustomization.get("images", []):
        containers = [c for o in found if o["kind"] == "Deployment"
                      for c in o["spec"]["template"]["spec"]["containers"]
                      if c["image"].split("@")[0].split(":")[0] == image["name"]]
        assert containers, f"{overlay}: the image {image['name']} is not in the base"
        for container in containers:
            container["image"] = image.get("newName", image["name"]) + (
                f"@{image['digest']}" if "digest" in image else f":{image['newTag']}")
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
                            "Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_objects_that_validate(overlay: str) -> None:
    for obj in rendered(overlay):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    (deployment,) = [o for o in rendered(overlay) if o["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert not image.startswith("registry.invalid/"), "every overlay names its image"


def test_production_pins_its_image_by_digest_and_keeps_a_replica_through_a_drain() -> None:
    found = {o["kind"]: o for o in rendered("prod")}
    deployment = found["Deployment"]
    assert pod_security_violations(deployment["spec"]["template"]["spec"]) == []
    assert deployment["spec"]["replicas"] >= 3
    budget = found["PodDisruptionBudget"]["spec"]
    assert budget["minAvailable"] >= 1
    assert budget["selector"] == deployment["spec"]["selector"]


def test_probes_spread_and_worker_memory() -> None:
    (deployment,) = kinds()["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/api/v1/live", \
        "liveness must not depend on the database: an outage would restart every pod"
    assert container["readinessProbe"]["httpGet"]["path"] == "/api/v1/ready"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "room to migrate"
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert all(c["labelSelector"] == deployment["spec"]["selector"]
               for c in pod["topologySpreadConstraints"])
    assert not any(e["name"] == "SVC_WORKERS" for e in container.get("env", [])), \
        "workers follow the CPU limit (the cgroup quota)"
    for overlay in ["base", *OVERLAYS]:
        found = objects() if overlay == "base" else rendered(overlay)
        (manager,) = [o for o in found if o["kind"] == "Deployment"]
        limits = manager["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        workers = -(-int(float(limits["cpu"]) * 1000) // 1000)
        mebibytes = int(limits["memory"].removesuffix("Mi"))
        assert mebibytes >= 256 + 128 * workers, (overlay, limits)


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
           ("", "persistentvolumeclaims"): {"create", "get", "list", "delete"},
           ("", "events"): {"list"}}


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
