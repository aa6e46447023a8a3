"""client/python/kcache.py with Debian's python3 against a real kcached on a loopback port, as a
Python user runs it: CUDA C++ with headers, name expressions and NVRTC errors, LLVM IR, fetch by key.

Run by ctest (tests/CMakeLists.txt), which sets KCACHE_DAEMON, KCACHE_CLI, KCACHE_LIBRARY and KCACHE_TEST_DATA.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python"))
import kcache  # noqa: E402

DAEMON = os.environ.get("KCACHE_DAEMON", "")
CLI = os.environ.get("KCACHE_CLI", "")
DATA = Path(os.environ.get("KCACHE_TEST_DATA", Path(__file__).resolve().parents[1] / "data"))
NVRTC = Path("/usr/local/cuda/lib64/libnvrtc.so")
PTXAS = Path("/usr/local/cuda/bin/ptxas")


class Daemon:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="kcache-python-test-"))
        port_file = self.dir / "port"
        self.log = open(self.dir / "kcached.log", "w")
        self.proc = subprocess.Popen([DAEMON, "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                                      "--db", str(self.dir / "db"), "--workers", "2"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kcached did not start: " + (self.dir / "kcached.log").read_text()[-2000:])
            time.sleep(0.02)
        self.address = "127.0.0.1:" + port_file.read_text().strip()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class PythonModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DAEMON:
            raise unittest.SkipTest("KCACHE_DAEMON is not set (ctest sets it)")
        cls.daemon = Daemon()
        cls.client = kcache.Client(cls.daemon.address, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.stop()

    def need_nvrtc(self):
        if not PTXAS.exists():
            self.skipTest(f"no CUDA toolkit: {PTXAS} is absent")
        if not NVRTC.exists():
            self.skipTest(f"the toolkit has no NVRTC: {NVRTC} is absent")

    def test_cuda_source_with_headers_and_name_expressions_compiles_then_hits_and_fetches_by_key(self):
        self.need_nvrtc()
        source = (DATA / "cuda_src" / "reduce.cu").read_text()
        names = ["block_reduce<float, 256, ops::Sum<float>>", "scale_half"]
        args = dict(archs=["sm_90"], kinds=["cubin", "ptx"], options=["-std=c++17", "-DITEMS_PER_THREAD=2"],
                    name_expressions=names, include_dirs=[DATA / "cuda_src" / "include"])
        first = self.client.compile_cuda(source, **args)
        self.assertFalse(first.hit)
        self.assertEqual([(i.arch, i.kind) for i in first], [("sm_90", "cubin"), ("sm_90", "ptx")])
        self.assertEqual(first[0].data[:4], b"\x7fELF")
        self.assertEqual(set(first[0].lowered_names), set(names))
        for expression, lowered in first[1].lowered_names.items():
            self.assertIn(b".entry " + lowered.encode(), first[1].data, expression)
        second = self.client.compile_cuda(source, **args)
        self.assertTrue(second.hit)
        self.assertEqual(second.key, first.key)
        self.assertEqual(second[0].sha256, first[0].sha256)
        fetched = self.client.fetch(first.key, "sm_90")
        self.assertEqual(fetched.kind, "cubin")
        self.assertEqual(fetched.data, first[0].data)
        self.assertEqual(fetched.lowered_names, first[0].lowered_names)

    def test_headers_given_as_text_and_lto_ir(self):
        self.need_nvrtc()
        source = '#include "scale.cuh"\ntemplate <typename T> __global__ void k(T* x) { x[threadIdx.x] *= T(SCALE); }\n'
        images = self.client.compile_cuda(source, archs=["sm_80"], kinds=["ltoir"], headers={"scale.cuh": "#define SCALE 3\n"},
                                          name_expressions=["k<double>"])
        self.assertEqual(images[0].kind, "ltoir")
        self.assertGreater(len(images[0].data), 0)
        self.assertTrue(images[0].lowered_names["k<double>"].startswith("_Z"))
        self.assertEqual(self.client.fetch(images.key, "sm_80", kind="ltoir").data, images[0].data)
        other = self.client.compile_cuda(source, archs=["sm_80"], kinds=["ltoir"], headers={"scale.cuh": "#define SCALE 4\n"},
                                         name_expressions=["k<double>"])
        self.assertNotEqual(other.key, images.key)

    def test_errors_carry_the_status_and_nvrtcs_log(self):
        self.need_nvrtc()
        with self.assertRaises(kcache.Error) as bad:
            self.client.compile_cuda("__global__ void f(int* x) { x[0] = undefined_name; }\n", archs=["sm_90"])
        self.assertEqual(bad.exception.status, 3)
        self.assertIn('identifier "undefined_name" is undefined', str(bad.exception))
        with self.assertRaises(kcache.Error) as refused:
            self.client.compile_cuda("__global__ void f() {}\n", archs=["sm_90"], options=["-I/etc"])
        self.assertEqual(refused.exception.status, 3)
        self.assertIn("reads files on the daemon", str(refused.exception))
        with self.assertRaises(kcache.Error) as missing:
            self.client.fetch("0" * 64, "sm_90")
        self.assertEqual(missing.exception.status, 5)

    def test_archs_as_one_string_a_stated_driver_and_a_bundle(self):
        ir = (DATA / "kernels" / "saxpy.ll").read_text()
        one = self.client.compile_ir(ir, archs="sm_80", kinds="ptx")  # one arch, as a string
        self.assertEqual([(i.arch, i.kind) for i in one], [("sm_80", "ptx")])
        two = self.client.compile_ir(ir, archs="sm_80,sm_90", kinds=["ptx"])
        self.assertEqual(sorted(i.arch for i in two), ["sm_80", "sm_90"])
        with self.assertRaises(kcache.Error) as bad:
            self.client.compile_ir(ir, archs="sm_8x", kinds=["ptx"])
        self.assertEqual(bad.exception.status, 3)
        self.assertIn("sm_8x", str(bad.exception))
        # For a stated driver: an image it loads, or none (a CUDA 11.0 driver JITs no PTX this
        # toolkit's ISA writes).
        self.assertEqual(self.client.fetch(one.key, "sm_80", driver=kcache.DRIVER_NONE).data, one[0].data)
        with self.assertRaises(kcache.Error) as too_old:
            self.client.fetch(one.key, "sm_80", driver=11000)
        self.assertEqual(too_old.exception.status, 5, str(too_old.exception))
        with self.assertRaises(kcache.Error) as not_a_version:
            self.client.fetch(one.key, "sm_80", driver=-7)
        self.assertEqual(not_a_version.exception.status, 3)
        # A bundle from `kcache precompile`, served with no daemon, with the same rules.
        if not CLI:
            self.skipTest("KCACHE_CLI is not set (ctest sets it)")
        work = Path(tempfile.mkdtemp(prefix="kcache-python-bundle-"))
        try:
            shutil.copy(DATA / "kernels" / "saxpy.ll", work / "saxpy.ll")
            (work / "m.json").write_text('{"archs": ["sm_80"], "modules": [{"path": "saxpy.ll", "emit": ["ptx"]}]}')
            made = subprocess.run([CLI, "--server", self.daemon.address, "precompile", str(work / "m.json"), "--out",
                                   str(work / "bundle")], capture_output=True, text=True, timeout=300)
            self.assertEqual(made.returncode, 0, made.stderr)
            with kcache.Bundle(work / "bundle") as bundle:
                image = bundle.fetch(one.key, "sm_80", driver=kcache.DRIVER_NONE)
                self.assertEqual(image.data, one[0].data)
                with self.assertRaises(kcache.Error) as bundle_too_old:
                    bundle.fetch(one.key, "sm_80", driver=11000)
                self.assertEqual(bundle_too_old.exception.status, 5, str(bundle_too_old.exception))
                with self.assertRaises(kcache.Error) as absent:
                    bundle.fetch("0" * 64, "sm_80")
                self.assertEqual(absent.exception.status, 5)
            with self.assertRaises(kcache.Error):
                kcache.Bundle(work / "no-such-bundle")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_the_module_imports_in_a_virtual_environment_as_the_docs_say(self):
        # docs/client-api.md: a virtual environment (or another python3) reads the module from
        # /usr/share/kcache/python through a .pth file; here that folder is the source's.
        folder = Path(kcache.__file__).resolve().parent
        venv = Path(tempfile.mkdtemp(prefix="kcache-python-venv-"))
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv / "env")], check=True, timeout=120)
            python = venv / "env" / "bin" / "python"
            site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            Path(site, "kcache.pth").write_text(str(folder) + "\n")
            code = ("import kcache; c = kcache.Client(%r, timeout=60); "
                    "print(kcache.__file__, len(c.compile_ir(open(%r).read(), archs='sm_80', kinds='ptx')))"
                    % (self.daemon.address, str(DATA / "kernels" / "saxpy.ll")))
            r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, PYTHONPATH=""))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.strip().endswith(" 1"), r.stdout)
            self.assertIn(str(folder), r.stdout)
        finally:
            shutil.rmtree(venv, ignore_errors=True)

    def test_llvm_ir_compiles_without_a_toolkit_too(self):
        ir = (DATA / "kernels" / "saxpy.ll").read_text()
        images = self.client.compile_ir(ir, archs=["sm_80"], kinds=["ptx"])
        self.assertEqual(images[0].kind, "ptx")
        self.assertIn(b".entry saxpy", images[0].data)
        self.assertTrue(self.client.compile_ir(ir, archs=["sm_80"], kinds=["ptx"]).hit)
        with self.assertRaises(kcache.Error) as wrong:
            self.client.compile_ir(ir, archs=["sm_80"], kinds=["bogus"])
        self.assertEqual(wrong.exception.status, 3)

    def test_amd_code_objects_at_the_version_the_runtime_loads(self):
        ir = (DATA / "amd" / "reference_saxpy.ll").read_text()
        try:
            current = self.client.compile_ir(ir, archs=["gfx90a"], kinds=["hsaco"], driver=kcache.DRIVER_NONE)
        except kcache.Error as e:
            if e.status == 9:  # FAILED_PRECONDITION: this kcached found no ld.lld
                self.skipTest(str(e))
            raise
        older = self.client.compile_ir(ir, archs=["gfx90a"], kinds=["hsaco"], driver=kcache.DRIVER_NONE,
                                       amd_code_object=4)
        self.assertEqual(current[0].data[8], 3)  # EI_ABIVERSION: code object version 5
        self.assertEqual(older[0].data[8], 2)  # version 4
        self.assertNotEqual(older.key, current.key)


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
