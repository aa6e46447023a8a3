#!/usr/bin/env python3
"""Checks the deployment files under deploy/ (ctest deploy.*).

    check_deploy.py k8s       SOURCE_DIR
    check_deploy.py fleet     SOURCE_DIR
    check_deploy.py container SOURCE_DIR [KCACHED KCACHE]
    check_deploy.py systemd   SOURCE_DIR KCACHED
    check_deploy.py config    SOURCE_DIR KCACHED
    check_deploy.py grafana   SOURCE_DIR KCACHED

Each check prints every problem it finds, then exits 1 if there was one, 0 if not, and 77
(ctest's SKIP_RETURN_CODE) when a tool it needs is missing, saying which and how to get it.
The checks tie the files to each other and to kcached: a port, a path or a flag renamed in one
place and not in the others fails here, not on an operator's machine.
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from check_config import check_config  # noqa: E402
from check_container import check_container  # noqa: E402
from check_fleet import check_fleet  # noqa: E402
from check_grafana import check_grafana  # noqa: E402
from check_k8s import check_k8s  # noqa: E402
from check_systemd import check_systemd  # noqa: E402


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    check, source_dir, rest = argv[1], Path(argv[2]).resolve(), argv[3:]
    if check == "k8s":
        return check_k8s(source_dir)
    if check == "fleet":
        return check_fleet(source_dir)
    if check == "container":
        return check_container(source_dir, rest)
    if check == "systemd" and len(rest) == 1:
        return check_systemd(source_dir, rest[0])
    if check == "config" and len(rest) == 1:
        return check_config(source_dir, rest[0])
    if check == "grafana" and len(rest) == 1:
        return check_grafana(source_dir, rest[0])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
