"""Checks the Kubernetes manifests in deploy/kubernetes/, offline. Run by scripts/check-manifests.sh
in its own venv (kubernetes-validate, which brings jsonschema, referencing and PyYAML).

Usage: check_manifests.py DIR TOML_OUT

1. Every built-in resource is validated, strictly (unknown fields are errors), against the
   Kubernetes JSON schemas kubernetes-validate bundles, for every Kubernetes version it knows
   (1.25 to 1.37 in kubernetes-validate 1.37.0). A kind or apiVersion without a bundled schema is an error here (the
   kubernetes-validate command only warns and passes).
2. The ServiceMonitor is a CRD (monitoring.coreos.com/v1, from the Prometheus operator), which
   kubernetes-validate has no schema for. It is validated against SERVICE_MONITOR below: the
   fields this repository uses, with the names, types and patterns of the operator's CRD
   (metadata and selector against the bundled Kubernetes definitions). Another field is an
   error until it is added there.
3. kustomization.yaml lists every manifest file in DIR, and nothing else.
4. The pieces fit: probes and ports match `listen` and `metrics_listen` in the ConfigMap's
   redlock-proxy.toml, selectors match the pod labels, the config is mounted where `--config`
   reads it, the grace period outlasts the preStop pause plus `shutdown_timeout_ms`, and the
   container is non-root with a read-only root filesystem and no capabilities.

The ConfigMap's redlock-proxy.toml is written to TOML_OUT, for `redlock-proxy --check-config`.
Exits 1, listing every problem, when anything is wrong.
"""

import pathlib
import sys
import tomllib

import jsonschema
import kubernetes_validate.utils as kv
import yaml
from referencing import Registry, Resource

DURATION = (r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
            r"(([0-9]+)ms)?)$")
META = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
SERVICE_MONITOR = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://kubernetes.io/api/servicemonitor-monitoring-v1.json",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"$ref": META + "ObjectMeta"},
        "spec": {
            "type": "object",
            "required": ["endpoints", "selector"],
            "additionalProperties": False,
            "properties": {
                "selector": {"$ref": META + "LabelSelector"},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "targetPort": {"type": ["integer", "string"]},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": DURATION},
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR}
TOML_KEY = "redlock-proxy.toml"

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def validate_crd(doc, schema, version):
    defs = kv.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json",
                              version)
    registry = Resource.from_contents(defs) @ Registry()
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    for e in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.path]):
        yield ".".join(str(p) for p in e.path), e.message


def validate(name, doc, versions):
    """Validates one resource for each version; each error is reported once, with the
    versions it occurs in."""
    kind, api = doc.get("kind"), doc.get("apiVersion")
    seen = {}
    for version in versions:
        if (api, kind) in CRDS:
            errors = list(validate_crd(doc, CRDS[(api, kind)], version))
        else:
            try:
                kv.validate(doc, version, strict=True)
                errors = []
            except kv.ValidationError as e:
                errors = [(".".join(str(p) for p in e.path), e.message)]
            except kv.SchemaNotFoundError:
                errors = [("", f"no schema for apiVersion {api} kind {kind}")]
        for path, message in errors:
            seen.setdefault((path, message), []).append(kv.major_minor(version))
    for (path, message), found in seen.items():
        span = f"{found[0]} to {found[-1]}" if len(found) == len(versions) > 1 \
            else ", ".join(found)
        problem(f"{name} {kind} (Kubernetes {span})", f"{path}: {message}" if path else message)


def port_of(addr):
    return int(str(addr).rsplit(":", 1)[1])


def matches(selector, labels):
    wanted = (selector or {}).get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def fits(docs):
    """The cross-checks: the manifests agree with each other and with the proxy's config."""
    def one(kind):
        found = [(n, d) for n, d in docs if d.get("kind") == kind]
        if len(found) != 1:
            problem(kind, f"expected exactly one, found {len(found)}")
            return None, {}
        return found[0]

    _, cm = one("ConfigMap")
    dep_file, dep = one("Deployment")
    svc_file, svc = one("Service")
    pdb_file, pdb = one("PodDisruptionBudget")
    sm_file, sm = one("ServiceMonitor")
    if not (cm and dep and svc and pdb and sm):
        return None
    text = (cm.get("data") or {}).get(TOML_KEY)
    if text is None:
        problem("ConfigMap", f"no data key {TOML_KEY}")
        return None
    try:
        conf = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problem("ConfigMap", f"{TOML_KEY} is not TOML: {e}")
        return None
    listen, metrics = port_of(conf.get("listen", "127.0.0.1:7777")), None
    if "metrics_listen" in conf:
        metrics = port_of(conf["metrics_listen"])
    else:
        problem("ConfigMap", "metrics_listen is unset: no /healthz, /readyz or /metrics")
    shutdown_s = conf.get("shutdown_timeout_ms", 5000) / 1000

    pod = dep["spec"]["template"]
    labels = (pod.get("metadata") or {}).get("labels") or {}
    spec = pod["spec"]
    if not matches(dep["spec"]["selector"], labels):
        problem(dep_file, "spec.selector does not match the pod template's labels")
    containers = spec["containers"]
    c = containers[0]
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    numbers = set(ports.values())
    for want, what in ((listen, "listen"), (metrics, "metrics_listen")):
        if want is not None and want not in numbers:
            problem(dep_file, f"no containerPort {want} ({what} in the ConfigMap)")

    def resolve(port):
        return ports.get(port) if isinstance(port, str) else port

    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path or resolve(get.get("port")) != metrics:
            problem(dep_file, f"{probe} must be httpGet {path} on port {metrics}")
    argv = (c.get("command") or []) + (c.get("args") or [])
    config = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    if not config:
        problem(dep_file, "the container is not started with --config FILE")
    else:
        folder, _, file = config.rpartition("/")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounted = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == folder
                   and (volumes.get(m["name"], {}).get("configMap") or {}).get("name")
                   == cm["metadata"]["name"]]
        if not mounted or file != TOML_KEY:
            problem(dep_file, f"--config {config} is not the ConfigMap's {TOML_KEY} mounted there")
    pause = 0
    pre = ((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command") or []
    if len(pre) == 2 and pre[0] == "sleep":
        pause = int(pre[1])
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace <= pause + shutdown_s:
        problem(dep_file, f"terminationGracePeriodSeconds {grace} must exceed the preStop pause "
                          f"({pause} s) plus shutdown_timeout_ms ({shutdown_s:g} s)")
    pod_sc, sc = spec.get("securityContext") or {}, c.get("securityContext") or {}
    if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            and sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and "ALL" in ((sc.get("capabilities") or {}).get("drop") or [])):
        problem(dep_file, "the container must run as non-root, with a read-only root filesystem, "
                          "no privilege escalation and every capability dropped")

    if not matches({"matchLabels": svc["spec"].get("selector")}, labels):
        problem(svc_file, "spec.selector does not match the pods")
    svc_ports = {}
    for p in svc["spec"].get("ports", []):
        target = resolve(p.get("targetPort", p["port"]))
        if target not in numbers:
            problem(svc_file, f"port {p.get('name')} targets {p.get('targetPort')}, "
                              "not a container port")
        svc_ports[p.get("name")] = target
    if listen not in svc_ports.values() or metrics not in svc_ports.values():
        problem(svc_file, f"must expose the client port {listen} and the metrics port {metrics}")
    if not matches(pdb["spec"].get("selector"), labels):
        problem(pdb_file, "spec.selector does not match the pods")
    if not matches(sm["spec"].get("selector"), svc["metadata"].get("labels") or {}):
        problem(sm_file, "spec.selector does not match the Service's labels")
    for e in sm["spec"].get("endpoints", []):
        if svc_ports.get(e.get("port")) != metrics or e.get("path", "/metrics") != "/metrics":
            problem(sm_file, f"endpoint {e.get('port')} must be the Service's metrics port "
                             f"(port {metrics}), path /metrics")
    return text


def main():
    folder, toml_out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    files = sorted(p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))
    versions = sorted(set(kv.all_versions()), key=lambda v: tuple(map(int, v.split("."))))
    if "kustomization.yaml" not in files:
        problem(folder, "no kustomization.yaml")
    else:
        files.remove("kustomization.yaml")
        k = yaml.safe_load((folder / "kustomization.yaml").read_text()) or {}
        if (k.get("apiVersion"), k.get("kind")) != ("kustomize.config.k8s.io/v1beta1",
                                                    "Kustomization"):
            problem("kustomization.yaml", "not a kustomize.config.k8s.io/v1beta1 Kustomization")
        listed = k.get("resources") or []
        for name in sorted(set(listed) - set(files)):
            problem("kustomization.yaml", f"lists {name}, which is not in {folder}")
        for name in sorted(set(files) - set(listed)):
            problem("kustomization.yaml", f"does not list {name}")
        if len(listed) != len(set(listed)):
            problem("kustomization.yaml", "lists a file twice")
    docs = []
    for name in files:
        try:
            found = [d for d in yaml.safe_load_all((folder / name).read_text()) if d]
        except yaml.YAMLError as e:
            problem(name, f"not YAML: {e}")
            continue
        if not found:
            problem(name, "no resource in it")
        for doc in found:
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                problem(name, "a document without kind and apiVersion")
                continue
            validate(name, doc, versions)
            docs.append((name, doc))
    if not problems:
        try:
            text = fits(docs)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            problem("cross-check", f"missing or malformed field: {e!r}")
            text = None
        if text is not None:
            toml_out.write_text(text)
    for p in problems:
        print(f"check-manifests: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check-manifests: {len(docs)} resources in {len(files)} files valid for Kubernetes "
          f"{kv.major_minor(versions[0])} to {kv.major_minor(versions[-1])}; kustomization.yaml "
          "lists them all; they fit together")


main()
