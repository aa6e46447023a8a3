// NVRTC in process, as CuPy and other JIT users call it: the baseline of bench/nvrtc_source.py.
// One process compiles one CUDA C++ source to a cubin --repeat times and prints the wall time of
// each run (nvrtcCreateProgram with the headers in memory, nvrtcAddNameExpression,
// nvrtcCompileProgram, nvrtcGetLoweredName, nvrtcGetCUBINSize/nvrtcGetCUBIN,
// nvrtcDestroyProgram) as CSV lines `run,ms` on stdout. Reading the files is outside the timing:
// a JIT user holds its source in memory.
//
//   kcache_bench_nvrtc kernel.cu --arch sm_90 --header detail/math.cuh=inc/detail/math.cuh
//                      --name-expr 'saxpy<float>' --opt --std=c++17 --repeat 5
//
// The options are those kcached's compile worker gives NVRTC for a source job
// (server/compile/source_pipeline.cpp): -arch=sm_XX and the toolkit's include/ and include/cccl/
// as include paths (for <cuda_fp16.h>, <cooperative_groups.h>).
// Built by bench/CMakeLists.txt when the toolkit has NVRTC, or by hand:
//   g++ -std=c++20 -O2 bench/nvrtc_inproc.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lnvrtc
//       -Wl,-rpath,/usr/local/cuda/lib64 -o /tmp/nvrtc_inproc
#include <nvrtc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "nvrtc_inproc: %s\n", message.c_str());
  std::exit(1);
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: nvrtc_inproc SOURCE.cu [--arch sm_90] [--header NAME=PATH]... [--name-expr EXPR]...\n"
               "                    [--opt OPTION]... [--repeat N] [--cuda-root DIR] [--out FILE]\n");
  std::exit(2);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) die(std::string(what) + ": " + nvrtcGetErrorString(r));
}

// NVRTC's program log, for a failed compile.
std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  if (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

}  // namespace

int main(int argc, char** argv) {
  std::string source_path, arch = "sm_90", cuda_root = "/usr/local/cuda", out_path;
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, bytes)
  std::vector<std::string> name_exprs, extra_options;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--arch") {
      arch = value();
    } else if (a == "--header") {
      std::string pair = value();
      size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) die("--header wants NAME=PATH, got " + pair);
      headers.emplace_back(pair.substr(0, eq), read_file(pair.substr(eq + 1)));
    } else if (a == "--name-expr") {
      name_exprs.push_back(value());
    } else if (a == "--opt") {
      extra_options.push_back(value());
    } else if (a == "--repeat") {
      repeat = std::atoi(value().c_str());
      if (repeat < 1) die("--repeat wants a positive count");
    } else if (a == "--cuda-root") {
      cuda_root = value();
    } else if (a == "--out") {
      out_path = value();
    } else if (a == "-h" || a == "--help") {
      usage();
    } else if (!a.empty() && a[0] == '-') {
      die("unknown option " + a);
    } else if (source_path.empty()) {
      source_path = a;
    } else {
      usage();
    }
  }
  if (source_path.empty()) usage();
  const std::string source = read_file(source_path);

  // The options, as kcached's worker spells them (the job's own options first).
  std::vector<std::string> options = extra_options;
  options.push_back("--include-path=" + cuda_root + "/include");
  options.push_back("--include-path=" + cuda_root + "/include/cccl");
  options.push_back("-arch=" + arch);
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  std::vector<const char*> header_bytes, header_names;
  for (const auto& [name, bytes] : headers) {
    header_names.push_back(name.c_str());
    header_bytes.push_back(bytes.c_str());
  }

  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  std::fprintf(stderr, "nvrtc_inproc: NVRTC %d.%d, %s for %s, %zu headers, %zu name expressions, %d runs\n", major,
               minor, source_path.c_str(), arch.c_str(), headers.size(), name_exprs.size(), repeat);

  std::printf("run,ms\n");
  std::string cubin;
  for (int run = 1; run <= repeat; ++run) {
    auto start = std::chrono::steady_clock::now();
    nvrtcProgram prog = nullptr;
    check(nvrtcCreateProgram(&prog, source.c_str(), "kernel.cu", static_cast<int>(headers.size()),
                             header_bytes.data(), header_names.data()),
          "nvrtcCreateProgram");
    for (const std::string& e : name_exprs) check(nvrtcAddNameExpression(prog, e.c_str()), "nvrtcAddNameExpression");
    nvrtcResult compiled = nvrtcCompileProgram(prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());
    if (compiled != NVRTC_SUCCESS) {
      std::string log = program_log(prog);
      die(std::string("nvrtcCompileProgram: ") + nvrtcGetErrorString(compiled) + "\n" + log);
    }
    // The mangled names a launcher looks the kernels up by (CuPy asks for them right away).
    for (const std::string& e : name_exprs) {
      const char* lowered = nullptr;
      check(nvrtcGetLoweredName(prog, e.c_str(), &lowered), "nvrtcGetLoweredName");
    }
    size_t size = 0;
    check(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
    cubin.assign(size, '\0');
    check(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
    check(nvrtcDestroyProgram(&prog), "nvrtcDestroyProgram");
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d,%.3f\n", run, ms);
    std::fflush(stdout);
  }
  if (cubin.empty()) die("NVRTC made no cubin (is " + arch + " a real arch?)");
  std::fprintf(stderr, "nvrtc_inproc: cubin %zu bytes\n", cubin.size());
  if (!out_path.empty()) {
    std::ofstream f(out_path, std::ios::binary | std::ios::trunc);
    f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    if (!f) die("cannot write " + out_path);
  }
  return 0;
}
