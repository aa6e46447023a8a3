#!/usr/bin/env python3
"""Each dependency has one home (ARCHITECTURE.md, "Rules the code keeps"), checked on the code.

Follows every source file's #include lines through the project's own headers (transitively) and
fails, naming the chain, where a folder reaches a library it must not see:
  - LLVM only from server/compile/;
  - RocksDB only from server/store/;
  - hiredis only from server/remote/redis*, nghttp2 only from server/net/grpc_calls*;
  - gRPC and protobuf never from the cache core, the store, the remote tier or the compiler
    (server/cache, server/store, server/remote, server/compile), nor from common/.
Usage: check_layers.py REPO_ROOT
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
# Where a quoted or angled project header is looked up, in order.
ROOTS = ["server", "common/include", "client/include", "client/src", "client", "proto", "rtlib/include", "rtlib"]

LIBRARIES = {
    "LLVM": lambda h: h.startswith(("llvm/", "llvm-c/", "lld/", "clang/")),
    "RocksDB": lambda h: h.startswith("rocksdb/"),
    "hiredis": lambda h: h.startswith("hiredis/") or h in ("read.h", "sds.h"),
    "nghttp2": lambda h: h.startswith("nghttp2/"),
    "gRPC/protobuf": lambda h: h.startswith(("grpc/", "grpcpp/", "grpc++/", "google/protobuf/")) or h.endswith(".pb.h"),
}

# (folder prefix, library, allowed paths prefixes)
RULES = [
    ("server/", "LLVM", ("server/compile/",)),
    ("server/", "RocksDB", ("server/store/",)),
    ("server/", "hiredis", ("server/remote/redis",)),
    ("server/", "nghttp2", ("server/net/grpc_calls",)),
    ("server/cache/", "gRPC/protobuf", ()),
    ("server/store/", "gRPC/protobuf", ()),
    ("server/remote/", "gRPC/protobuf", ()),
    ("server/compile/", "gRPC/protobuf", ()),
    ("common/", "gRPC/protobuf", ()),
    ("common/", "LLVM", ()),
]


def resolve(repo: Path, name: str, beside: Path):
    for base in [beside.parent] + [repo / r for r in ROOTS]:
        candidate = base / name
        if candidate.is_file():
            return candidate.resolve()
    return None


def reach(repo: Path, source: Path):
    """Every external header `source` includes, directly or through project headers, with the chain."""
    found = {}
    stack = [(source, [source])]
    seen = {source}
    while stack:
        path, chain = stack.pop()
        for name in INCLUDE.findall(path.read_text(errors="replace")):
            local = resolve(repo, name, path)
            if local is not None:
                if local not in seen:
                    seen.add(local)
                    stack.append((local, chain + [local]))
            else:
                found.setdefault(name, chain)
    return found


def main() -> int:
    repo = Path(sys.argv[1]).resolve()
    sources = sorted(p for d in ("server", "common") for p in (repo / d).rglob("*") if p.suffix in (".cpp", ".hpp"))
    if len(sources) < 50:
        print(f"found only {len(sources)} sources under {repo}: wrong root?")
        return 1
    broken = 0
    for source in sources:
        rel = source.relative_to(repo).as_posix()
        external = reach(repo, source)
        for prefix, library, allowed in RULES:
            applies = rel.startswith(prefix) and not (allowed and rel.startswith(allowed))
            if not applies:
                continue
            for header, chain in external.items():
                if LIBRARIES[library](header):
                    names = " -> ".join(p.relative_to(repo).as_posix() for p in chain)
                    print(f"{rel}: reaches {library} ({header}) through {names}")
                    broken += 1
                    break
    print(f"{len(sources)} sources checked, {broken} broken rules")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
