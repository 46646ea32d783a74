"""The Kubernetes manifests in deploy/kubernetes (docs/operations.md, "Kubernetes"): each
validates offline against the Kubernetes schemas kubernetes-validate ships (KEDA's ScaledObject
and Prometheus Operator's ServiceMonitor against the shapes written here), and they agree with
batchcrop's CLI, settings, metrics and shutdown contract, and with the scale-from-zero bound
docs/scaling.md states. The example overlay is rendered by a small merge of kustomize's own rules
(resources, components, namespace, images, strategic-merge patches by name): no kustomize
binary is needed."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from batchcrop.api.server import SHUTDOWN_GRACE_SECONDS as SERVE_GRACE_SECONDS
from batchcrop.cli.commands import GIVE_BACK_WAIT_SECONDS
from batchcrop.cli.main import build_parser
from batchcrop.metrics import QUEUE_CACHE_SECONDS, QueueCollector
from batchcrop.settings import DECODE_MEMORY_MIB, ENV_PREFIX, SHUTDOWN_GRACE_SECONDS, Settings

HERE = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.32"
"""The oldest Kubernetes the manifests are for (the preStop `sleep` action is on by default)."""
KUSTOMIZATIONS = ("base", "migrate", "overlays/example", "overlays/example/migrate")
COMPONENTS = ("components/keda", "components/hpa")
GLOBAL_ENV = {"LOG_LEVEL", "LOG_FORMAT"}
"""`BATCHCROP_` variables read by the CLI itself rather than the settings dataclass."""
SECRETS = {
    "batchcrop-database": {"url"},
    "batchcrop-store": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
    "batchcrop-api-token": {"token"},
}
"""The Secrets docs/operations.md tells operators to create, and their keys."""
INTERPRETER_MIB = 256
"""Memory a batchcrop process needs besides its decode budget (docs/operations.md)."""
PATCH_MERGE_KEYS = ("name", "containerPort", "mountPath")

SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "kind": {"type": "string"},
                        "apiVersion": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {"type": "object"},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "prometheus"},
                            "name": {"type": "string"},
                            "metadata": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["serverAddress", "query", "threshold"],
                                "properties": {
                                    "serverAddress": {"type": "string", "pattern": "^https?://"},
                                    "query": {"type": "string"},
                                    # KEDA reads trigger metadata as strings only.
                                    "threshold": {"type": "string", "pattern": r"^\d+(\.\d+)?$"},
                                    "activationThreshold": {
                                        "type": "string",
                                        "pattern": r"^\d+(\.\d+)?$",
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
"""The part of KEDA's ScaledObject CRD these manifests use (KEDA 2.x); kubernetes-validate
ships no schema for custom resources."""

SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": {"type": "object"}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": r"^\d+s$"},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["type", "credentials"],
                                "properties": {
                                    "type": {"const": "Bearer"},
                                    "credentials": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["name", "key"],
                                        "properties": {
                                            "name": {"type": "string"},
                                            "key": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
"""The part of Prometheus Operator's ServiceMonitor CRD the KEDA component uses (v1)."""
SCALING_DOC = HERE.parents[1] / "docs" / "scaling.md"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge patch as kustomize applies it to these manifests: maps merge key by
    key, lists of maps merge by their `name` (or port, or mount path), other lists replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and patch:
        key = next(
            (k for k in PATCH_MERGE_KEYS if all(isinstance(p, dict) and k in p for p in patch)),
            None,
        )
        if key is not None:
            merged_list = list(base)
            for item in patch:
                for index, old in enumerate(merged_list):
                    if old.get(key) == item[key]:
                        merged_list[index] = _merge(old, item)
                        break
                else:
                    merged_list.append(copy.deepcopy(item))
            return merged_list
    return copy.deepcopy(patch)


def _set_images(value: Any, images: list[dict[str, str]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "image" and isinstance(inner, str):
                name, _, _ = inner.partition(":")
                for image in images:
                    if image["name"] == name:
                        value[key] = f"{image.get('newName', name)}:{image['newTag']}"
            else:
                _set_images(inner, images)
    elif isinstance(value, list):
        for inner in value:
            _set_images(inner, images)


def _render(folder: Path) -> list[dict[str, Any]]:
    """The resources of a kustomization (or component) folder, as `kubectl kustomize` renders
    them for the fields these manifests use."""
    (kustomization,) = _documents(folder / "kustomization.yaml")
    assert set(kustomization) <= {
        "apiVersion",
        "kind",
        "namespace",
        "resources",
        "components",
        "images",
        "patches",
        "labels",
    }, folder
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []) + kustomization.get("components", []):
        path = (folder / entry).resolve()
        resources += _render(path) if path.is_dir() else _documents(path)
    for patch_entry in kustomization.get("patches", []):
        (patch,) = _documents(folder / patch_entry["path"])
        (index,) = [
            i
            for i, r in enumerate(resources)
            if (r["kind"], r["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])
        ]
        resources[index] = _merge(resources[index], patch)
    for label in kustomization.get("labels", []):
        for resource in resources:
            resource["metadata"].setdefault("labels", {}).update(label["pairs"])
    if "images" in kustomization:
        _set_images(resources, kustomization["images"])
    if "namespace" in kustomization:
        for resource in resources:
            if resource["kind"] != "Namespace":
                resource["metadata"]["namespace"] = kustomization["namespace"]
    return resources


def _by_kind(resources: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["kind"], r["metadata"]["name"]): r for r in resources}


def _deployment(name: str, folder: str = "overlays/example") -> dict[str, Any]:
    deployment: dict[str, Any] = _by_kind(_render(HERE / folder))[("Deployment", name)]
    return deployment


def _container(name: str, folder: str = "overlays/example") -> dict[str, Any]:
    (container,) = _deployment(name, folder)["spec"]["template"]["spec"]["containers"]
    return container


def _validate(resource: dict[str, Any]) -> None:
    if resource["kind"] == "ScaledObject":
        jsonschema.validate(resource, SCALED_OBJECT_SCHEMA)
    elif resource["kind"] == "ServiceMonitor":
        jsonschema.validate(resource, SERVICE_MONITOR_SCHEMA)
    else:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def _all_rendered() -> list[dict[str, Any]]:
    return [r for folder in KUSTOMIZATIONS + COMPONENTS for r in _render(HERE / folder)]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS + COMPONENTS)
def test_every_manifest_validates_against_the_kubernetes_schemas(folder: str) -> None:
    """Each resource each kustomization renders validates (strict: no unknown field) against
    the Kubernetes 1.32 schemas, the KEDA ScaledObject against its shape."""
    resources = _render(HERE / folder)
    assert resources
    for resource in resources:
        _validate(resource)


def test_a_misspelt_field_fails_validation() -> None:
    """The strict schemas catch an unknown field, so the validation above can fail."""
    worker = copy.deepcopy(_deployment("batchcrop-worker"))
    worker["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(worker)
    scaled = copy.deepcopy(
        _by_kind(_render(HERE / "components/keda"))[("ScaledObject", "batchcrop-worker")]
    )
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 20
    with pytest.raises(jsonschema.ValidationError):
        _validate(scaled)


def test_the_overlay_renders_the_base_with_its_changes() -> None:
    """The example overlay: every base resource, the ScaledObject and its ServiceMonitor in
    namespace `batchcrop`,
    the registry image everywhere, its store and four slots patched in, the rest kept."""
    overlay = _by_kind(_render(HERE / "overlays/example"))
    base = _by_kind(_render(HERE / "base"))
    assert set(overlay) == set(base) | {
        ("ScaledObject", "batchcrop-worker"),
        ("ServiceMonitor", "batchcrop-serve"),
    }
    assert {r["metadata"]["namespace"] for r in overlay.values()} == {"batchcrop"}
    config = overlay[("ConfigMap", "batchcrop-config")]["data"]
    assert config["BATCHCROP_STORE"] == "s3://catalogue-derivatives/crops"
    assert config["BATCHCROP_DECODE_MEMORY_MIB"] == "1024"
    worker = _container("batchcrop-worker")
    assert worker["args"][worker["args"].index("--concurrency") + 1] == "4"
    assert worker["envFrom"] == _container("batchcrop-worker", "base")["envFrom"]
    for kind, name in (("Deployment", "batchcrop-worker"), ("Deployment", "batchcrop-serve")):
        pod = overlay[(kind, name)]["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            assert container["image"] == "registry.example.com/batchcrop:0.1.0", name


def test_every_container_runs_a_batchcrop_command_and_never_migrates() -> None:
    """The image's entrypoint is `batchcrop`: each container's args parse with the CLI; the
    Job runs `db upgrade`, the worker's schema gate `db check`, and nobody `--migrate`s."""
    parser = build_parser()
    commands = {}
    for resource in _all_rendered():
        if resource["kind"] not in {"Deployment", "Job"}:
            continue
        pod = resource["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            assert "command" not in container, container["name"]
            args = container["args"]
            assert parser.parse_args(args).command == args[0]
            assert "--migrate" not in args
            commands[resource["metadata"]["name"], container["name"]] = args
    assert commands["batchcrop-migrate", "migrate"] == ["db", "upgrade"]
    assert commands["batchcrop-worker", "schema"] == ["db", "check"]
    assert commands["batchcrop-serve", "serve"][:3] == ["serve", "--host", "0.0.0.0"]


def test_every_batchcrop_variable_is_a_setting_and_secrets_come_from_secrets() -> None:
    """A misspelt variable would be silently ignored: every `BATCHCROP_X` a container sets or
    the ConfigMap holds names a settings field (or a log flag); the database URL and the
    store credentials come from the documented Secrets, the API token from a file of one."""
    names = {f.name.upper() for f in fields(Settings)} | GLOBAL_ENV
    rendered = _all_rendered()
    for resource in rendered:
        if resource["kind"] == "ConfigMap":
            for variable in resource["data"]:
                assert variable.removeprefix(ENV_PREFIX) in names, variable
                assert variable.startswith(ENV_PREFIX), variable
                assert "TOKEN" not in variable, variable
                assert "DATABASE_URL" not in variable, variable
        if resource["kind"] not in {"Deployment", "Job"}:
            continue
        pod = resource["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            env = {e["name"]: e for e in container.get("env", [])}
            for variable, entry in env.items():
                if variable.startswith(ENV_PREFIX):
                    assert variable.removeprefix(ENV_PREFIX) in names, variable
                if variable in {"BATCHCROP_DATABASE_URL", "AWS_SECRET_ACCESS_KEY"}:
                    reference = entry["valueFrom"]["secretKeyRef"]
                    assert reference["key"] in SECRETS[reference["name"]], variable
            assert "BATCHCROP_DATABASE_URL" in env, container["name"]
            assert "BATCHCROP_API_TOKEN" not in env
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in SECRETS
    serve = _deployment("batchcrop-serve")["spec"]["template"]["spec"]
    token_file = {e["name"]: e for e in serve["containers"][0]["env"]}["BATCHCROP_API_TOKEN_FILE"]
    (mount,) = [m for m in serve["containers"][0]["volumeMounts"] if m["name"] == "api-token"]
    (volume,) = [v for v in serve["volumes"] if v["name"] == "api-token"]
    assert token_file["value"] == f"{mount['mountPath']}/token"
    assert volume["secret"]["secretName"] == "batchcrop-api-token"


def test_workers_are_given_time_to_finish_and_give_back() -> None:
    """The pod's termination grace outlasts any preStop, the worker's own grace (the
    settings' default) and the give-back wait: the kubelet's SIGKILL never lands first."""
    for folder in ("base", "overlays/example"):
        pod = _deployment("batchcrop-worker", folder)["spec"]["template"]["spec"]
        (worker,) = pod["containers"]
        args = worker["args"]
        grace = float(args[args.index("--shutdown-grace-seconds") + 1])
        assert grace == SHUTDOWN_GRACE_SECONDS
        pre_stop = worker.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
        assert "exec" not in worker.get("lifecycle", {}).get("preStop", {})
        budget = pre_stop.get("seconds", 0) + grace + GIVE_BACK_WAIT_SECONDS
        assert pod["terminationGracePeriodSeconds"] > budget
        assert worker.get("readinessProbe") is None  # no traffic is routed to a worker


def test_serve_is_probed_on_healthz_and_drains_before_it_stops() -> None:
    """Readiness and liveness ask `/healthz` on the port serve listens on, which the Service
    targets; the preStop sleep and serve's own shutdown grace fit in the termination grace."""
    resources = _by_kind(_render(HERE / "overlays/example"))
    pod = resources[("Deployment", "batchcrop-serve")]["spec"]["template"]["spec"]
    (serve,) = pod["containers"]
    port = int(serve["args"][serve["args"].index("--port") + 1])
    (declared,) = serve["ports"]
    assert declared["containerPort"] == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert serve[probe]["httpGet"] == {"path": "/healthz", "port": declared["name"]}
    (service_port,) = resources[("Service", "batchcrop-serve")]["spec"]["ports"]
    assert service_port["targetPort"] == declared["name"]
    pre_stop = serve["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + SERVE_GRACE_SECONDS


def test_memory_requests_cover_the_decode_budget() -> None:
    """Each worker and serve container requests at least the decode budget it is configured
    with (BATCHCROP_DECODE_MEMORY_MIB, else the default) plus the interpreter's own, and its
    limit is no lower than its request."""
    resources = _by_kind(_render(HERE / "overlays/example"))
    config = resources[("ConfigMap", "batchcrop-config")]["data"]
    budget = int(config.get("BATCHCROP_DECODE_MEMORY_MIB", DECODE_MEMORY_MIB))
    for name in ("batchcrop-worker", "batchcrop-serve"):
        (container,) = resources[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
        request = _mib(container["resources"]["requests"]["memory"])
        assert request >= budget + INTERPRETER_MIB, name
        assert _mib(container["resources"]["limits"]["memory"]) >= request, name


def _mib(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(quantity[:-2]) * units[quantity[-2:]]


def test_disruption_budgets_and_network_policies_select_the_pods() -> None:
    """Each Deployment has a PodDisruptionBudget and a NetworkPolicy (ingress and egress)
    whose selectors match its pods, and the Job its NetworkPolicy; the worker's budget is
    maxUnavailable, so a fleet scaled to zero does not block a drain."""
    resources = list(_render(HERE / "base")) + _render(HERE / "migrate")
    pods = {
        r["metadata"]["name"]: r["spec"]["template"]["metadata"]["labels"]
        for r in resources
        if r["kind"] in {"Deployment", "Job"}
    }
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        selected = {
            name
            for r in resources
            if r["kind"] == kind
            for name, labels in pods.items()
            if r["spec"].get("selector", r["spec"].get("podSelector"))["matchLabels"].items()
            <= labels.items()
        }
        expected = set(pods) - ({"batchcrop-migrate"} if kind == "PodDisruptionBudget" else set())
        assert selected == expected, kind
    worker_budget = _by_kind(resources)[("PodDisruptionBudget", "batchcrop-worker")]["spec"]
    assert worker_budget["maxUnavailable"] == 1
    for policy in (r for r in resources if r["kind"] == "NetworkPolicy"):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_the_autoscalers_read_the_queue_gauges_batchcrop_exports() -> None:
    """KEDA's queries and the HPA's external metrics name the gauges batchcrop.metrics
    exports, take `max` over processes (each exports the whole queue), and scale the worker
    Deployment; only KEDA goes down to zero."""
    # A worker's collector (queue items by store, as the autoscalers read them), read before
    # any scrape: the families are named whatever the database holds.
    collector = QueueCollector(lambda: None, by_store=dict)
    gauges = {family.name for family in collector._families(None, {})}
    assert gauges == {"batchcrop_queue_items", "batchcrop_queue_oldest_queued_age_seconds"}
    scaled = _by_kind(_render(HERE / "components/keda"))[("ScaledObject", "batchcrop-worker")]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "batchcrop-worker"
    assert scaled["spec"]["minReplicaCount"] == 0
    queried = set()
    for trigger in scaled["spec"]["triggers"]:
        query = trigger["metadata"]["query"]
        assert query.startswith("max(")
        assert "sum(" not in query
        queried |= {g for g in gauges if g in query}
    assert queried == gauges
    (hpa,) = _render(HERE / "components/hpa")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "batchcrop-worker",
    }
    assert {m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]} == gauges
    assert hpa["spec"]["minReplicas"] >= 1


def _bound_table() -> tuple[dict[str, float], list[tuple[float, float]], float]:
    """docs/scaling.md's "Scaling from zero" table: the parts set in code or manifests by the
    name in backticks of their last column, the allowances with the slowest figure measured
    for each (`measured N s slowest`), and the stated bound."""
    text = SCALING_DOC.read_text(encoding="utf-8").split("## Scaling from zero", 1)[1]
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("| "))
    rows = lines[first + 2 : end]  # after the header and its rule
    named: dict[str, float] = {}
    allowances: list[tuple[float, float]] = []
    bound = None
    for row in rows:
        _, seconds, set_by = (cell.strip() for cell in row.strip("|").split("|"))
        value = float(seconds.strip("*"))
        if row.startswith("| **"):
            bound = value
        elif (name := re.search(r"`(\w+)`", set_by)) is not None:
            named[name.group(1)] = value
        else:
            measured = re.search(r"measured (\d+(?:\.\d+)?) s slowest", set_by)
            allowances.append((value, float(measured.group(1)) if measured else 0.0))
    assert bound is not None
    return named, allowances, bound


def test_the_manifests_keep_the_documented_bound_of_a_scale_from_zero() -> None:
    """docs/scaling.md states how long an item queued for a fleet at zero waits for its first
    claim as a sum of parts: the parts the manifests and code set are what they set (the age
    trigger's activation, the gauge cache, the ServiceMonitor's scrape of serve, KEDA's
    polling), each allowance holds the slowest start measured, and the parts add up to the
    stated bound; the ServiceMonitor scrapes serve's Service with the token's Secret."""
    named, allowances, bound = _bound_table()
    keda = _by_kind(_render(HERE / "components/keda"))
    scaled = keda[("ScaledObject", "batchcrop-worker")]["spec"]
    (age,) = [t for t in scaled["triggers"] if t["name"] == "oldest-queued-age"]
    (endpoint,) = keda[("ServiceMonitor", "batchcrop-serve")]["spec"]["endpoints"]
    assert named == {
        "activationThreshold": float(age["metadata"]["activationThreshold"]),
        "QUEUE_CACHE_SECONDS": QUEUE_CACHE_SECONDS,
        "interval": float(endpoint["interval"].removesuffix("s")),
        "pollingInterval": float(scaled["pollingInterval"]),
    }
    assert allowances
    assert all(measured <= allowed for allowed, measured in allowances)
    assert sum(named.values()) + sum(allowed for allowed, _ in allowances) == bound
    monitor = keda[("ServiceMonitor", "batchcrop-serve")]["spec"]
    service = _by_kind(_render(HERE / "base"))[("Service", "batchcrop-serve")]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["key"] in SECRETS[credentials["name"]]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("folder", KUSTOMIZATIONS)
def test_the_merge_here_renders_what_kubectl_kustomize_renders(folder: str) -> None:
    """Where kubectl is installed, its kustomize renders each kustomization exactly as the
    small merge above does, so the checks above are of what a cluster would get."""
    output = subprocess.run(
        ["kubectl", "kustomize", str(HERE / folder)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rendered = [d for d in yaml.safe_load_all(output) if d is not None]
    assert _by_kind(rendered) == _by_kind(_render(HERE / folder))
