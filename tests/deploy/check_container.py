"""deploy.container: lints deploy/container/Dockerfile (Docker cannot build it in the test
environment) and checks its runtime package list against the libraries the built binaries load."""

import os
import re
import shutil
import subprocess

from deploy_common import Checker, listen_port, load_toml, under


def dockerfile_instructions(path):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def packages_of(libs):
    """{library path: owning Debian package or None}, asking dpkg once per spelling."""
    def spellings(lib):
        return [os.path.realpath(lib),  # the file itself, not a -dev package's symlink to it
                lib,
                lib[4:] if lib.startswith("/usr/") else "/usr" + lib]  # usr-merged systems: either

    owners = {}
    for attempt in range(3):
        todo = {spellings(lib)[attempt]: lib for lib in libs if lib not in owners}
        if not todo:
            break
        out = subprocess.run(["dpkg", "-S", *todo], capture_output=True, text=True).stdout
        for line in out.splitlines():
            package, _, path = line.partition(": ")
            if path in todo:  # "pkg:arch[, other]: path"
                owners[todo[path]] = package.split(",")[0].split(":")[0].strip()
    return {lib: owners.get(lib) for lib in libs}


def check_container(source_dir, binaries):
    c = Checker("deploy.container")
    dockerfile = source_dir / "deploy/container/Dockerfile"
    instructions = dockerfile_instructions(dockerfile)

    # Stages: at least build + runtime, every base Debian 12 (or an earlier stage).
    stages = []  # [(name, [(instr, args)])]
    for instr, args in instructions:
        if instr == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            image, name = (m.group(1), m.group(2)) if m else (args, None)
            earlier = [s[0] for s in stages]
            debian12 = re.fullmatch(r"debian:bookworm(-[a-z0-9.-]+)?(@sha256:[0-9a-f]{64})?", image)
            c.expect(debian12 or image in earlier,
                     f"FROM {image}: the images are Debian 12 (debian:bookworm*)")
            stages.append((name, []))
        elif c.expect(stages, f"{instr} before the first FROM"):
            stages[-1][1].append((instr, args))
    if not c.expect(len(stages) >= 2, f"{len(stages)} stage(s): expected a build stage and a runtime stage"):
        return c.finish()
    build, final = stages[0][1], stages[-1][1]

    for instr, args in instructions:
        c.expect(not (instr == "ADD" and re.search(r"\b(https?|git|ftp)://|git@", args)),
                 f"ADD {args}: fetching URLs makes the build unreproducible; COPY from the context instead")
    runs = " ".join(a for i, a in build if i == "RUN")
    c.expect("deploy/install-deps.sh" in runs,
             "the build stage does not install its packages with deploy/install-deps.sh")
    c.expect(re.search(r"cmake .*-G Ninja", runs), "the build stage does not configure with cmake -G Ninja")
    c.expect(re.search(r"--target[^&]*\bkcached\b", runs) and re.search(r"--target[^&]*\bkcache\b", runs),
             "the build stage does not build the kcached and kcache targets")

    # The runtime stage: non-root, health check, the binaries, the config, the volume, the port.
    users = [a for i, a in final if i == "USER"]
    if c.expect(users, "the final stage has no USER: kcached would run as root"):
        user = users[-1].split(":")[0]
        c.expect(user not in ("root", "0"), f"USER {users[-1]}: the final stage runs as root")
        c.expect(user.isdigit(), f"USER {users[-1]}: use a numeric uid, so Kubernetes' runAsNonRoot can verify it")
    health = [a for i, a in final if i == "HEALTHCHECK"]
    if c.expect(health, "the final stage has no HEALTHCHECK"):
        c.expect(not health[-1].upper().startswith("NONE") and re.search(r"\bkcache\b.*\bhealth\b", health[-1]),
                 f"HEALTHCHECK {health[-1]}: expected `kcache health` (the gRPC health service), which fails when "
                 "kcached does not answer or is draining")
    copies = " ".join(a for i, a in final if i == "COPY")
    for program in ("server/kcached", "client/kcache", "client/kcache-grpc"):
        c.expect(re.search(rf"--from=\S+ .*{program}\b", copies),
                 f"the final stage does not copy {program} from the build stage")

    # The baked-in config: where it is copied, that ENTRYPOINT passes it, and what it says.
    m = re.search(r"(deploy/container/\S+\.toml)\s+(\S+)", copies)
    config = None
    if c.expect(m, "the final stage does not copy a deploy/container/*.toml config"):
        config = load_toml((source_dir / m.group(1)).read_text(), m.group(1))
        entry = " ".join(a for i, a in final if i in ("ENTRYPOINT", "CMD"))
        c.expect(re.search(rf'"--config",\s*"{re.escape(m.group(2))}"', entry),
                 f"ENTRYPOINT/CMD does not pass --config {m.group(2)}")
    volumes = re.findall(r"/[^\s\"\],]+", " ".join(a for i, a in final if i == "VOLUME"))
    exposed = re.findall(r"\d+", " ".join(a for i, a in final if i == "EXPOSE"))
    if config:
        db = str(config.get("db", ""))
        c.expect(any(under(db, v) for v in volumes), f"db = {db!r} is not under a VOLUME ({volumes})")
        port = listen_port(config.get("listen"))
        c.expect(str(port) in exposed, f"kcached listens on port {port}, which is not EXPOSEd ({exposed})")
        c.expect(str(config.get("listen", "")).split(":")[0] in ("0.0.0.0", "[::]"),
                 f"listen {config.get('listen')!r}: a published port reaches the container's interface, "
                 "not its loopback")
        env = " ".join(a for i, a in final if i == "ENV")
        c.expect(re.search(rf"KCACHE_SERVER[= ]\S*:{port}\b", env),
                 f"the HEALTHCHECK's kcache must reach port {port}: set ENV KCACHE_SERVER=127.0.0.1:{port}")

    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if c.expect(ignore.is_file(), f"{ignore.name} is missing next to the Dockerfile"):
        patterns = {line.strip() for line in ignore.read_text().splitlines()}
        for p in (".git", "build*", "var"):
            c.expect(p in patterns, f"{ignore.name} does not exclude {p}")

    # The runtime packages cover every shared library the built binaries load.
    runtime_runs = " ".join(a for i, a in final if i == "RUN" and "apt-get install" in a)
    listed = set(re.findall(r"(?<![\w-])(lib[\w.+-]+|zlib1g)(?![\w.+-])", runtime_runs))
    c.expect(listed, "the final stage installs no runtime library packages")
    if not binaries:
        print("deploy.container: note: no binaries given, the runtime package list was not checked against ldd")
    elif not (shutil.which("ldd") and shutil.which("dpkg")):
        print("deploy.container: note: ldd or dpkg is missing (not Debian?): runtime packages not checked")
    else:
        libs = {}  # library path -> the binary that loads it
        for binary in binaries:
            run = subprocess.run(["ldd", binary], capture_output=True, text=True)
            if "not a dynamic executable" in run.stdout + run.stderr:
                continue  # static (the kcache front end): it loads no shared library
            run.check_returncode()
            out = run.stdout
            for lib in re.findall(r"=>\s+(/\S+)", out):
                libs.setdefault(lib, os.path.basename(binary))
        needed = {}
        for lib, owner in sorted(packages_of(libs).items()):
            c.expect(owner, f"{lib} (needed by {libs[lib]}) belongs to no Debian package: "
                     "the runtime image cannot get it")
            if owner:
                needed.setdefault(owner, os.path.basename(lib))
        for pkg, lib in sorted(needed.items()):
            c.expect(pkg in listed, f"the runtime stage does not install {pkg} (provides {lib})")
        for pkg in sorted(listed - set(needed)):
            print(f"deploy.container: note: the runtime stage installs {pkg}, "
                  "which no library of the binaries needs")
    return c.finish()
