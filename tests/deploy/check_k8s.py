"""deploy.k8s: the manifests in deploy/k8s agree with each other and with the ConfigMap's config."""

import os

from deploy_common import Checker, k8s_quantity, kcache_size, listen_port, load_toml, load_yaml_documents, under


def check_k8s(source_dir):
    c = Checker("deploy.k8s")
    k8s_dir = source_dir / "deploy/k8s"
    expected_api = {"StatefulSet": "apps/v1", "Service": "v1", "ConfigMap": "v1",
                    "Kustomization": "kustomize.config.k8s.io/v1beta1"}
    docs = {}  # kind -> [(file, doc)]
    files = sorted(p for p in k8s_dir.iterdir() if p.suffix in (".yaml", ".yml"))
    c.expect(files, f"no YAML files in {k8s_dir}")
    for path in files:
        for doc in load_yaml_documents(path):
            kind, api = doc.get("kind"), doc.get("apiVersion")
            if not c.expect(kind in expected_api, f"{path.name}: kind {kind!r} is not one this check knows "
                            f"({', '.join(expected_api)}); extend check_deploy.py with its checks"):
                continue
            c.expect(api == expected_api[kind], f"{path.name}: {kind} has apiVersion {api!r}, "
                     f"expected {expected_api[kind]!r}")
            if kind != "Kustomization":
                c.expect(doc.get("metadata", {}).get("name"), f"{path.name}: {kind} has no metadata.name")
            docs.setdefault(kind, []).append((path.name, doc))

    # The kustomization names every manifest, and only files that exist.
    for _, kust in docs.get("Kustomization", []):
        listed = set(kust.get("resources", []))
        for name in listed:
            c.expect((k8s_dir / name).is_file(), f"kustomization.yaml lists {name}, which does not exist")
        manifests = {p.name for p in files} - {"kustomization.yaml", "kustomization.yml"}
        for name in sorted(manifests - listed):
            c.expect(False, f"{name} is not in kustomization.yaml resources: kubectl apply -k would skip it")

    for kind in ("StatefulSet", "Service", "ConfigMap"):
        found = len(docs.get(kind, []))
        if not c.expect(found == 1, f"expected exactly one {kind}, found {found}"):
            return c.finish()
    sts = docs["StatefulSet"][0][1]
    svc = docs["Service"][0][1]
    cm = docs["ConfigMap"][0][1]
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {}) or {}

    c.expect(spec.get("replicas") == 1, "StatefulSet replicas must be 1: two daemons cannot share one RocksDB, "
             "and separate replicas would not share a cache")
    c.expect(spec.get("serviceName") == svc["metadata"]["name"],
             f"StatefulSet serviceName {spec.get('serviceName')!r} is not the Service {svc['metadata']['name']!r}")
    selector = spec.get("selector", {}).get("matchLabels", {}) or {}
    c.expect(selector, "StatefulSet has no selector.matchLabels")
    for k, v in selector.items():
        c.expect(pod_labels.get(k) == v, f"StatefulSet selector {k}={v} does not match the pod template's labels")

    containers = pod.get("containers", [])
    ctr = next((x for x in containers if x.get("name") == "kcached"), None)
    if not c.expect(ctr is not None, "no container named kcached in the StatefulSet"):
        return c.finish()

    # The config: --config PATH names a key of the ConfigMap, mounted at PATH's folder.
    argv = [str(a) for a in (ctr.get("command", []) or []) + (ctr.get("args", []) or [])]
    config_path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    c.expect(config_path, "the kcached container's command/args do not pass --config FILE")
    mounts = {m.get("name"): m for m in ctr.get("volumeMounts", [])}
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    config = None
    if config_path:
        folder, key = os.path.dirname(config_path), os.path.basename(config_path)
        mount = next((m for m in mounts.values() if os.path.normpath(m.get("mountPath", "")) == folder), None)
        if c.expect(mount, f"nothing is mounted at {folder}, where --config {config_path} points"):
            vol = volumes.get(mount.get("name"), {})
            c.expect(vol.get("configMap", {}).get("name") == cm["metadata"]["name"],
                     f"the volume at {folder} is not the ConfigMap {cm['metadata']['name']!r}")
            c.expect(mount.get("readOnly") is True, f"the config mount at {folder} should be readOnly")
        data = cm.get("data", {}) or {}
        if c.expect(key in data, f"the ConfigMap has no key {key!r} (--config {config_path})"):
            config = load_toml(data[key], f"ConfigMap {cm['metadata']['name']} {key}")

    # Ports: kcached listens on the container port, which the probes and the Service use.
    ports = ctr.get("ports", [])
    grpc_port = next((p for p in ports if p.get("name") == "grpc"), None)
    if not c.expect(grpc_port and isinstance(grpc_port.get("containerPort"), int),
                    "the kcached container has no port named grpc with a numeric containerPort"):
        return c.finish()
    port = grpc_port["containerPort"]
    if config:
        c.expect(listen_port(config.get("listen")) == port,
                 f"kcached listens on {config.get('listen')!r}, not on the container port {port}")
        c.expect(str(config.get("listen", "")).split(":")[0] in ("0.0.0.0", "[::]"),
                 f"listen {config.get('listen')!r}: the probes and the Service reach the pod IP, so kcached "
                 "must listen on every interface (0.0.0.0 or [::])")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        p = ctr.get(probe)
        if probe == "startupProbe" and p is None:
            continue
        if not c.expect(p, f"the kcached container has no {probe}"):
            continue
        c.expect("grpc" in p and not ({"httpGet", "tcpSocket", "exec"} & p.keys()),
                 f"{probe} must use the grpc probe (the grpc.health.v1 service kcached serves)")
        c.expect(p.get("grpc", {}).get("port") == port,
                 f"{probe} probes port {p.get('grpc', {}).get('port')!r}, not the container port {port}")
        c.expect(p.get("grpc", {}).get("service", "") == "",
                 f"{probe} names a health service: kcached reports only the overall status (service \"\")")

    svc_spec = svc.get("spec", {})
    svc_selector = svc_spec.get("selector", {}) or {}
    c.expect(svc_selector, "the Service has no selector")
    for k, v in svc_selector.items():
        c.expect(pod_labels.get(k) == v, f"the Service selects {k}={v}, which the StatefulSet's pods do not carry")
    svc_ports = svc_spec.get("ports", [])
    c.expect(any(sp.get("targetPort") in (port, grpc_port["name"]) for sp in svc_ports),
             f"no Service port targets the container port ({port} or {grpc_port['name']!r})")

    # Resources: requests for scheduling; workers must fit the CPU the pod gets.
    res = ctr.get("resources", {})
    req, lim = res.get("requests", {}) or {}, res.get("limits", {}) or {}
    for r in ("cpu", "memory"):
        c.expect(k8s_quantity(req.get(r)) is not None, f"resources.requests.{r} is not set")
        if r in lim and r in req:
            c.expect(k8s_quantity(req[r]) <= k8s_quantity(lim[r]),
                     f"requests.{r} {req[r]} exceeds limits.{r} {lim[r]}")
    c.expect(k8s_quantity(lim.get("memory")) is not None, "resources.limits.memory is not set")
    if config:
        workers = config.get("workers")
        cpus = k8s_quantity(lim.get("cpu", req.get("cpu")))
        if c.expect(isinstance(workers, int) and workers > 0,
                    f"workers = {workers!r}: set it explicitly; 0 means one per core of the node, not of the pod"):
            if cpus is not None:
                c.expect(workers <= cpus, f"workers = {workers} is more than the {cpus:g} CPUs of the container")
            per_worker = kcache_size(config.get("worker-memory", "0"))
            mem_limit = k8s_quantity(lim.get("memory"))
            if per_worker and mem_limit:
                c.expect(workers * per_worker <= mem_limit,
                         f"{workers} workers x worker-memory {config['worker-memory']} "
                         f"exceed limits.memory {lim['memory']}")

    # Security context: pod or container level.
    psc, csc = pod.get("securityContext", {}) or {}, ctr.get("securityContext", {}) or {}
    c.expect(csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, "runAsNonRoot is not true")
    c.expect(csc.get("runAsUser", psc.get("runAsUser", 1)) != 0, "runAsUser is 0 (root)")
    c.expect(csc.get("readOnlyRootFilesystem") is True, "the kcached container's root filesystem is not read-only")
    c.expect(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not false")
    if csc.get("readOnlyRootFilesystem"):
        c.expect(any(os.path.normpath(m.get("mountPath", "")) == "/tmp" for m in mounts.values()),
                 "the root filesystem is read-only but nothing is mounted at /tmp, where compile jobs write")

    # Storage: the db lies on the volume claimed by the template, and max-size fits that volume.
    claims = {t.get("metadata", {}).get("name"): t for t in spec.get("volumeClaimTemplates", [])}
    c.expect(claims, "the StatefulSet has no volumeClaimTemplates: the RocksDB would not survive the pod")
    if config and claims:
        db = str(config.get("db", ""))
        c.expect(os.path.isabs(db), f"db = {db!r} should be an absolute path")
        mount = next((m for m in mounts.values() if under(db, m.get("mountPath", "/nonexistent"))), None)
        mounted = ", ".join(f"{m.get('mountPath')} ({name})" for name, m in mounts.items())
        if c.expect(mount and mount.get("name") in claims,
                    f"db = {db!r} is not on a volume from volumeClaimTemplates (mounted: {mounted})"):
            claim = claims[mount["name"]]
            storage = k8s_quantity(claim.get("spec", {}).get("resources", {}).get("requests", {}).get("storage"))
            max_size = kcache_size(config.get("max-size", "10G"))
            if c.expect(storage, f"volumeClaimTemplate {mount['name']} requests no storage"):
                c.expect(max_size is not None and max_size <= 0.8 * storage,
                         f"max-size {config.get('max-size')!r} leaves less than 20% of the "
                         f"{claim['spec']['resources']['requests']['storage']} volume for RocksDB's overhead")
            c.expect(claim.get("spec", {}).get("accessModes"),
                     f"volumeClaimTemplate {mount['name']} has no accessModes")

    # Drain: 30 s for calls in progress, then the queued compiles and the RocksDB flush.
    grace = pod.get("terminationGracePeriodSeconds", 30)
    c.expect(grace >= 60, f"terminationGracePeriodSeconds {grace} is too short for kcached's drain (at least 60)")
    return c.finish()
