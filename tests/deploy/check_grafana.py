"""deploy.grafana: every metric that deploy/grafana/kcache.json's queries name is one a real
kcached exposes, so a renamed metric breaks this test and not the operators' dashboard."""

import json
import re
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from deploy_common import Checker, Kcached, credential_file

# PromQL words that look like metric names but are not (functions are recognised by their "(").
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                   "offset", "inf", "nan", "start", "end"}
# Labels Prometheus adds when it scrapes; kcached's own samples never carry them.
TARGET_LABELS = {"instance", "job"}
NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
LABELS = r"\{((?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\}"


def dashboard_queries(dashboard):
    """[(where, expr)]: every panel query (rows' nested panels too) and every templating query."""
    out = []

    def walk(panels):
        for panel in panels or []:
            for target in panel.get("targets") or []:
                out.append((f"panel {panel.get('title')!r} query {target.get('refId')}", target.get("expr")))
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    for var in (dashboard.get("templating") or {}).get("list") or []:
        query = var.get("query") if var.get("type") == "query" else None
        query = (query.get("query") if isinstance(query, dict) else query) or ""
        # label_values([SELECTOR,] LABEL) and query_result(EXPR) wrap PromQL; keep the PromQL.
        m = re.fullmatch(r"\s*label_values\((?:(.*),)?\s*\w+\s*\)\s*", query, re.S)
        if m:
            query = m.group(1) or ""
        m = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
        if m:
            query = m.group(1)
        if query.strip():
            out.append((f"variable {var.get('name')!r}", query))
    return out


def promql_names(expr):
    """The metric names a PromQL expression selects, and {name: label names its matchers use}."""
    text = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`", '""', expr)  # strings
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "1", text)  # Grafana variables ($__rate_interval, ${x})
    matchers = {}
    for m in re.finditer(rf"(?<![\w:.])({NAME})\s*{LABELS}", text):
        labels = re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m.group(2))
        matchers.setdefault(m.group(1), set()).update(labels)
    text = re.sub(LABELS, " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(rf"(?<![\w:.]){NAME}", text):
        if m.group() in PROMQL_KEYWORDS or text[m.end():].lstrip().startswith("("):
            continue  # a keyword, or a function or aggregation
        names.add(m.group())
    return names, matchers


def grouping_labels(expr):
    """Label names of by (...) and on (...) clauses: they must exist on what is aggregated."""
    return {label for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr)
            for label in re.findall(r"\w+", clause)}


def rated_names(expr):
    """Metric names that rate(), irate() or increase() is applied to directly."""
    return set(re.findall(rf"\b(?:rate|irate|increase)\(\s*({NAME})", expr))


class Exposition:
    """What a /metrics page (Prometheus text format 0.0.4) exposes."""

    def __init__(self, text):
        self.types = {}  # family -> counter, gauge, histogram, summary, untyped
        self.sample_labels = {}  # sample name -> label names seen on it
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                parts = line.split()
                if len(parts) >= 4:
                    self.types[parts[2]] = parts[3]
            elif line and not line.startswith("#"):
                m = re.match(rf"({NAME})(?:{LABELS})?\s", line)
                if m:
                    self.sample_labels.setdefault(m.group(1), set()).update(
                        re.findall(r"(\w+)=\"", m.group(2) or ""))

    def family(self, name):
        """The family a sample name belongs to: histograms' _bucket, _sum, _count are their family's."""
        for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram", "summary")),
                              ("_count", ("histogram", "summary"))):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and self.types.get(base) in kinds:
                return base
        return name

    def has(self, name):
        """Whether a query can select `name`: a sample name, or a family's even before its first sample."""
        if name in self.sample_labels or self.family(name) != name:
            return True
        return name in self.types and self.types[name] != "histogram"  # a histogram is its _bucket/_sum/_count

    def labels(self, name):
        """Label names on the samples of `name`, or None when it has no samples yet to tell."""
        return self.sample_labels.get(name)

    def families(self):
        return set(self.types) | {self.family(n) for n in self.sample_labels}


def free_port():
    """A loopback port nobody listens on now (the kernel's next ephemeral one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, daemon, seconds=30):
    """GET /metrics once it answers; None if it never did or kcached exited."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and daemon.proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    return None


def scrape_kcached(kcached, tmp):
    """(/metrics text or None, a problem or None) of a kcached with a remote tier configured."""
    metrics_port = free_port()
    secret = credential_file(tmp, "fleet-secret")
    # The remote tier is on so that its metrics are there; nothing listens at that Redis address,
    # which kcached must take as Redis being down, not as a reason not to start.
    args = ["--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--db", str(Path(tmp) / "db"), "--workers", "1",
            "--remote", f"redis://127.0.0.1:{free_port()}", "--remote-secret-file", str(secret)]
    daemon = Kcached(kcached, args, tmp)
    text = scrape(metrics_port, daemon) if daemon.wait_listening() else None
    code, output = daemon.stop()
    if text is None:
        return None, f"kcached {' '.join(args)} served no /metrics (exit {code}):\n{output.strip()}"
    return text, None


def check_grafana(source_dir, kcached):
    c = Checker("deploy.grafana")
    path = source_dir / "deploy/grafana/kcache.json"
    try:
        dashboard = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not valid JSON: {e}")

    # Grafana's own rules that a hand edit can break: ids and titles unique, queries present.
    panels, todo = [], list(dashboard.get("panels") or [])
    while todo:
        panel = todo.pop(0)
        panels.append(panel)
        todo.extend(panel.get("panels") or [])
    ids = [p.get("id") for p in panels]
    c.expect(len(ids) == len(set(ids)) and None not in ids, f"{path.name}: panel ids are missing or repeated")
    titles = [p.get("title") for p in panels if p.get("type") != "row"]
    for title in sorted({t for t in titles if titles.count(t) > 1}):
        c.expect(False, f"{path.name}: two panels are titled {title!r}")
    for p in panels:
        if p.get("type") != "row":
            c.expect(p.get("targets"), f"{path.name}: panel {p.get('title')!r} has no query")
            c.expect(p.get("gridPos"), f"{path.name}: panel {p.get('title')!r} has no gridPos")
    queries = dashboard_queries(dashboard)
    for where, expr in queries:
        c.expect(isinstance(expr, str) and expr.strip(), f"{path.name}: {where} has no PromQL expression")

    with tempfile.TemporaryDirectory() as tmp:
        text, problem = scrape_kcached(kcached, tmp)
    if not c.expect(problem is None, problem):
        return c.finish()
    exposed = Exposition(text)

    used = set()
    for where, expr in queries:
        if not isinstance(expr, str):
            continue
        names, matchers = promql_names(expr)
        c.expect(names, f"{path.name}: {where} names no metric: {expr}")
        for name in sorted(names):
            used.add(exposed.family(name))
            if not c.expect(exposed.has(name), f"{path.name}: {where} uses {name}, which kcached does not expose"):
                continue
            family = exposed.family(name)
            if name in rated_names(expr):
                c.expect(exposed.types.get(family) != "gauge",
                         f"{path.name}: {where} takes a rate of {name}, a gauge: rate() is for counters")
            have = exposed.labels(name)
            for label in sorted(matchers.get(name, set()) - TARGET_LABELS):
                c.expect(have is None or label in have,
                         f"{path.name}: {where} matches {name} on label {label!r}, which its samples do not carry "
                         f"({', '.join(sorted(have or [])) or 'none'})")
        # A by/on label must exist on some metric of the expression (once all of them have samples).
        carried = [exposed.labels(n) for n in names if exposed.has(n)]
        if carried and None not in carried:
            for label in sorted(grouping_labels(expr) - TARGET_LABELS - {"le"} - set().union(*carried)):
                c.expect(False, f"{path.name}: {where} groups by {label!r}, a label none of its metrics carries")

    # Not a failure: a family no panel shows may be new; say so, so that it gets a panel.
    unshown = sorted(f for f in exposed.families() if f.startswith("kcache_") and f not in used)
    if unshown:
        print(f"deploy.grafana: note: no panel shows {', '.join(unshown)}")
    return c.finish()
