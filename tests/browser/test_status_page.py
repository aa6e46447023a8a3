"""kcached's status page (server/api/status_page.hpp) in a real browser: Debian's headless Chromium,
driven over the DevTools protocol on a pipe, against a real kcached that has served real hits,
misses and an error (the kcache CLI compiling tests/data/kernels). Nothing is mocked.

- the counters on the page equal `kcache --json stats`, and the charts are drawn;
- without a token the page is a refusal and nothing else (in the browser and over plain HTTP);
- a token works as a cookie and as an Authorization header;
- the entry browser's download link gives the image whose SHA-256 the compile reported;
- text from a request is escaped, never markup;
- a screenshot is kept: $KCACHE_ARTIFACT_DIR/status-page.png (ctest: BUILD/tests/artifacts/).

Run by ctest (tests/CMakeLists.txt: browser.StatusPage), which sets KCACHE_DAEMON, KCACHE_CLI,
KCACHE_TEST_DATA and KCACHE_ARTIFACT_DIR. Exits 77 (skipped) where chromium is absent.
"""
import base64
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

DAEMON = os.environ.get("KCACHE_DAEMON", "")
CLI = os.environ.get("KCACHE_CLI", "")
DATA = Path(os.environ.get("KCACHE_TEST_DATA", Path(__file__).resolve().parents[1] / "data"))
ARTIFACTS = Path(os.environ.get("KCACHE_ARTIFACT_DIR", tempfile.gettempdir()))
CHROMIUM = shutil.which("chromium")
PTXAS = Path("/usr/local/cuda/bin/ptxas")
NVCC = Path("/usr/local/cuda/bin/nvcc")
READ_TOKEN = "status-page-read-token-0123456789"
COMPILE_TOKEN = "status-page-compile-token-0123456789"
# The counters the page shows by their `kcache --json stats` names.
COUNTERS = ["hits", "misses", "coalesced", "errors", "fetches", "compiles", "entries", "images", "bytes",
            "hot_cache_hits", "evictions", "running_jobs", "queued_jobs", "worker_crashes"]


class Chromium:
    """One headless Chromium, spoken to over --remote-debugging-pipe (fd 3 in, fd 4 out; each
    message JSON ended by a NUL), so the test needs no WebSocket library."""

    def __init__(self, folder):
        to_chrome = os.pipe()
        from_chrome = os.pipe()
        # Above 10, so that the child's dup2 onto 3 and 4 never lands on one of them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome[0], from_chrome[1])]

        def child_fds():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.log = open(folder / "chromium.log", "w")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--remote-debugging-pipe",
             "--user-data-dir=" + str(folder / "profile"), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=child_fds, close_fds=False)
        for fd in (*high, to_chrome[0], from_chrome[1]):
            os.close(fd)
        self.out = os.fdopen(to_chrome[1], "wb")
        self.inp = os.fdopen(from_chrome[0], "rb")
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.send("Browser.close")
        except Exception:  # noqa: BLE001 (it may be gone already)
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.inp.close()
        self.log.close()

    def _read_message(self, deadline=None):
        while b"\0" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.inp], [], [], wait)[0]:
                return None
            chunk = os.read(self.inp.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe (see chromium.log)")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.out.write(json.dumps(message).encode() + b"\0")
        self.out.flush()
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method, session=None, timeout=30, match=lambda params: True):
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method and (session is None or e.get("sessionId") == session) and match(e["params"]):
                    return self.events.pop(i)["params"]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            message = self._read_message(deadline)
            if message is not None:
                self.events.append(message)

    def new_page(self):
        """A page in a browser context of its own (its own cookies): (context, session)."""
        context = self.send("Target.createBrowserContext")["browserContextId"]
        target = self.send("Target.createTarget", {"url": "about:blank", "browserContextId": context})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.send(domain + ".enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, session)
        return context, session

    def load(self, session, url):
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)

    def evaluate(self, session, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                           session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, session, expression, timeout=20):
        deadline = time.monotonic() + timeout
        while not self.evaluate(session, expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true within {timeout} s: {expression}")
            time.sleep(0.1)


class Daemon:
    def __init__(self, folder):
        self.dir = folder
        tokens = folder / "tokens"
        tokens.write_text(f"viewer read {READ_TOKEN}\nbuilder compile {COMPILE_TOKEN}\n")
        tokens.chmod(0o600)
        port_file = folder / "port"
        self.log_path = folder / "kcached.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([DAEMON, "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                                      "--http-listen", "127.0.0.1:0", "--db", str(folder / "db"), "--workers", "2",
                                      "--tokens-file", str(tokens)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kcached did not start: " + self.log_path.read_text()[-2000:])
            time.sleep(0.02)
        self.address = "127.0.0.1:" + port_file.read_text().strip()
        found = re.search(r"images over HTTP: 127\.0\.0\.1:(\d+)", self.log_path.read_text())
        if not found:
            raise RuntimeError("kcached logged no HTTP port: " + self.log_path.read_text()[-2000:])
        self.base = f"http://127.0.0.1:{found.group(1)}"

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


def cli(*args, token, check=True):
    env = dict(os.environ, KCACHE_TOKEN=token)
    env.pop("KCACHE_SERVER", None)
    r = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"kcache {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def http_get(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class StatusPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = Path(tempfile.mkdtemp(prefix="kcache-status-page-"))
        cls.daemon = Daemon(cls.folder)
        cls.chromium = None
        cls.failed = False
        server = ["--server", cls.daemon.address]
        emit = "ptx,cubin" if PTXAS.exists() else "ptx"
        out = cls.folder / "out"
        # Real jobs: two misses, a hit (the CLI's HTTP fast path) and an error.
        first = cli(*server, "--json", "compile", str(DATA / "kernels" / "saxpy.ll"), "--arch", "sm_80,sm_90",
                    "--emit", "ptx", token=COMPILE_TOKEN)
        cli(*server, "compile", str(DATA / "kernels" / "saxpy.ll"), "--arch", "sm_80,sm_90", "--emit", "ptx",
            token=COMPILE_TOKEN)
        cls.reduce = json.loads(cli(*server, "--json", "compile", str(DATA / "kernels" / "reduce_shared.ll"), "--arch",
                                    "sm_80", "--emit", emit, "--out-dir", str(out), token=COMPILE_TOKEN).stdout)
        cls.saxpy = json.loads(first.stdout)
        bad = cls.folder / "bad.ll"
        bad.write_text("define void @f( {\n")
        cls.bad = cli(*server, "compile", str(bad), "--arch", "sm_80", token=COMPILE_TOKEN, check=False)
        # A build through the compiler launcher on two machines (two state folders): the first
        # runs each step (misses), the second finds them (hits): build steps count in the hit rate.
        cls.launched = NVCC.exists()
        if cls.launched:
            (cls.folder / "k.cu").write_text("__global__ void scale(float* x) { x[threadIdx.x] *= 2; }\n")
            for machine in ("one", "two"):
                env = dict(os.environ, KCACHE_SERVER=cls.daemon.address, KCACHE_TOKEN=COMPILE_TOKEN,
                           KCACHE_STATE_DIR=str(cls.folder / machine))
                r = subprocess.run([CLI, str(NVCC), "-arch=sm_80", "-c", "k.cu", "-o", f"{machine}.o"], env=env,
                                   cwd=cls.folder, capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    raise AssertionError(f"kcache nvcc: exit {r.returncode}\n{r.stderr}")
        cls.stats = json.loads(cli(*server, "--json", "stats", token=READ_TOKEN).stdout)
        cls.chromium = Chromium(cls.folder)

    @classmethod
    def tearDownClass(cls):
        if cls.chromium:
            cls.chromium.close()
        code = cls.daemon.stop()
        if code != 0 or cls.failed or os.environ.get("KCACHE_KEEP_TEST_DIRS") == "1":
            print(f"kept {cls.folder} (kcached.log, chromium.log)", file=sys.stderr)
        else:
            shutil.rmtree(cls.folder, ignore_errors=True)
        assert code == 0, f"kcached exited {code}"

    def tearDown(self):
        result = self._outcome.result
        if any(test is self for test, _ in result.failures + result.errors):
            type(self).failed = True

    def authorized_page(self, url=None):
        context, session = self.chromium.new_page()
        self.chromium.send("Network.setCookie", {"name": "kcache_token", "value": READ_TOKEN,
                                                 "url": self.daemon.base + "/", "sameSite": "Strict"}, session)
        self.chromium.load(session, url or self.daemon.base + "/")
        return context, session

    def test_the_jobs_were_real(self):
        self.assertEqual(self.saxpy["outcome"], "miss")
        self.assertEqual(self.reduce["outcome"], "miss")
        self.assertNotEqual(self.bad.returncode, 0)
        self.assertIn("INVALID_ARGUMENT", self.bad.stderr)
        self.assertEqual((self.stats["compile_hits"], self.stats["compile_misses"], self.stats["errors"]), (1, 2, 1))

    def test_build_steps_count_in_the_hit_rate(self):
        if not self.launched:
            self.skipTest(f"no CUDA toolkit ({NVCC}): no launcher build")
        steps = self.stats["steps"]
        self.assertGreaterEqual(steps["cicc"]["misses"], 1)
        self.assertGreaterEqual(steps["cicc"]["hits"], 1, "the second machine found the first one's step")
        for outcome in ("hits", "misses", "coalesced"):
            self.assertEqual(self.stats[outcome],
                             self.stats["compile_" + outcome] + sum(t[outcome] for t in steps.values()), outcome)
        hits = self.stats["hits"]
        self.assertAlmostEqual(self.stats["hit_ratio"],
                               hits / (hits + self.stats["misses"] + self.stats["coalesced"]))
        self.assertGreater(self.stats["hits"], self.stats["compile_hits"])
        context, session = self.authorized_page()
        table = self.chromium.evaluate(session, "document.getElementById('steps').innerText")
        cicc = [line for line in table.splitlines() if line.startswith("cicc")]
        self.assertEqual(len(cicc), 1, table)
        self.assertEqual(cicc[0].split("\t")[1:3], [str(steps["cicc"]["hits"]), str(steps["cicc"]["misses"])], table)
        newest = self.chromium.evaluate(session, "document.getElementById('compiles').innerText")
        self.assertIn("cicc step", newest)
        self.assertIn("ptxas step", newest)

    def test_the_counters_shown_are_kcache_stats_and_the_charts_are_drawn(self):
        context, session = self.authorized_page()
        # The charts: each has its line, or its point while there is one interval.
        self.chromium.wait_until(session, "[...document.querySelectorAll('svg.chart')]"
                                          ".every(s => s.querySelector('path, circle'))")
        dom = self.chromium.evaluate(session, "document.documentElement.outerHTML")
        shown = dict(re.findall(r'data-stat="(\w+)">([^<]*)<', dom))
        for name in COUNTERS:
            self.assertEqual(shown.get(name), str(self.stats[name]), name)
        self.assertEqual(shown["hit_ratio"], f"{100 * self.stats['hit_ratio']:.2f} %")
        self.assertIn('data-status="health">ok<', dom)
        # Which jail the tools run on peers' bytes run in (bwrap where user namespaces are allowed).
        jail = self.chromium.evaluate(session, "document.getElementById('jail').textContent")
        self.assertRegex(jail, r"^(bwrap|none \(.+\))$")
        # The newest compiles and errors: both keys, the kernels, the diagnostics.
        compiles = self.chromium.evaluate(session, "document.getElementById('compiles').innerText")
        for answer in (self.saxpy, self.reduce):
            self.assertIn(answer["key"], compiles)
        self.assertIn("saxpy", compiles)
        self.assertIn("sm_80,sm_90", compiles)
        errors = self.chromium.evaluate(session, "document.getElementById('errors').innerText")
        self.assertIn("INVALID_ARGUMENT", errors)
        self.assertIn("expected type", errors)
        self.assertIn("None: this daemon has no remote tier", dom)
        # The page's own requests changed none of these.
        again = json.loads(cli("--server", self.daemon.address, "--json", "stats", token=READ_TOKEN).stdout)
        self.assertEqual({n: again[n] for n in COUNTERS}, {n: self.stats[n] for n in COUNTERS})
        height = self.chromium.evaluate(session, "document.documentElement.scrollHeight")
        self.chromium.send("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": min(int(height), 4000), "deviceScaleFactor": 1, "mobile": False},
                           session)
        png = base64.b64decode(self.chromium.send("Page.captureScreenshot", {"format": "png"}, session)["data"])
        self.assertTrue(png.startswith(b"\x89PNG"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "status-page.png").write_bytes(png)
        print(f"screenshot: {ARTIFACTS / 'status-page.png'} ({len(png)} bytes); page {len(dom)} bytes",
              file=sys.stderr)

    def test_the_counters_read_without_javascript(self):
        status, body = http_get(self.daemon.base + "/", {"Authorization": "Bearer " + READ_TOKEN})
        self.assertEqual(status, 200)
        shown = dict(re.findall(r'data-stat="(\w+)">([^<]*)<', body.decode()))
        for name in ("hits", "misses", "errors", "entries", "bytes"):
            self.assertEqual(shown.get(name), str(self.stats[name]), name)

    def test_a_header_token_works_as_the_cookie_does(self):
        context, session = self.chromium.new_page()
        self.chromium.send("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Bearer " + READ_TOKEN}},
                           session)
        self.chromium.load(session, self.daemon.base + "/")
        self.assertEqual(self.chromium.evaluate(session, "document.querySelector('[data-stat=hits]').textContent"),
                         str(self.stats["hits"]))

    def test_the_refusal_page_trades_a_token_for_an_httponly_cookie(self):
        context, session = self.chromium.new_page()
        self.chromium.load(session, self.daemon.base + "/")
        self.chromium.evaluate(session, "document.querySelector('input[name=token]').value = " + json.dumps(READ_TOKEN)
                               + "; document.querySelector('form').submit(); true")
        deadline = time.monotonic() + 20
        while True:  # the form's navigation, then the redirect to the page
            try:
                if self.chromium.evaluate(session, "document.querySelector('[data-stat=hits]') !== null"):
                    break
            except RuntimeError:
                pass
            self.assertLess(time.monotonic(), deadline, "the page did not open with the cookie")
            time.sleep(0.1)
        self.assertEqual(self.chromium.evaluate(session, "document.querySelector('[data-stat=hits]').textContent"),
                         str(self.stats["hits"]))
        self.assertEqual(self.chromium.evaluate(session, "document.cookie"), "", "HttpOnly: no script reads it")

    def test_without_a_token_there_is_only_a_refusal(self):
        context, session = self.chromium.new_page()
        self.chromium.load(session, self.daemon.base + "/")
        dom = self.chromium.evaluate(session, "document.documentElement.outerHTML")
        self.assertIn('id="refused"', dom)
        self.assertIn("401", dom)
        for leak in ("data-stat", "saxpy", self.saxpy["key"], self.reduce["key"], "expected type", "<script", "<svg"):
            self.assertNotIn(leak, dom)
        for path in ("/", "/v1/status", "/v1/status/history",
                     f"/v1/status/entry?side=device&key={self.saxpy['key']}",
                     f"/v1/device/{self.saxpy['key']}/sm_80/ptx"):
            status, body = http_get(self.daemon.base + path)
            self.assertEqual(status, 401, path)
            self.assertNotIn(self.saxpy["key"].encode(), body, path)
            status, body = http_get(self.daemon.base + path, {"Cookie": "kcache_token=not-a-token"})
            self.assertEqual(status, 401, path)

    def test_the_entry_browser_downloads_the_image_the_compile_made(self):
        key = self.reduce["key"]
        context, session = self.authorized_page(f"{self.daemon.base}/?side=device&key={key}")
        links = self.chromium.evaluate(
            session, "[...document.querySelectorAll('#entry a.download')].map(a => a.getAttribute('href'))")
        self.assertEqual(len(links), len(self.reduce["images"]))
        image = self.reduce["images"][-1]  # the cubin where the toolkit is, else the PTX
        expected = hashlib.sha256(Path(image["path"]).read_bytes()).hexdigest()
        self.assertEqual(image["sha256"], expected)
        downloads = self.folder / "downloads"
        downloads.mkdir(exist_ok=True)
        self.chromium.send("Browser.setDownloadBehavior",
                           {"behavior": "allowAndName", "downloadPath": str(downloads), "eventsEnabled": True,
                            "browserContextId": context})
        href = f"/v1/device/{key}/{image['arch']}/{image['kind']}"
        self.assertIn(href, links)
        self.chromium.evaluate(session, f"document.querySelector('#entry a.download[href=\"{href}\"]').click()")
        began = self.chromium.wait_event("Browser.downloadWillBegin")
        self.chromium.wait_event("Browser.downloadProgress",
                                 match=lambda p: p["guid"] == began["guid"] and p["state"] == "completed")
        got = (downloads / began["guid"]).read_bytes()
        self.assertEqual(hashlib.sha256(got).hexdigest(), expected)
        # The page shows the same digest, and the kernel with its resources.
        text = self.chromium.evaluate(session, "document.getElementById('entry').innerText")
        self.assertIn(expected, text)
        self.assertIn("registers", text)
        status, body = http_get(f"{self.daemon.base}/v1/status/entry?side=device&key={key}",
                                {"Authorization": "Bearer " + READ_TOKEN})
        self.assertEqual(status, 200)
        entry = json.loads(body)
        self.assertEqual(sorted(i["sha256"] for i in entry["images"]),
                         sorted(i["sha256"] for i in self.reduce["images"]))

    def test_text_from_a_request_is_escaped(self):
        hostile = "<img id=injected src=x onerror=document.title='owned'>"
        context, session = self.authorized_page(f"{self.daemon.base}/?side=device&key={urllib.request.quote(hostile)}")
        self.assertIsNone(self.chromium.evaluate(session, "document.getElementById('injected') && 1"))
        self.assertNotEqual(self.chromium.evaluate(session, "document.title"), "owned")
        self.assertIn(hostile, self.chromium.evaluate(session, "document.getElementById('entry-problem').textContent"))


if __name__ == "__main__":
    if not CHROMIUM:
        print("skipped: chromium is absent (deploy/install-deps.sh installs it)")
        sys.exit(77)
    if not DAEMON or not CLI:
        print("skipped: KCACHE_DAEMON and KCACHE_CLI are not set (ctest sets them)")
        sys.exit(77)
    program = unittest.main(exit=False, verbosity=2)
    sys.exit(0 if program.result.wasSuccessful() else 1)
