"""deploy.k8s: the manifests in deploy/k8s agree with each other and with the ConfigMap's config.

The checks of a kcached pod (config, ports, probes, resources, security) are shared with
deploy.fleet (check_fleet.py), which runs them on the fleet's Deployment and DaemonSet."""

import os

from deploy_common import (Checker, k8s_quantity, kcache_size, kcached_flags, listen_port, load_toml,
                           load_yaml_documents, under)


def load_manifests(c, folder, expected_api):
    """{kind: [(file name, doc)]} of every YAML file in `folder`, each checked for a known kind,
    its apiVersion and a name; and the files read."""
    docs = {}
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))
    c.expect(files, f"no YAML files in {folder}")
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
    return docs, files


def command_line(ctr):
    return [str(a) for a in (ctr.get("command", []) or []) + (ctr.get("args", []) or [])]


def flag_values(argv):
    """{key: value} of the --key value and --flag arguments (value True) after the program name."""
    out, i = {}, 1
    while i < len(argv):
        if argv[i].startswith("--"):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            value = argv[i + 1] if has_value else True
            out[argv[i][2:]] = int(value) if isinstance(value, str) and value.isdigit() else value
            i += 2 if has_value else 1
        else:
            i += 1
    return out


def check_security(c, where, pod, ctr):
    """The restricted Pod Security Standard's rules and a read-only root, pod or container level."""
    psc, csc = pod.get("securityContext", {}) or {}, ctr.get("securityContext", {}) or {}
    c.expect(csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, f"{where}: runAsNonRoot is not true")
    c.expect(csc.get("runAsUser", psc.get("runAsUser", 1)) != 0, f"{where}: runAsUser is 0 (root)")
    c.expect(csc.get("readOnlyRootFilesystem") is True, f"{where}: the root filesystem is not read-only")
    c.expect(csc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation is not false")
    c.expect("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), f"{where}: capabilities do not drop ALL")
    seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    c.expect(seccomp in ("RuntimeDefault", "Localhost"), f"{where}: no RuntimeDefault seccompProfile")


def check_kcached_pod(c, where, pod, config_maps, flags):
    """Checks the kcached container of a pod spec against itself, its ConfigMap and kcached's
    `flags`; returns (container, effective config: the TOML with the command line's flags over
    it, or None)."""
    ctr = next((x for x in pod.get("containers", []) if x.get("name") == "kcached"), None)
    if not c.expect(ctr is not None, f"no container named kcached in the {where}"):
        return None, None
    argv = command_line(ctr)
    for arg in argv[1:]:
        c.expect(not arg.startswith("--") or arg in flags, f"{where}: kcached is given {arg}, which is not a "
                 "kcached flag (server/config.cpp)")

    # The config: --config PATH names a key of the ConfigMap, mounted at PATH's folder.
    config_path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    c.expect(config_path, f"the {where}'s kcached command/args do not pass --config FILE")
    mounts = {m.get("name"): m for m in ctr.get("volumeMounts", [])}
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    config = None
    if config_path:
        folder, key = os.path.dirname(config_path), os.path.basename(config_path)
        mount = next((m for m in mounts.values() if os.path.normpath(m.get("mountPath", "")) == folder), None)
        cm_name = None
        if c.expect(mount, f"{where}: nothing is mounted at {folder}, where --config {config_path} points"):
            cm_name = volumes.get(mount.get("name"), {}).get("configMap", {}).get("name")
            c.expect(cm_name in config_maps, f"{where}: the volume at {folder} is not a ConfigMap of these manifests")
            c.expect(mount.get("readOnly") is True, f"{where}: the config mount at {folder} should be readOnly")
        data = config_maps.get(cm_name, {}).get("data", {}) or {}
        if cm_name in config_maps and c.expect(key in data, f"the ConfigMap {cm_name} has no key {key!r} "
                                                            f"(--config {config_path})"):
            config = load_toml(data[key], f"ConfigMap {cm_name} {key}")
            config.update({k: v for k, v in flag_values(argv).items() if k != "config"})

    # Ports: kcached listens on the container port, which the probes and the Service use.
    ports = ctr.get("ports", [])
    grpc_port = next((p for p in ports if p.get("name") == "grpc"), None)
    if not c.expect(grpc_port and isinstance(grpc_port.get("containerPort"), int),
                    f"the {where}'s kcached container has no port named grpc with a numeric containerPort"):
        return ctr, config
    port = grpc_port["containerPort"]
    if config:
        c.expect(listen_port(config.get("listen")) == port,
                 f"{where}: kcached listens on {config.get('listen')!r}, not on the container port {port}")
        c.expect(str(config.get("listen", "")).split(":")[0] in ("0.0.0.0", "[::]"),
                 f"{where}: listen {config.get('listen')!r}: the probes and the Service reach the pod IP, so "
                 "kcached must listen on every interface (0.0.0.0 or [::])")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        p = ctr.get(probe)
        if probe == "startupProbe" and p is None:
            continue
        if not c.expect(p, f"the {where}'s kcached container has no {probe}"):
            continue
        c.expect("grpc" in p and not ({"httpGet", "tcpSocket", "exec"} & p.keys()),
                 f"{where}: {probe} must use the grpc probe (the grpc.health.v1 service kcached serves)")
        c.expect(p.get("grpc", {}).get("port") == port,
                 f"{where}: {probe} probes port {p.get('grpc', {}).get('port')!r}, not the container port {port}")
        c.expect(p.get("grpc", {}).get("service", "") == "",
                 f"{where}: {probe} names a health service: kcached reports only the overall status (service \"\")")

    # Resources: requests for scheduling; workers must fit the CPU the pod gets.
    res = ctr.get("resources", {})
    req, lim = res.get("requests", {}) or {}, res.get("limits", {}) or {}
    for r in ("cpu", "memory"):
        c.expect(k8s_quantity(req.get(r)) is not None, f"{where}: resources.requests.{r} is not set")
        if r in lim and r in req:
            c.expect(k8s_quantity(req[r]) <= k8s_quantity(lim[r]),
                     f"{where}: requests.{r} {req[r]} exceeds limits.{r} {lim[r]}")
    c.expect(k8s_quantity(lim.get("memory")) is not None, f"{where}: resources.limits.memory is not set")
    if config:
        workers = config.get("workers")
        cpus = k8s_quantity(lim.get("cpu", req.get("cpu")))
        if c.expect(isinstance(workers, int) and workers > 0, f"{where}: workers = {workers!r}: set it "
                    "explicitly; 0 means one per core of the node, not of the pod"):
            if cpus is not None:
                c.expect(workers <= cpus, f"{where}: workers = {workers} is more than the {cpus:g} CPUs of the "
                         "container")
            per_worker = kcache_size(config.get("worker-memory", "0"))
            mem_limit = k8s_quantity(lim.get("memory"))
            if per_worker and mem_limit:
                c.expect(workers * per_worker <= mem_limit,
                         f"{where}: {workers} workers x worker-memory {config['worker-memory']} "
                         f"exceed limits.memory {lim['memory']}")

    check_security(c, f"the {where}'s kcached container", pod, ctr)
    if (ctr.get("securityContext") or {}).get("readOnlyRootFilesystem"):
        c.expect(any(os.path.normpath(m.get("mountPath", "")) == "/tmp" for m in mounts.values()),
                 f"{where}: the root filesystem is read-only but nothing is mounted at /tmp, where compile jobs write")

    # Drain: 30 s for calls in progress, then the queued compiles and the RocksDB flush.
    grace = pod.get("terminationGracePeriodSeconds", 30)
    c.expect(grace >= 60, f"{where}: terminationGracePeriodSeconds {grace} is too short for kcached's drain "
             "(at least 60)")
    return ctr, config


def db_mount(c, where, ctr, config):
    """The volume mount the config's db lies on, or None (a problem is recorded)."""
    mounts = ctr.get("volumeMounts", [])
    db = str(config.get("db", ""))
    c.expect(os.path.isabs(db), f"{where}: db = {db!r} should be an absolute path")
    mount = next((m for m in mounts if under(db, m.get("mountPath", "/nonexistent"))), None)
    mounted = ", ".join(f"{m.get('mountPath')} ({m.get('name')})" for m in mounts)
    c.expect(mount, f"{where}: db = {db!r} is on no volume (mounted: {mounted})")
    return mount


def check_max_size_fits(c, where, config, volume_size, volume_text):
    """--max-size leaves RocksDB at least 20% of the volume that holds the db."""
    max_size = kcache_size(config.get("max-size", "10G"))
    c.expect(max_size is not None and max_size <= 0.8 * volume_size,
             f"{where}: max-size {config.get('max-size')!r} leaves less than 20% of the {volume_text} volume for "
             "RocksDB's overhead")


def check_k8s(source_dir):
    c = Checker("deploy.k8s")
    k8s_dir = source_dir / "deploy/k8s"
    docs, files = load_manifests(c, k8s_dir, {"StatefulSet": "apps/v1", "Service": "v1", "ConfigMap": "v1",
                                              "Kustomization": "kustomize.config.k8s.io/v1beta1"})

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

    ctr, config = check_kcached_pod(c, "StatefulSet", pod, {cm["metadata"]["name"]: cm}, kcached_flags(source_dir))
    if ctr is None:
        return c.finish()
    grpc_port = next((p for p in ctr.get("ports", []) if p.get("name") == "grpc"), {})

    svc_spec = svc.get("spec", {})
    svc_selector = svc_spec.get("selector", {}) or {}
    c.expect(svc_selector, "the Service has no selector")
    for k, v in svc_selector.items():
        c.expect(pod_labels.get(k) == v, f"the Service selects {k}={v}, which the StatefulSet's pods do not carry")
    c.expect(any(sp.get("targetPort") in (grpc_port.get("containerPort"), "grpc") for sp in svc_spec.get("ports", [])),
             f"no Service port targets the container port ({grpc_port.get('containerPort')} or 'grpc')")

    # Storage: the db lies on the volume claimed by the template, and max-size fits that volume.
    claims = {t.get("metadata", {}).get("name"): t for t in spec.get("volumeClaimTemplates", [])}
    c.expect(claims, "the StatefulSet has no volumeClaimTemplates: the RocksDB would not survive the pod")
    if config and claims:
        mount = db_mount(c, "StatefulSet", ctr, config)
        if mount and c.expect(mount.get("name") in claims, f"db = {config.get('db')!r} is not on a volume from "
                              "volumeClaimTemplates"):
            claim = claims[mount["name"]]
            text = claim.get("spec", {}).get("resources", {}).get("requests", {}).get("storage")
            if c.expect(k8s_quantity(text), f"volumeClaimTemplate {mount['name']} requests no storage"):
                check_max_size_fits(c, "StatefulSet", config, k8s_quantity(text), text)
            c.expect(claim.get("spec", {}).get("accessModes"),
                     f"volumeClaimTemplate {mount['name']} has no accessModes")
    return c.finish()
