"""Render the erdma-controller chart with the real Helm engine and look at what comes out."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "erdma-controller"
RELEASE = "erdma"
#: A recent Kubernetes version the manifests must be valid for (and lint runs against).
KUBE_VERSION = "1.37.0"
#: Credentials that make Regular mode renderable (the chart refuses empty AccessKeys).
ACCESS_KEY = {"credentials": {"type": "access_key", "accessKeyID": "ak", "accessKeySecret": "sk"}}


@dataclass(frozen=True)
class Rendered:
    """Every object one `helm template` would produce, CRDs included, and the NOTES Helm
    prints after an install or upgrade."""

    objects: tuple[dict[str, Any], ...]
    namespace: str
    notes: str = ""

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.all(kind) if o["metadata"]["name"] == name), None)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = self.find(kind, name)
        if found is None:
            names = [f"{o['kind']}/{o['metadata']['name']}" for o in self.objects]
            raise AssertionError(f"{kind}/{name} not rendered; got {names}")
        return found

    def config_file(self, configmap: str, key: str) -> str:
        data: str = self.get("ConfigMap", configmap)["data"][key]
        return data

    def agent_config_file(self, daemonset: str, name: str | None = None) -> tuple[str, str]:
        """(file name, text) of what the DaemonSet's agent reads with `--config`: the name from
        its arguments (or ``name``), the text from the ConfigMap its `config` volume mounts."""
        if name is None:
            args = [str(a) for a in self.container("DaemonSet", daemonset)["args"]]
            name = Path(args[args.index("--config") + 1]).name
        pod = self.get("DaemonSet", daemonset)["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
        return name, self.config_file(volume["configMap"]["name"], name)

    def secret_json(self, name: str, key: str) -> Any:
        encoded = self.get("Secret", name)["data"][key]
        return json.loads(base64.b64decode(encoded))

    def container(self, kind: str, name: str) -> dict[str, Any]:
        (container,) = self.get(kind, name)["spec"]["template"]["spec"]["containers"]
        return dict(container)


def _documents(text: str) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(text):
        if doc:
            yield doc


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge values layers; later layers win (as repeated `-f` files do)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def render(
    values: Mapping[str, Any],
    namespace: str = "kube-system",
    chart_dir: Path = CHART_DIR,
    *,
    upgrade: bool = False,
    kube_version: str | None = None,
    api_versions: Sequence[str] = (),
) -> Rendered:
    """Render templates and CRDs (of this chart, or another version at ``chart_dir``); Helm
    errors (schema, `fail`) propagate with their message. ``kube_version`` and ``api_versions``
    are `helm template --kube-version/--api-versions`: the cluster the chart is rendered for
    (default: the Helm library's own Kubernetes version, no extra API versions)."""
    opts: dict[str, Any] = {
        "name": RELEASE,
        "namespace": namespace,
        "is_install": not upgrade,
        "is_upgrade": upgrade,
    }
    if kube_version is not None:
        opts["kube_version"] = kube_version
    if api_versions:
        opts["api_versions"] = list(api_versions)
    with helm_python.Chart.load(chart_dir) as chart:
        # Chart.render has no capability arguments; helm_render, which it wraps, takes them
        args = (chart._raw(), json.dumps(dict(values)), json.dumps(opts))
        answer = _native.call_string("helm_render", *args)
        crds = [c["data"] for c in chart.crds]
    manifests: dict[str, str] = json.loads(answer)
    notes = "".join(t for path, t in manifests.items() if path.endswith("/NOTES.txt"))
    texts = [t for path, t in manifests.items() if not path.endswith("/NOTES.txt")]
    objects = [doc for text in [*crds, *texts] for doc in _documents(text)]
    return Rendered(tuple(objects), namespace, notes)


def chart_defaults(chart_dir: Path = CHART_DIR) -> dict[str, Any]:
    """values.yaml as Helm reads it."""
    with helm_python.Chart.load(chart_dir) as chart:
        return chart.values


def coalesced(chart_dir: Path, values: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's defaults with ``values`` over them, as Helm composes a release's values."""
    with helm_python.Chart.load(chart_dir) as chart:
        return chart.merge_values(dict(values))


def lint_findings(values: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
    """`helm lint --strict` messages of warning severity or worse."""
    report = helm_python.lint(
        CHART_DIR, dict(values), strict=True, namespace=namespace, kube_version=f"v{KUBE_VERSION}"
    )
    return [m for m in report["messages"] if m["severity"] >= 2]
