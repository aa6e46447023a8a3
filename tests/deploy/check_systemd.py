"""deploy.systemd: systemd's own verification and exposure score of deploy/systemd/kcached.service,
plus the directives the deployment relies on."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from deploy_common import Checker, kcached_flags, load_toml, skip, under


def unit_entries(path):
    """[(section, key, value)] of a unit file; keys may repeat (SystemCallFilter=...)."""
    entries, section = [], None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line:
            key, _, value = line.partition("=")
            entries.append((section, key.strip(), value.strip()))
    return entries


def seconds(text):
    """systemd time spans: "120", "90s", "2min", "1min 30s"."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0
    for number, unit in re.findall(r"(\d+)\s*([a-z]*)", text):
        if unit not in units:
            return None
        total += int(number) * units[unit]
    return total


def check_drop_in(c, path, exec_start, flags):
    """A drop-in (kcached.service.d/*.conf) keeps the unit's command, adds real flags only, and
    passes credentials as files systemd loads for the service."""
    name = f"{path.parent.name}/{path.name}"
    service = [(key, value) for section, key, value in unit_entries(path) if section == "Service"]
    execs = [value for key, value in service if key == "ExecStart"]
    if not execs:
        return
    c.expect(execs[0] == "" and len(execs) == 2 and execs[1],
             f"{name}: a drop-in replaces ExecStart with an empty ExecStart= and then exactly one command")
    words = execs[-1].split()
    c.expect(words[:len(exec_start)] == exec_start,
             f"{name}: ExecStart does not begin with the unit's own command ({' '.join(exec_start)}): the two would "
             "drift apart")
    for word in words[1:]:
        c.expect(not word.startswith("--") or word in flags,
                 f"{name}: ExecStart gives {word}, which is not a kcached flag (server/config.cpp)")
    loaded = {value.partition(":")[0] for key, value in service
              if key in ("LoadCredential", "LoadCredentialEncrypted", "SetCredential", "SetCredentialEncrypted")}
    for cred in re.findall(r"(?:%d|\$\{CREDENTIALS_DIRECTORY\})/([\w.-]+)", execs[-1]):
        c.expect(cred in loaded, f"{name}: ExecStart reads the credential {cred}, which no LoadCredential= loads")
    if "--remote" in words:
        c.expect("--remote-secret-file" in words, f"{name}: --remote without --remote-secret-file: kcached refuses "
                 "to start")
    # DynamicUser=yes: the service's user cannot read root's files; credentials are the way in.
    for flag in ("--remote-secret-file", "--remote-password-file", "--tokens-file"):
        if flag in words[:-1]:
            value = words[words.index(flag) + 1]
            c.expect(value.startswith(("%d/", "${CREDENTIALS_DIRECTORY}/")),
                     f"{name}: {flag} {value} is not a credential (%d/NAME with LoadCredential=)")


def check_systemd(source_dir, kcached):
    c = Checker("deploy.systemd")
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        skip("systemd-analyze is not installed (Debian: apt-get install systemd); the unit was not verified")
    unit = source_dir / "deploy/systemd/kcached.service"
    entries = unit_entries(unit)
    service = {}
    for section, key, value in entries:
        if section == "Service":
            service.setdefault(key, []).append(value)

    def last(key):
        return service.get(key, [None])[-1]

    # The directives the deployment relies on; systemd-analyze only checks that they parse.
    c.expect(last("DynamicUser") == "yes" or last("User") not in (None, "root", "0"),
             "the service runs as root: set DynamicUser=yes or User=")
    for key, value in (("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                       ("NoNewPrivileges", "yes"), ("Restart", "on-failure"), ("KillMode", "mixed")):
        c.expect(last(key) == value, f"{key}={last(key)}: expected {key}={value}")
    c.expect(last("StateDirectory") == "kcache", f"StateDirectory={last('StateDirectory')}: expected kcache")
    c.expect(last("RestartSec"), "no RestartSec: a crash loop would restart as fast as it can")
    nofile = last("LimitNOFILE") or "0"
    c.expect(nofile.split(":")[0].isdigit() and int(nofile.split(":")[0]) >= 4096,
             f"LimitNOFILE={nofile}: RocksDB and many clients need at least 4096 descriptors")
    stop = seconds(last("TimeoutStopSec") or "90")
    c.expect(stop is not None and stop >= 60,
             f"TimeoutStopSec={last('TimeoutStopSec')}: kcached's drain needs at least 60 s")
    c.expect(last("MemoryDenyWriteExecute") in (None, "no"),
             "MemoryDenyWriteExecute=yes is inherited by ptxas/nvlink and nvJitLink; see the unit's comment")
    exec_start = (last("ExecStart") or "").split()
    c.expect(exec_start[:1] == ["/usr/local/bin/kcached"],
             f"ExecStart={' '.join(exec_start)}: expected /usr/local/bin/kcached")
    config_path = exec_start[exec_start.index("--config") + 1] if "--config" in exec_start[:-1] else None
    c.expect(config_path == "/etc/kcache/kcached.toml", "ExecStart does not pass --config /etc/kcache/kcached.toml")
    drop_ins = sorted((unit.parent / f"{unit.name}.d").glob("*.conf"))
    for drop_in in drop_ins:
        check_drop_in(c, drop_in, exec_start, kcached_flags(source_dir))

    # The config installed there keeps the database in the one writable place, the StateDirectory.
    config = load_toml((source_dir / "deploy/systemd/kcached.toml").read_text(), "deploy/systemd/kcached.toml")
    state = "/var/lib/" + (last("StateDirectory") or "kcache")
    c.expect(under(str(config.get("db", "")), state),
             f"deploy/systemd/kcached.toml: db = {config.get('db')!r} is outside {state}, "
             "and ProtectSystem=strict makes everything else read-only")

    # systemd's own checks, on a copy of the unit and its drop-ins (verify reads those beside the
    # unit) whose ExecStart is the built binary (verify wants it to exist).
    with tempfile.TemporaryDirectory() as tmp:
        def copy_of(path, to):
            to.parent.mkdir(exist_ok=True)
            to.write_text(re.sub(r"(?m)^ExecStart=/usr/local/bin/kcached\b", f"ExecStart={kcached}", path.read_text()))
            return to

        copy = copy_of(unit, Path(tmp) / unit.name)
        for drop_in in drop_ins:
            copy_of(drop_in, Path(tmp) / f"{unit.name}.d" / drop_in.name)
        env = dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
        # verify exits 0 on unknown keys and unparsable values (it only warns), so any output fails.
        r = subprocess.run([analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True, env=env)
        output = (r.stdout + r.stderr).strip()
        c.expect(r.returncode == 0 and not output,
                 f"systemd-analyze verify (exit {r.returncode}) reported:\n{output}")
        # Offline exposure score (0-100 here; systemd prints it /10). 25 = "2.5 OK".
        r = subprocess.run([analyze, "security", "--offline=true", "--threshold=25", "--no-pager", str(copy)],
                           capture_output=True, text=True, env=env)
        if "--offline" in r.stderr and "unrecognized" in r.stderr:
            print("deploy.systemd: note: this systemd-analyze has no --offline; exposure not scored")
        else:
            score = re.search(r"Overall exposure level for \S+: (.*)", r.stdout)
            print(f"deploy.systemd: exposure {score.group(1) if score else '?'}")
            c.expect(r.returncode == 0, "systemd-analyze security: exposure above 2.5; weakened settings:\n"
                     + "\n".join(l for l in r.stdout.splitlines() if l.startswith("✗")) + r.stderr)
    return c.finish()
