"""Holds the manifests check.sh rendered to what the chart promises.

Each DIR/*.yaml is one render. For every Deployment of gated: the pod
and its container run as a non-root user with a read-only root, no
capability, no privilege escalation and the RuntimeDefault seccomp
profile; readiness is /readyz and liveness /healthz on the http port;
the metrics port carries the Prometheus scrape annotations; every
volume it mounts is declared, and every Secret and ConfigMap it names
is mounted read-only. A console Service exists only in the renders
that ask for it, and selects gated's pods.

With --extract OUT, the data of every ConfigMap of the renders is also
written to OUT/<render>/<ConfigMap>/<key>, for gated to check.

Usage: python check_manifests.py DIR [--extract OUT]
"""

import pathlib
import sys

import yaml


def fail(render: str, msg: str) -> None:
    raise SystemExit(f"{render}: {msg}")


def check_deployment(render: str, d: dict) -> None:
    spec = d["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    if not pod.get("runAsNonRoot") or pod.get("runAsUser", 0) == 0:
        fail(render, f"pod securityContext {pod}: want runAsNonRoot and a non-root runAsUser")
    if pod.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(render, "the pod's seccomp profile is not RuntimeDefault")
    if spec.get("automountServiceAccountToken") is not False:
        fail(render, "the service account token is mounted: gated needs no Kubernetes API")
    (c,) = spec["containers"]
    sc = c["securityContext"]
    if not sc.get("readOnlyRootFilesystem") or sc.get("allowPrivilegeEscalation") is not False:
        fail(render, f"container securityContext {sc}: want a read-only root and no privilege escalation")
    if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
        fail(render, "the container does not drop ALL capabilities")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")):
        got = c[probe]["httpGet"]
        if got["path"] != path or got["port"] != "http":
            fail(render, f"{probe} is {got}, want {path} on port http")
    args = c["args"]
    if args[0] != "serve":
        fail(render, f"args {args}: want serve first")
    if f"--http=:{ports['http']}" not in args or f"--metrics-listen=:{ports['metrics']}" not in args:
        fail(render, f"args {args}: --http and --metrics-listen must be the ports declared {ports}")
    ann = d["spec"]["template"]["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(ports["metrics"]):
        fail(render, f"annotations {ann}: want prometheus.io/scrape on the metrics port")
    if not any(a.startswith("--nats-url=nats") or a.startswith("--nats-url=tls") for a in args):
        fail(render, "no --nats-url: gated would start an embedded server")
    if not any(e["name"] == "GOMEMLIMIT" for e in c.get("env", [])):
        fail(render, "GOMEMLIMIT is not set from the memory limit")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    if set(mounts) != set(volumes):
        fail(render, f"volumes {sorted(volumes)} and mounts {sorted(mounts)} differ")
    for name, v in volumes.items():
        if ("secret" in v or "configMap" in v) and not mounts[name].get("readOnly"):
            fail(render, f"volume {name} is mounted writable")
    for path in ("/data", "/tmp"):
        if not any(m["mountPath"] == path for m in mounts.values()):
            fail(render, f"nothing is mounted on {path}: the root is read-only")
    for a in args:
        if a.startswith("--nats-password") or a.startswith("--nats-token"):
            fail(render, f"{a.split('=')[0]} on the command line: secrets go in the environment")
        for flag in ("--nats-creds=", "--nats-nkey=", "--audit-key-file=", "--grant-key-file=", "--operators=",
                     "--policies=", "--personas=", "--budgets=", "--policy-data="):
            if a.startswith(flag) and not any(a[len(flag):].startswith(m["mountPath"] + "/") or
                                               a[len(flag):] == m["mountPath"] for m in mounts.values()):
                fail(render, f"{a} names a file under no mount")


def extract(render: str, docs: list, out: pathlib.Path) -> None:
    for d in docs:
        if d["kind"] != "ConfigMap":
            continue
        cm = out / render / d["metadata"]["name"]
        cm.mkdir(parents=True, exist_ok=True)
        for key, value in d.get("data", {}).items():
            (cm / key).write_text(value)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    extract_to = pathlib.Path(sys.argv[3]) if len(sys.argv) == 4 and sys.argv[2] == "--extract" else None
    renders = sorted(out.glob("*.yaml"))
    if not renders:
        raise SystemExit(f"no renders in {out}")
    for f in renders:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        kinds = [d["kind"] for d in docs]
        deployments = [d for d in docs if d["kind"] == "Deployment"]
        if len(deployments) != 1:
            fail(f.name, f"{len(deployments)} Deployments")
        check_deployment(f.name, deployments[0])
        selector = deployments[0]["spec"]["selector"]["matchLabels"]
        services = [d for d in docs if d["kind"] == "Service"]
        console = f.name.startswith("console")
        if console != bool(services):
            fail(f.name, f"console Services {[s['metadata']['name'] for s in services]}: the console is off by default")
        for s in services:
            if s["spec"]["selector"] != selector:
                fail(f.name, f"Service {s['metadata']['name']} selects {s['spec']['selector']}, not gated's pods")
        pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
        for p in pdbs:
            if p["spec"]["selector"]["matchLabels"] != selector:
                fail(f.name, "the PodDisruptionBudget selects other pods")
        if extract_to:
            extract(f.stem, docs, extract_to)
        print(f"{f.name}: {', '.join(kinds)}: as promised")


if __name__ == "__main__":
    main()
