"""deploy.config: every kcached configuration shipped under deploy/ names only real flags and
starts the built kcached; deploy/README.md documents every flag of server/config.cpp."""

import re
import shutil
import tempfile
from pathlib import Path

from deploy_common import (Checker, Kcached, credential_file, kcache_size, kcached_flags, load_toml,
                           load_yaml_documents)


def shipped_configs(source_dir):
    """{name: TOML text} of every kcached config under deploy/."""
    configs = {}
    for path in sorted((source_dir / "deploy").rglob("*.toml")):
        configs[str(path.relative_to(source_dir))] = path.read_text()
    for path in sorted((source_dir / "deploy/k8s").rglob("*.yaml")):
        for doc in load_yaml_documents(path):
            if doc.get("kind") == "ConfigMap":
                for key, text in (doc.get("data") or {}).items():
                    if key.endswith(".toml"):
                        configs[f"{path.relative_to(source_dir)} ({key})"] = text
    return configs


def run_with_config(kcached, config_file, config, tmp):
    """Starts kcached on the config (with its own address and db), then stops it; returns a problem or None."""
    # Address, db and port file are the test's own; one worker, because each worker probes the
    # toolchain at start and only starting is tested. Everything else comes from the config.
    args = ["--config", str(config_file), "--listen", "127.0.0.1:0", "--db", str(Path(tmp) / "db"), "--workers", "1"]
    # A config that joins a fleet names its machine's credential files (or leaves them to flags, as
    # the Kubernetes pods do); the test's own stand in. Redis need not answer for kcached to start.
    for key in ("remote-secret-file", "remote-password-file"):
        if key in config or (key == "remote-secret-file" and "remote" in config):
            args += [f"--{key}", str(credential_file(tmp, key))]
    daemon = Kcached(kcached, args, tmp)
    started = daemon.wait_listening()
    code, output = daemon.stop()
    if not started or code != 0:
        return f"kcached {'started' if started else 'did not start'} and exited {code}:\n{output.strip()}"
    return None


def check_config(source_dir, kcached):
    c = Checker("deploy.config")
    flags = kcached_flags(source_dir)
    keys = {f[2:] for f in flags} - {"config"}

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in shipped_configs(source_dir).items():
            config = load_toml(text, name)
            # kcached exits 2 on a key it does not know; name it here, against the flag list.
            for key in sorted(set(config) - keys):
                c.expect(False, f"{name}: {key!r} is not a kcached flag (known: {', '.join(sorted(keys))})")
            for key in ("max-size", "max-module-size", "worker-memory", "hot-cache-size", "remote-write-queue-size"):
                if key in config:
                    c.expect(kcache_size(config[key]) is not None,
                             f"{name}: {key} = {config[key]!r} is not a size")
            for key in ("workers", "queue-depth", "max-archs", "job-timeout", "remote-timeout-ms",
                        "remote-connect-timeout-ms", "remote-lease-ms"):
                if key in config:
                    c.expect(isinstance(config[key], int) and config[key] >= 0, f"{name}: {key} is not a count")
            # And kcached itself reads it: values are validated, the daemon starts and drains.
            config_file = Path(tmp) / "kcached.toml"
            config_file.write_text(text)
            problem = run_with_config(kcached, config_file, config, tmp)
            c.expect(problem is None, f"{name}: {problem}")
            shutil.rmtree(Path(tmp) / "db", ignore_errors=True)

    # deploy/README.md's configuration reference has a row for every flag, and none for a flag
    # that is gone; the TOML key column names the flag.
    readme = (source_dir / "deploy/README.md").read_text()
    section = readme.partition("## Configuration reference")[2].partition("\n## ")[0]
    c.expect(section, "deploy/README.md has no '## Configuration reference' section")
    rows = {}
    for line in section.splitlines():
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        m = re.match(r"`(--[a-z0-9-]+)", cells[0]) if line.startswith("|") else None
        if m:
            rows[m.group(1)] = cells
    for flag in flags:
        if c.expect(flag in rows, f"deploy/README.md: the configuration reference has no row for {flag}"):
            toml = rows[flag][1] if len(rows[flag]) > 1 else ""
            expected = "—" if flag == "--config" else f"`{flag[2:]}`"
            c.expect(toml == expected,
                     f"deploy/README.md: {flag}'s TOML key column says {toml!r}, expected {expected!r}")
    for flag in sorted(set(rows) - set(flags)):
        c.expect(False, f"deploy/README.md documents {flag}, which server/config.cpp does not define")
    return c.finish()
