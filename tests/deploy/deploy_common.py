"""What the deploy checks share: collecting problems, skipping, reading TOML and YAML, sizes."""

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

SKIP = 77


class Checker:
    """Collects problems so that one run reports all of them."""

    def __init__(self, name):
        self.name = name
        self.problems = []

    def expect(self, condition, message):
        if not condition:
            self.problems.append(message)
        return condition

    def finish(self):
        for p in self.problems:
            print(f"{self.name}: FAIL: {p}")
        if self.problems:
            return 1
        print(f"{self.name}: ok")
        return 0


def skip(message):
    print(f"SKIP: {message}")
    sys.exit(SKIP)


def load_toml(text, where):
    try:
        import tomllib  # Python 3.11+ (Debian 12's python3)
    except ImportError:
        skip("Python 3.11 or newer is needed to read TOML (tomllib)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SystemExit(f"{where}: not valid TOML: {e}")


def load_yaml_documents(path):
    try:
        import yaml
    except ImportError:
        skip("PyYAML is not installed (Debian: apt-get install python3-yaml)")
    with open(path) as f:
        try:
            return [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            raise SystemExit(f"{path}: not valid YAML: {e}")


# kcached's sizes: bytes, or a number with K/M/G/T (powers of 1024), as common/src/job.cpp reads them.
def kcache_size(text):
    m = re.fullmatch(r"(\d+)([KMGTkmgt]?)", str(text))
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")


# Kubernetes quantities: "4", "500m", "8Gi", "10G".
def k8s_quantity(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?", str(text))
    if not m:
        return None
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}[m.group(2)]
    return float(m.group(1)) * scale


def listen_port(listen):
    m = re.fullmatch(r".*:(\d+)", str(listen))
    return int(m.group(1)) if m else None


def under(path, folder):
    """Whether `path` is `folder` or lies inside it (both absolute, compared as text)."""
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def kcached_flags(source_dir):
    """Every long flag kcached defines, read from server/config.cpp (the one source of truth)."""
    text = (source_dir / "server/config.cpp").read_text()
    flags = re.findall(r'(?:add_option|add_flag|set_config)\(\s*"(?:-\w,)?(--[a-z0-9-]+)"', text)
    if not flags:
        raise SystemExit("server/config.cpp: found no add_option(\"--...\"): has the parser moved?")
    return flags


class Kcached:
    """A kcached started on `args` plus the test's own --port-file in `tmp`, its log in tmp/log."""

    def __init__(self, kcached, args, tmp):
        self.port_file = Path(tmp) / "port"
        self.port_file.unlink(missing_ok=True)
        self.log = open(Path(tmp) / "log", "w+")
        self.proc = subprocess.Popen([kcached, *args, "--port-file", str(self.port_file)],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_listening(self, seconds=120):
        """Whether kcached wrote its port file (it listens) before it exited or time ran out."""
        deadline = time.monotonic() + seconds
        while not self.port_file.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.port_file.exists()

    def stop(self):
        """SIGTERM (a drain), SIGKILL after 60 s; returns (exit code, the whole log)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.seek(0)
        output = self.log.read()
        self.log.close()
        return code, output


def credential_file(tmp, name, size=64):
    """A file of `size` random bytes that only its owner reads: a stand-in for a fleet secret or a
    Redis password (kcached wants at least 32 bytes of secret)."""
    path = Path(tmp) / name
    path.write_bytes(secrets.token_hex(size // 2).encode())
    path.chmod(0o600)
    return path
