"""kcache for Python: compile CUDA C++ (through the daemon's NVRTC) or LLVM IR, and fetch images by
key, from a shared kcached instead of a per-user, per-machine disk cache.

One file, ctypes over libkcache.so (client/include/kcache/kcache.h), no build step. Copy it
anywhere; it finds the library through $KCACHE_LIBRARY, else beside this file, else the system's
search path (libkcache.so).

    import kcache
    client = kcache.Client("127.0.0.1:7878")
    images = client.compile_cuda(open("k.cu").read(), archs=["sm_90"], kinds=["cubin"],
                                 include_dirs=["include"], options=["-std=c++17", "-DN=4"],
                                 name_expressions=["scale<float>"])
    cubin = images[0].data                       # bytes
    symbol = images[0].lowered_names["scale<float>"]   # "_Z5scaleIfEvPT_S0_i"
    again = client.fetch(images.key, "sm_90")    # the best image for that device, by key
    with kcache.Bundle("bundle") as b:           # a `kcache precompile` bundle, no daemon
        image = b.fetch(images.key, "sm_90", driver=12040)

Debian's package installs it for Debian's python3 (/usr/lib/python3/dist-packages) and in
/usr/share/kcache/python for any other python3 or a virtual environment, which reads it through a
.pth file: echo /usr/share/kcache/python > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kcache.pth"

Errors raise kcache.Error, whose .status is the gRPC status code (3 INVALID_ARGUMENT: NVRTC's
log is in the message; 9 FAILED_PRECONDITION; 14 UNAVAILABLE ...).
"""

import ctypes
import os
from pathlib import Path

__all__ = ["Bundle", "Client", "DRIVER_NONE", "DRIVER_THIS_MACHINE", "Error", "Image", "Images", "load_library"]

_KINDS = {"any": 0, "ptx": 1, "cubin": 2, "obj": 3, "object": 3, "ltoir": 4, "hsaco": 5, "amdgcn": 6}
_KIND_NAMES = {1: "ptx", 2: "cubin", 3: "obj", 4: "ltoir", 5: "hsaco", 6: "amdgcn"}
_FORMATS = {"infer": 0, "bc": 1, "ll": 2, "ptx": 3, "cu": 4}
_SIDES = {"device": 1, "host": 2}
DRIVER_THIS_MACHINE = 0
DRIVER_NONE = -1


class Error(Exception):
    """A failed call: .status is the gRPC status code, the message says what to do."""

    def __init__(self, status, message):
        super().__init__(f"kcache: {message} (status {status})")
        self.status = status


def _unknown_kind(kind):
    """The error for a kind name no image has, worded as libkcache words it (INVALID_ARGUMENT)."""
    return Error(3, f"unknown image kind {kind!r} (use ptx, cubin, ltoir, hsaco, amdgcn or obj)")


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Module(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t), ("format", ctypes.c_int)]


_StrArray = ctypes.POINTER(ctypes.c_char_p)


class _Job(ctypes.Structure):
    # kcache_job, field for field (kcache.h); the library reads only the struct_size bytes given.
    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("side", ctypes.c_int), ("format", ctypes.c_int),
        ("target", ctypes.c_char_p), ("opt_level", ctypes.c_int), ("debug_info", ctypes.c_int),
        ("lineinfo", ctypes.c_int), ("fast_math", ctypes.c_int),
        ("entry_points", _StrArray), ("entry_point_count", ctypes.c_size_t),
        ("cpu", ctypes.c_char_p), ("host_stubs", ctypes.c_int),
        ("archs", _StrArray), ("arch_count", ctypes.c_size_t),
        ("kinds", ctypes.POINTER(ctypes.c_int)), ("kind_count", ctypes.c_size_t),
        ("linked_modules", ctypes.POINTER(_Module)), ("linked_module_count", ctypes.c_size_t),
        ("driver_version", ctypes.c_long),
        ("headers", ctypes.POINTER(_Header)), ("header_count", ctypes.c_size_t),
        ("include_dirs", _StrArray), ("include_dir_count", ctypes.c_size_t),
        ("nvrtc_options", _StrArray), ("nvrtc_option_count", ctypes.c_size_t),
        ("name_expressions", _StrArray), ("name_expression_count", ctypes.c_size_t),
        ("amd_code_object_version", ctypes.c_long),
    ]


def load_library(path=None):
    """libkcache.so: `path`, else $KCACHE_LIBRARY, else beside this file, else the search path."""
    candidates = [path, os.environ.get("KCACHE_LIBRARY"), str(Path(__file__).with_name("libkcache.so")),
                  "libkcache.so"]
    failures = []
    for c in candidates:
        if not c or (os.sep in c and not os.path.exists(c)):
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            failures.append(str(e))
    else:
        raise Error(9, "cannot load libkcache.so (set KCACHE_LIBRARY to its path): " + "; ".join(failures))
    vp, sz, cp, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int
    sigs = {
        "kcache_job_init_size": (None, [ctypes.POINTER(_Job), sz]),
        "kcache_last_error": (cp, []),
        "kcache_connect": (i, [cp, ctypes.c_double, ctypes.POINTER(vp)]),
        "kcache_client_free": (None, [vp]),
        "kcache_compute_key": (i, [vp, vp, sz, ctypes.POINTER(_Job), ctypes.c_char * 65]),
        "kcache_fetch": (i, [vp, cp, cp, i, i, ctypes.POINTER(vp)]),
        "kcache_fetch_for_driver": (i, [vp, cp, cp, i, i, ctypes.c_long, ctypes.POINTER(vp)]),
        "kcache_bundle_open": (i, [cp, ctypes.POINTER(vp)]),
        "kcache_bundle_fetch_for_driver": (i, [vp, cp, cp, i, ctypes.c_long, ctypes.POINTER(vp)]),
        "kcache_bundle_free": (None, [vp]),
        "kcache_fetch_or_compile": (i, [vp, vp, sz, ctypes.POINTER(_Job), cp, ctypes.POINTER(vp)]),
        "kcache_compile": (i, [vp, vp, sz, ctypes.POINTER(_Job), ctypes.POINTER(vp)]),
        "kcache_result_key": (cp, [vp]),
        "kcache_result_hit": (i, [vp]),
        "kcache_result_image_count": (sz, [vp]),
        "kcache_result_image": (vp, [vp, sz]),
        "kcache_result_free": (None, [vp]),
        "kcache_image_data": (vp, [vp]),
        "kcache_image_size": (sz, [vp]),
        "kcache_image_arch": (cp, [vp]),
        "kcache_image_kind": (i, [vp]),
        "kcache_image_needs_jit": (i, [vp]),
        "kcache_image_sha256": (cp, [vp]),
        "kcache_image_lowered_name_count": (sz, [vp]),
        "kcache_image_name_expression": (cp, [vp, sz]),
        "kcache_image_lowered_name": (cp, [vp, sz]),
        "kcache_image_free": (None, [vp]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class Image:
    """One compiled image: its bytes, arch ("sm_90"), kind ("ptx", "cubin", "ltoir", "obj"), SHA-256
    (hex), whether the driver must JIT it, and, for CUDA C++ jobs, {name expression: lowered name}."""

    def __init__(self, lib, handle):
        size = lib.kcache_image_size(handle)
        data = lib.kcache_image_data(handle)
        self.data = ctypes.string_at(data, size) if size else b""
        self.arch = lib.kcache_image_arch(handle).decode()
        self.kind = _KIND_NAMES.get(lib.kcache_image_kind(handle), "?")
        self.sha256 = lib.kcache_image_sha256(handle).decode()
        self.needs_jit = bool(lib.kcache_image_needs_jit(handle))
        self.lowered_names = {
            lib.kcache_image_name_expression(handle, k).decode(): lib.kcache_image_lowered_name(handle, k).decode()
            for k in range(lib.kcache_image_lowered_name_count(handle))
        }

    def __repr__(self):
        return f"Image({self.arch} {self.kind}, {len(self.data)} bytes)"


class Images(list):
    """The images of one compile, in the job's order (archs x kinds), with its key and whether it hit."""

    def __init__(self, images, key, hit):
        super().__init__(images)
        self.key = key
        self.hit = hit


def _archs(archs):
    """Archs as a list: "sm_80" or "sm_80,sm_90" (one string, as the CLI's --arch) or a sequence."""
    if isinstance(archs, (str, bytes)):
        text = archs.decode() if isinstance(archs, bytes) else archs
        return [a.strip() for a in text.split(",") if a.strip()]
    return list(archs)


def _strings(values):
    encoded = [v.encode() if isinstance(v, str) else bytes(v) for v in values]
    return (ctypes.c_char_p * len(encoded))(*encoded), len(encoded), encoded


class _Handle:
    """What Client and Bundle share: a handle of libkcache.so, freed by `close` (or `with`), and
    the C API's statuses raised as Error."""

    _free = None  # the C function that frees the handle

    def __init__(self, library):
        self._lib = load_library(library)
        self._handle = None

    def _open(self, opener, *args):
        handle = ctypes.c_void_p()
        self._check(opener(*args, ctypes.byref(handle)))
        self._handle = handle

    def close(self):
        if getattr(self, "_handle", None):
            getattr(self._lib, self._free)(self._handle)
            self._handle = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, status):
        if status != 0:
            raise Error(status, self._lib.kcache_last_error().decode(errors="replace"))

    def _image(self, kind, fetch, *args):
        """The Image a C fetch (`fetch(*args, kind, ..., &image)`) returns, freed once read."""
        if kind not in _KINDS:
            raise _unknown_kind(kind)
        image = ctypes.c_void_p()
        self._check(fetch(*args, ctypes.byref(image)))
        try:
            return Image(self._lib, image)
        finally:
            self._lib.kcache_image_free(image)


class Client(_Handle):
    """A client of kcached at `server` (HOST:PORT; None: $KCACHE_SERVER, else 127.0.0.1:7878). Safe to
    share between threads. Connects lazily: an unreachable daemon fails the first call (status 14)."""

    _free = "kcache_client_free"

    def __init__(self, server=None, timeout=600.0, library=None):
        super().__init__(library)
        self._open(self._lib.kcache_connect, server.encode() if server else None, float(timeout))

    def _job(self, fmt, side, archs, kinds, options, name_expressions, headers, include_dirs, driver, keep,
             amd_code_object=0):
        job = _Job()
        self._lib.kcache_job_init_size(ctypes.byref(job), ctypes.sizeof(_Job))
        job.format = _FORMATS[fmt]
        job.side = _SIDES[side]
        job.driver_version = driver
        job.amd_code_object_version = amd_code_object
        arr, n, enc = _strings(archs)
        job.archs, job.arch_count = arr, n
        keep += [arr, enc]
        unknown = [k for k in kinds if k not in _KINDS]
        if unknown:
            raise _unknown_kind(unknown[0])
        kind_arr = (ctypes.c_int * len(kinds))(*[_KINDS[k] for k in kinds])
        job.kinds, job.kind_count = kind_arr, len(kinds)
        keep.append(kind_arr)
        if fmt == "cu":
            for field, count, values in (("nvrtc_options", "nvrtc_option_count", options),
                                         ("name_expressions", "name_expression_count", name_expressions),
                                         ("include_dirs", "include_dir_count", [str(d) for d in include_dirs])):
                arr, n, enc = _strings(values)
                setattr(job, field, arr)
                setattr(job, count, n)
                keep += [arr, enc]
            items = list(headers.items())
            hdrs = (_Header * len(items))()
            for k, (name, data) in enumerate(items):
                data = data.encode() if isinstance(data, str) else bytes(data)
                buf = ctypes.create_string_buffer(data, len(data))
                hdrs[k] = _Header(name.encode(), ctypes.cast(buf, ctypes.c_void_p), len(data))
                keep.append(buf)
            job.headers, job.header_count = hdrs, len(items)
            keep.append(hdrs)
        elif options or name_expressions or headers or include_dirs:
            raise Error(3, "options, name expressions, headers and include_dirs are for CUDA C++ (compile_cuda)")
        return job

    def _compile(self, module, fmt, side, archs, kinds, options=(), name_expressions=(), headers=None,
                 include_dirs=(), driver=DRIVER_NONE, amd_code_object=0):
        module = module.encode() if isinstance(module, str) else bytes(module)
        keep = []
        if isinstance(kinds, str):
            kinds = [kinds]
        job = self._job(fmt, side, _archs(archs), list(kinds), list(options), list(name_expressions), dict(headers or {}),
                        list(include_dirs), driver, keep, amd_code_object)
        result = ctypes.c_void_p()
        self._check(self._lib.kcache_compile(self._handle, module, len(module), ctypes.byref(job), ctypes.byref(result)))
        try:
            lib = self._lib
            images = [Image(lib, lib.kcache_result_image(result, k)) for k in range(lib.kcache_result_image_count(result))]
            return Images(images, lib.kcache_result_key(result).decode(), bool(lib.kcache_result_hit(result)))
        finally:
            self._lib.kcache_result_free(result)

    def compile_cuda(self, source, archs, kinds=("cubin",), options=(), name_expressions=(), headers=None,
                     include_dirs=()):
        """Compiles CUDA C++ `source` (str or bytes) with the daemon's NVRTC, or hits. `headers` maps
        include names to their text; headers the source includes that are found in `include_dirs`
        are sent too. `options` are NVRTC's (-std=c++17, -DN=4, --use_fast_math, ...; the arch comes
        from `archs`). Kinds: "ptx", "cubin", "ltoir". Returns Images (a list, with .key and .hit)."""
        return self._compile(source, "cu", "device", archs, kinds, options, name_expressions, headers, include_dirs)

    def compile_ir(self, module, archs=(), kinds=(), side="device", fmt="infer", driver=DRIVER_NONE,
                   amd_code_object=0):
        """Compiles an LLVM IR module (text or bitcode; or PTX to cubin) for `archs` (sm_90, or AMD
        target IDs such as gfx90a), or hits. `driver`: the CUDA driver version that will load the
        images (12040), DRIVER_NONE, or DRIVER_THIS_MACHINE. `amd_code_object`: for AMD jobs, the
        newest code object version the HIP runtime loads (4 for ROCm 5); 0, the daemon's own."""
        return self._compile(module, fmt, side, archs, kinds, driver=driver, amd_code_object=amd_code_object)

    def fetch(self, key, arch, kind="any", side="device", driver=DRIVER_THIS_MACHINE):
        """The best stored image of `key` for a device of `arch` (sm_90), restricted to `kind` unless
        "any"; an LTO-IR image only when asked for by kind. `driver`: the CUDA driver version that
        will load it (12040), DRIVER_THIS_MACHINE (this machine's, where it has one) or DRIVER_NONE.
        Raises Error(5) when there is none."""
        return self._image(kind, self._lib.kcache_fetch_for_driver, self._handle, key.encode(), arch.encode(),
                           _SIDES[side], _KINDS.get(kind, 0), int(driver))


class Bundle(_Handle):
    """A bundle made by `kcache precompile` (a folder), served with no daemon: the same selection
    rules as Client.fetch, each image checked against the bundle's index as it is read."""

    _free = "kcache_bundle_free"

    def __init__(self, path, library=None):
        super().__init__(library)
        self._open(self._lib.kcache_bundle_open, str(path).encode())

    def fetch(self, key, arch, kind="any", driver=DRIVER_THIS_MACHINE):
        """The best image of `key` in the bundle for a device of `arch`, as Client.fetch chooses;
        raises Error(5) when the bundle has none."""
        return self._image(kind, self._lib.kcache_bundle_fetch_for_driver, self._handle, key.encode(), arch.encode(),
                           _KINDS.get(kind, 0), int(driver))
