"""deploy.fleet: the manifests in deploy/k8s/fleet (kcached daemons sharing one Redis Cluster)
agree with each other, with kcached's flags and with the Redis configuration they ship."""

import os
import re

from check_k8s import (check_kcached_pod, check_max_size_fits, check_security, command_line, db_mount,
                       load_manifests)
from deploy_common import Checker, k8s_quantity, kcached_flags

EXPECTED_API = {"Deployment": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1", "Service": "v1",
                "ConfigMap": "v1", "Job": "batch/v1", "PodDisruptionBudget": "policy/v1",
                "NetworkPolicy": "networking.k8s.io/v1", "Kustomization": "kustomize.config.k8s.io/v1beta1"}
# kcached on any node, or one per GPU node: kustomization.yaml lists exactly one of them.
ALTERNATIVES = ("kcached-deployment.yaml", "kcached-daemonset.yaml")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")
# Paths the pods read secrets from; each must be a key of a mounted Secret.
SECRET_PATH = r"/run/secrets/[\w.-]+/[\w.-]+"
# The Redis Cluster bus listens on the client port + 10000 unless cluster-port says otherwise.
CLUSTER_BUS_OFFSET = 10000


def matches(selector, labels):
    """Whether a label selector (matchLabels, matchExpressions) selects these labels."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) or \
                (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def redis_directives(text):
    """{directive: value} of a redis.conf (the last one wins, as in Redis)."""
    out = {}
    for line in text.splitlines():
        words = line.split(None, 1)
        if words and not words[0].startswith("#"):
            out[words[0].lower()] = words[1].strip() if len(words) > 1 else ""
    return out


def redis_bytes(text):
    """Redis memory units: 1k = 1000, 1kb = 1024 (and m, mb, g, gb)."""
    m = re.fullmatch(r"(\d+)(k|kb|m|mb|g|gb)?", str(text).strip().lower())
    if not m:
        return None
    scale = {None: 1, "k": 1e3, "kb": 2**10, "m": 1e6, "mb": 2**20, "g": 1e9, "gb": 2**30}[m.group(2)]
    return int(m.group(1)) * scale


def secret_keys(kustomization, docs):
    """{Secret name: its keys}: from secretGenerator entries (kustomize rewrites references to the
    generated, hashed names) and from Secret manifests."""
    out = {}
    for gen in kustomization.get("secretGenerator") or []:
        keys = out.setdefault(gen.get("name"), set())
        for entry in gen.get("files") or []:
            key, _, path = str(entry).rpartition("=")
            keys.add(key or os.path.basename(path))
        keys.update(str(entry).partition("=")[0] for entry in gen.get("literals") or [])
    for _, doc in docs.get("Secret", []):
        out[doc["metadata"]["name"]] = set(doc.get("data") or {}) | set(doc.get("stringData") or {})
    return out


def containers(pod):
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])


def secret_file(pod, ctr, path, secrets):
    """The Secret a container reads `path` from, or a problem: the mount, volume and key behind it."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for mount in ctr.get("volumeMounts") or []:
        folder = os.path.normpath(mount.get("mountPath", "/nonexistent"))
        if os.path.dirname(path) != folder:
            continue
        secret = (volumes.get(mount.get("name")) or {}).get("secret")
        if secret is None:
            return None, f"{folder} is not a Secret volume"
        name = secret.get("secretName")
        items = {i.get("path"): i.get("key") for i in secret.get("items") or []}
        key = items.get(os.path.basename(path)) if items else os.path.basename(path)
        if key not in secrets.get(name, set()):
            return None, f"the Secret {name} has no key for {os.path.basename(path)}"
        return name, None
    return None, f"no volume is mounted at {os.path.dirname(path)}"


def check_references(c, where, pod, secrets, config_maps, claims=()):
    """Every Secret, ConfigMap, key and volume (or volume claim template, `claims`) the pod names
    exists, and every /run/secrets path its containers read is a key of a Secret mounted there."""
    for vol in pod.get("volumes") or []:
        if "secret" in vol:
            name = vol["secret"].get("secretName")
            if c.expect(name in secrets, f"{where}: volume {vol.get('name')} names the Secret {name}, which "
                        "neither a Secret manifest nor a secretGenerator makes"):
                for item in vol["secret"].get("items") or []:
                    c.expect(item.get("key") in secrets[name],
                             f"{where}: the Secret {name} has no key {item.get('key')}")
        if "configMap" in vol:
            name = vol["configMap"].get("name")
            if c.expect(name in config_maps, f"{where}: volume {vol.get('name')} names the ConfigMap {name}, "
                        "which these manifests do not make"):
                for item in vol["configMap"].get("items") or []:
                    c.expect(item.get("key") in (config_maps[name].get("data") or {}),
                             f"{where}: the ConfigMap {name} has no key {item.get('key')}")
    volumes = {v.get("name") for v in pod.get("volumes") or []} | set(claims)
    for ctr in containers(pod):
        cwhere = f"{where} container {ctr.get('name')}"
        for mount in ctr.get("volumeMounts") or []:
            c.expect(mount.get("name") in volumes,
                     f"{cwhere} mounts {mount.get('name')}, which is no volume of its pod")
        for env in ctr.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                c.expect(ref.get("key") in secrets.get(ref.get("name"), set()),
                         f"{cwhere}: env {env.get('name')} reads key {ref.get('key')} of the Secret {ref.get('name')}, "
                         "which does not exist")
        probes = [(ctr.get(p) or {}).get("exec", {}).get("command", []) for p in
                  ("readinessProbe", "livenessProbe", "startupProbe")]
        text = " ".join(command_line(ctr) + [str(word) for probe in probes for word in probe])
        for path in sorted(set(re.findall(SECRET_PATH, text))):
            _, problem = secret_file(pod, ctr, path, secrets)
            c.expect(problem is None, f"{cwhere} reads {path}, but {problem}")


def check_kustomization(c, fleet_dir, files, kust):
    listed = set(kust.get("resources") or [])
    for name in sorted(listed):
        c.expect((fleet_dir / name).is_file(), f"kustomization.yaml lists {name}, which does not exist")
    manifests = {p.name for p in files} - {"kustomization.yaml", "kustomization.yml"}
    for name in sorted(manifests - listed - set(ALTERNATIVES)):
        c.expect(False, f"{name} is not in kustomization.yaml resources: kubectl apply -k would skip it")
    chosen = [name for name in ALTERNATIVES if name in listed]
    c.expect(len(chosen) == 1, f"kustomization.yaml must list exactly one of {', '.join(ALTERNATIVES)}, "
             f"not {chosen or 'neither'}")
    # The generators' files hold the credentials: they must never be committed.
    for gen in kust.get("secretGenerator") or []:
        for entry in gen.get("files") or []:
            folder = (fleet_dir / str(entry).rpartition("=")[2]).parent
            ignore = folder / ".gitignore"
            c.expect(ignore.is_file() and "*" in ignore.read_text().split(),
                     f"secretGenerator {gen.get('name')} reads {entry}, but {folder.name}/.gitignore does not "
                     "ignore every file there: the credentials could be committed")


def check_redis(c, sts, config_maps, services, job):
    """The Redis Cluster: its redis.conf, its Service, and the Job that forms the cluster.
    Returns (StatefulSet name, headless Service name, client port, replicas)."""
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    ctr = next((x for x in pod.get("containers") or [] if x.get("name") == "redis"), {})
    ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports") or []}
    port = ports.get("redis")
    c.expect(isinstance(port, int), "the redis container has no port named redis")
    replicas, name = spec.get("replicas"), sts["metadata"]["name"]

    # redis.conf comes from a ConfigMap mounted in the container.
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    conf = None
    for mount in ctr.get("volumeMounts") or []:
        cm = config_maps.get((volumes.get(mount.get("name")) or {}).get("configMap", {}).get("name"))
        if cm and "redis.conf" in (cm.get("data") or {}):
            conf = redis_directives(cm["data"]["redis.conf"])
    if not c.expect(conf is not None, "no ConfigMap with a redis.conf is mounted in the redis container"):
        return name, spec.get("serviceName"), port, replicas
    c.expect(conf.get("cluster-enabled") == "yes", "redis.conf: cluster-enabled is not yes")
    c.expect(int(conf.get("port", "6379")) == port, f"redis.conf: port {conf.get('port', '6379')} is not the "
             f"container port {port}")
    c.expect(ports.get("cluster-bus") == int(conf.get("cluster-port", port + CLUSTER_BUS_OFFSET)),
             f"the redis container's cluster-bus port {ports.get('cluster-bus')} is not Redis's cluster bus "
             f"(the client port + {CLUSTER_BUS_OFFSET})")
    c.expect(conf.get("maxmemory-policy", "").startswith("allkeys-"),
             f"redis.conf: maxmemory-policy {conf.get('maxmemory-policy')!r}: a cache must evict any key "
             "(allkeys-lru); entries have no TTL, so volatile-* policies would refuse writes instead")
    for word in ("requirepass", "masterauth"):
        c.expect(word not in conf, f"redis.conf sets {word}: the password belongs in the Secret, not a ConfigMap")
    persistent = conf.get("appendonly") == "yes" or conf.get("save", '""') not in ('""', "''", "")
    limit = k8s_quantity(((ctr.get("resources") or {}).get("limits") or {}).get("memory"))
    maxmemory = redis_bytes(conf.get("maxmemory", "0"))
    share = 0.5 if persistent else 0.75
    if c.expect(maxmemory and limit, "redis.conf has no maxmemory or the redis container no memory limit: "
                "Redis would grow until the kernel kills it"):
        c.expect(maxmemory <= share * limit,
                 f"redis.conf: maxmemory {conf['maxmemory']} is more than {share:.0%} of the container's memory "
                 "limit: buffers and the fork of a replica sync (or a snapshot) need the rest")
    # nodes.conf is the node's identity in the cluster: it must outlive the pod.
    claims = {t.get("metadata", {}).get("name") for t in spec.get("volumeClaimTemplates") or []}
    data_dir = conf.get("dir", "")
    mount = next((m for m in ctr.get("volumeMounts") or []
                  if os.path.normpath(m.get("mountPath", "")) == os.path.normpath(data_dir or "/nonexistent")), None)
    c.expect(mount and mount.get("name") in claims, f"redis.conf: dir {data_dir!r} (where nodes.conf lives) is not "
             "on a volume from volumeClaimTemplates: a restarted node would forget the cluster")

    svc = services.get(spec.get("serviceName"))
    if c.expect(svc, f"the StatefulSet {name}'s serviceName {spec.get('serviceName')!r} is no Service here"):
        c.expect(svc.get("spec", {}).get("clusterIP") == "None",
                 f"the Service {spec.get('serviceName')} is not headless (clusterIP: None): nodes need DNS names")
        c.expect(svc.get("spec", {}).get("publishNotReadyAddresses") is True,
                 f"the Service {spec.get('serviceName')} does not publish nodes before they are ready")

    # The Job forms the cluster from exactly these nodes.
    if c.expect(job is not None, "no Job runs redis-cli --cluster create"):
        jctr = (job.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]
        env = {e.get("name"): str(e.get("value")) for e in jctr.get("env") or []}
        c.expect("--cluster create" in " ".join(command_line(jctr)), "the Job does not run redis-cli --cluster create")
        for key, value in (("REDIS_STATEFULSET", name), ("REDIS_SERVICE", spec.get("serviceName")),
                           ("REDIS_NODES", replicas), ("REDIS_PORT", port)):
            c.expect(env.get(key) == str(value), f"the Job's {key} is {env.get(key)!r}, not {str(value)!r}")
        per_primary = int(env.get("REDIS_REPLICAS", "0")) if env.get("REDIS_REPLICAS", "").isdigit() else None
        if c.expect(per_primary is not None and isinstance(replicas, int), "the Job's REDIS_REPLICAS is not a count"):
            primaries, rest = divmod(replicas, per_primary + 1)
            c.expect(rest == 0 and primaries >= 3, f"{replicas} nodes with {per_primary} replicas each do not make "
                     "3 or more primaries, the least a Redis Cluster takes")
    return name, spec.get("serviceName"), port, replicas


def check_remote(c, where, config, redis):
    """kcached's remote URL names the Redis Cluster's nodes at their port."""
    sts_name, service, port, replicas = redis
    url = str(config.get("remote", ""))
    m = re.fullmatch(r"redis-cluster://(.+)", url)
    if not c.expect(m, f"{where}: remote {url!r} is not a redis-cluster:// URL of the Redis Cluster here"):
        return
    for seed in m.group(1).split(","):
        host, _, seed_port = seed.rpartition(":")
        first = host.split(".")
        node = re.fullmatch(rf"{re.escape(sts_name)}-(\d+)", first[0])
        c.expect(len(first) >= 2 and first[1] == service and node and int(node.group(1)) < (replicas or 0),
                 f"{where}: remote seed {seed} is not a node of the StatefulSet {sts_name} "
                 f"({sts_name}-N.{service}, N < {replicas})")
        c.expect(seed_port == str(port), f"{where}: remote seed {seed} is not on the Redis port {port}")


def check_alternatives_agree(c, kcached_pods):
    """The Deployment and the DaemonSet run the same kcached, apart from sizing and placement."""
    if len(kcached_pods) != 2:
        return
    sizing = {"--workers", "--worker-memory", "--queue-depth"}

    def essence(pod):
        ctr = next((x for x in pod.get("containers") or [] if x.get("name") == "kcached"), {})
        argv, kept, skip = command_line(ctr), [], False
        for arg in argv:
            if skip:
                skip = False
            elif arg in sizing:
                skip = True
            else:
                kept.append(arg)
        same = {k: ctr.get(k) for k in ("image", "ports", "startupProbe", "readinessProbe", "livenessProbe",
                                          "securityContext", "volumeMounts")}
        return dict(same, argv=kept, volumes=pod.get("volumes"), podSecurityContext=pod.get("securityContext"))

    (a_where, a), (b_where, b) = kcached_pods
    ea, eb = essence(a), essence(b)
    for key in ea:
        c.expect(ea[key] == eb[key], f"the {a_where} and the {b_where} differ in the kcached pod's {key}: "
                 "keep the alternatives in step")


def check_services(c, services, templates):
    """Every Service selects pods of these manifests and targets ports they expose."""
    for name, svc in services.items():
        selector = {"matchLabels": svc.get("spec", {}).get("selector") or {}}
        pods = [pod for _, _, _, labels, pod in templates if selector["matchLabels"] and matches(selector, labels)]
        if not c.expect(pods, f"the Service {name} selects no pods of these manifests"):
            continue
        for sp in svc.get("spec", {}).get("ports") or []:
            target = sp.get("targetPort", sp.get("port"))
            c.expect(any(target in (p.get("name"), p.get("containerPort"))
                         for pod in pods for ctr in containers(pod) for p in ctr.get("ports") or []),
                     f"the Service {name} port {sp.get('name')} targets {target!r}, which its pods do not expose")


def check_fleet_kcached(c, where, pod, config_maps, secrets, flags, redis, redis_secrets):
    """A kcached pod of the fleet: the shared checks, the remote tier and its credentials, and its
    own tier on an emptyDir."""
    ctr, config = check_kcached_pod(c, where, pod, config_maps, flags)
    if ctr is None or config is None:
        return
    c.expect(config.get("remote"), f"{where}: kcached has no remote: it would not share the cache")
    check_remote(c, where, config, redis)
    for key in ("remote-secret-file", "remote-password-file"):
        path = config.get(key)
        if not c.expect(path, f"{where}: kcached is not given --{key} (the Redis Cluster requires a password; "
                        "the fleet secret signs every entry)"):
            continue
        secret, problem = secret_file(pod, ctr, str(path), secrets)
        # A path under /run/secrets had its problem reported with the pod's references.
        c.expect(problem is None or re.fullmatch(SECRET_PATH, str(path)), f"{where}: --{key} {path}: {problem}")
        if key == "remote-password-file" and secret:
            c.expect(secret in redis_secrets, f"{where}: --{key} reads the Secret {secret}, which the Redis "
                     f"pods do not use ({', '.join(sorted(redis_secrets))})")
    # The pod's own tier: an emptyDir, max-size within it, both within the ephemeral storage.
    mount = db_mount(c, where, ctr, config)
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    empty_dir = (volumes.get((mount or {}).get("name")) or {}).get("emptyDir")
    if mount and c.expect(empty_dir is not None and k8s_quantity(empty_dir.get("sizeLimit")),
                          f"{where}: db is not on an emptyDir with a sizeLimit"):
        check_max_size_fits(c, where, config, k8s_quantity(empty_dir["sizeLimit"]), empty_dir["sizeLimit"])
    on_disk = sum(k8s_quantity(v["emptyDir"].get("sizeLimit")) or 0 for v in volumes.values()
                  if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")
    storage = k8s_quantity(((ctr.get("resources") or {}).get("limits") or {}).get("ephemeral-storage"))
    c.expect(storage and on_disk <= storage, f"{where}: limits.ephemeral-storage does not hold the emptyDirs' "
             "sizeLimits: the kubelet would evict the pod as its cache fills")


def check_redis_access(c, docs, templates, redis_labels):
    """Who may reach Redis (NetworkPolicy), and how many of its nodes may be down at once (PDB)."""
    reaches = [(where, labels, "redis") for where, kind, _, labels, _ in templates if kind != "StatefulSet"] + \
              [("the Redis nodes", redis_labels, "cluster-bus")]
    for _, policy in docs.get("NetworkPolicy", []):
        spec = policy.get("spec", {})
        if not matches(spec.get("podSelector"), redis_labels):
            continue
        for where, labels, port in reaches:
            c.expect(any(any(matches(f.get("podSelector"), labels) for f in rule.get("from") or [])
                         and any(p.get("port") == port for p in rule.get("ports") or [])
                         for rule in spec.get("ingress") or []),
                     f"the NetworkPolicy {policy['metadata']['name']} does not let {where} reach Redis's {port} port")
    pdbs = [doc for _, doc in docs.get("PodDisruptionBudget", []) if matches(doc["spec"].get("selector"), redis_labels)]
    c.expect(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == 1,
             "expected one PodDisruptionBudget letting one Redis node at a time go (maxUnavailable: 1)")


def check_fleet(source_dir):
    c = Checker("deploy.fleet")
    fleet_dir = source_dir / "deploy/k8s/fleet"
    docs, files = load_manifests(c, fleet_dir, EXPECTED_API)
    kusts = docs.get("Kustomization", [])
    if not c.expect(len(kusts) == 1, f"expected one kustomization.yaml in {fleet_dir}, found {len(kusts)}"):
        return c.finish()
    kust = kusts[0][1]
    check_kustomization(c, fleet_dir, files, kust)

    # Names: unique per kind, all labelled as parts of kcache.
    seen = {}
    for kind, entries in docs.items():
        for file, doc in entries:
            if kind == "Kustomization":
                continue
            name = doc["metadata"].get("name")
            c.expect((kind, name) not in seen, f"{file}: {kind} {name} is also defined in {seen.get((kind, name))}")
            seen[(kind, name)] = file
            labels = doc["metadata"].get("labels") or {}
            c.expect(labels.get("app.kubernetes.io/part-of") == "kcache",
                     f"{file}: {kind} {name} is not labelled app.kubernetes.io/part-of: kcache")

    secrets = secret_keys(kust, docs)
    config_maps = {doc["metadata"]["name"]: doc for _, doc in docs.get("ConfigMap", [])}
    services = {doc["metadata"]["name"]: doc for _, doc in docs.get("Service", [])}
    flags = kcached_flags(source_dir)

    # Every workload: its selector, references and security.
    templates = []  # (where, kind, doc, pod labels, pod spec)
    for kind in WORKLOADS:
        for file, doc in docs.get(kind, []):
            where = f"{kind} {doc['metadata']['name']} ({file})"
            template = doc.get("spec", {}).get("template", {})
            labels, pod = template.get("metadata", {}).get("labels") or {}, template.get("spec", {})
            templates.append((where, kind, doc, labels, pod))
            if kind != "Job":
                selector = doc.get("spec", {}).get("selector")
                c.expect(selector and matches(selector, labels), f"{where}: its selector does not select its own pods")
            claims = [t.get("metadata", {}).get("name") for t in doc.get("spec", {}).get("volumeClaimTemplates") or []]
            check_references(c, where, pod, secrets, config_maps, claims)
            for ctr in containers(pod):
                if ctr.get("name") != "kcached":  # check_kcached_pod checks that one
                    check_security(c, f"{where} container {ctr.get('name')}", pod, ctr)

    check_services(c, services, templates)

    # The Redis Cluster.
    redis_sts = [doc for _, doc in docs.get("StatefulSet", [])
                 if any(x.get("name") == "redis" for x in doc["spec"]["template"]["spec"].get("containers") or [])]
    if not c.expect(len(redis_sts) == 1, f"expected one StatefulSet with a redis container, found {len(redis_sts)}"):
        return c.finish()
    jobs = [doc for _, doc in docs.get("Job", [])]
    redis = check_redis(c, redis_sts[0], config_maps, services, jobs[0] if jobs else None)
    redis_labels = redis_sts[0]["spec"]["template"]["metadata"].get("labels") or {}
    redis_pod = redis_sts[0]["spec"]["template"]["spec"]
    redis_secrets = {v["secret"].get("secretName") for v in redis_pod.get("volumes") or [] if "secret" in v}

    # kcached, as a Deployment or a DaemonSet.
    kcached_pods = []
    for where, kind, doc, labels, pod in templates:
        if kind not in ("Deployment", "DaemonSet"):
            continue
        kcached_pods.append((where, pod))
        check_fleet_kcached(c, where, pod, config_maps, secrets, flags, redis, redis_secrets)
    c.expect(kcached_pods, "no Deployment or DaemonSet runs kcached")
    check_alternatives_agree(c, kcached_pods)

    check_redis_access(c, docs, templates, redis_labels)
    return c.finish()
