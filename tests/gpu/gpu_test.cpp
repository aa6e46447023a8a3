// The GPU end of the load path, for a machine with a GPU: loads images kcache made (on NVIDIA a
// cubin, and PTX for the driver's JIT; on AMD an hsaco for the device's target ID), launches a
// kernel, checks the numbers, and triggers a device exception through rtlib that must come back
// as a host error with its message. Each vendor's part runs where its GPU is.
// Usage: kcache_gpu_test IMAGES_DIR   (made by tests/gpu/run.sh). Exit 77 (skip) without either.
//        kcache_gpu_test --hip-arch   prints the AMD GPU's target ID (what run.sh compiles for);
//                                     exit 77 without one.
//        kcache_gpu_test --hip-code-object  prints the newest code object version the HIP runtime
//                                     loads (0: any), for --amd-code-object; exit 77 without one.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kcache/hip_loader.hpp"
#include "kcache/loader.hpp"

namespace {

int failures = 0;

void row(const std::string& check, bool ok, const std::string& detail = "") {
  std::printf("| %-44s | %-4s | %s\n", check.c_str(), ok ? "ok" : "FAIL", detail.c_str());
  if (!ok) ++failures;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs saxpy from `image` on 1024 elements and checks y = 2x + y.
void saxpy(kcache::Loader& loader, const std::string& label, const std::string& image) {
  auto module = loader.load(image);
  if (!module) return row(label + ": load", false, module.error().message);
  const int n = 1024;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  auto dx = loader.alloc(n * sizeof(float));
  auto dy = loader.alloc(n * sizeof(float));
  if (!dx || !dy) return row(label + ": alloc", false);
  (void)loader.copy_to_device(*dx, x.data(), n * sizeof(float));
  (void)loader.copy_to_device(*dy, y.data(), n * sizeof(float));
  float a = 2.0f;
  int count = n;
  std::uint64_t px = *dx, py = *dy;
  auto launched = (*module)->launch("saxpy", {n / 256, 1, 1}, {256, 1, 1}, {&a, &px, &py, &count});
  if (!launched) return row(label + ": launch", false, launched.error().message);
  (void)loader.copy_to_host(y.data(), *dy, n * sizeof(float));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += std::fabs(y[i] - (2.0f * i + 1.0f)) > 1e-5f ? 1 : 0;
  row(label + ": y = 2x + y on 1024 elements", wrong == 0, std::to_string(wrong) + " wrong");
}

// The CUDA checks: saxpy from a cubin and from PTX, the JIT's error log, a device exception.
void cuda_checks(kcache::Loader& loader, const std::string& dir) {
  row("CUDA device", true, loader.arch());
  row("driver (CUDA version)", loader.driver_version() == kcache::installed_driver_version(),
      kcache::cuda_version_name(loader.driver_version()));
  std::string cubin = read(dir + "/saxpy." + loader.arch() + ".cubin");
  if (!cubin.empty()) saxpy(loader, "saxpy cubin", cubin);
  else row("saxpy cubin for " + loader.arch(), false, "not prepared");
  saxpy(loader, "saxpy PTX sm_80 (driver JIT)", read(dir + "/saxpy.sm_80.ptx"));

  auto bad = loader.load(".version 8.0\n.target sm_80\n.address_size 64\nnonsense;\n");
  row("bad PTX: JIT error log comes back", !bad && bad.error().message.find("nonsense") != std::string::npos,
      bad ? "loaded" : bad.error().message.substr(0, 80));

  auto thrower = loader.load(read(dir + "/throw.sm_80.ptx"));
  if (!thrower) return row("throw: load", false, thrower.error().message);
  auto out = loader.alloc(64 * sizeof(int));
  std::uint64_t p = out ? *out : 0;
  int n = 16;  // threads 16..31 of 32 are out of bounds
  auto r = (*thrower)->launch("checked_store", {1, 1, 1}, {32, 1, 1}, {&p, &n});
  bool raised = !r && r.error().code == kcache::ErrorCode::k_aborted &&
                r.error().message.find("BoundsError") != std::string::npos;
  row("device exception becomes a host error", raised, r ? "no error" : r.error().message);
}

// Runs vadd from `image` on 1000 elements (the last block partly idle) and checks c = a + b.
void vadd(kcache::HipLoader& loader, const std::string& label, const std::string& image) {
  auto module = loader.load(image);
  if (!module) return row(label + ": load", false, module.error().message);
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i) + 1.0f;
  }
  auto da = loader.alloc(n * sizeof(float));
  auto db = loader.alloc(n * sizeof(float));
  auto dc = loader.alloc(n * sizeof(float));
  if (!da || !db || !dc) return row(label + ": alloc", false);
  if (!loader.copy_to_device(*da, a.data(), n * sizeof(float)) ||
      !loader.copy_to_device(*db, b.data(), n * sizeof(float)) ||
      !loader.copy_to_device(*dc, c.data(), n * sizeof(float))) {
    return row(label + ": copy to device", false);
  }
  std::uint64_t pa = *da, pb = *db, pc = *dc;
  int count = n;
  auto launched = (*module)->launch("vadd", {(n + 255) / 256, 1, 1}, {256, 1, 1}, {&pa, &pb, &pc, &count});
  if (!launched) return row(label + ": launch", false, launched.error().message);
  if (!loader.copy_to_host(c.data(), *dc, n * sizeof(float))) return row(label + ": copy to host", false);
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i] ? 1 : 0;
  row(label + ": c = a + b on 1000 elements", wrong == 0, std::to_string(wrong) + " wrong");
}

// The AMD checks: vadd from an hsaco, a device exception (reported and signalled; the kernel then
// returns, since a trap would end this process), the module still usable afterwards, and an
// image that is no hsaco.
void amd_checks(kcache::HipLoader& loader, const std::string& dir) {
  row("AMD device", true, loader.arch());
  std::string hsaco = read(dir + "/vadd." + loader.arch() + ".hsaco");
  if (!hsaco.empty()) vadd(loader, "vadd hsaco", hsaco);
  else row("vadd hsaco for " + loader.arch(), false, "not prepared");

  std::string thrower_image = read(dir + "/throw." + loader.arch() + ".hsaco");
  if (thrower_image.empty()) return row("throw hsaco for " + loader.arch(), false, "not prepared");
  auto thrower = loader.load(thrower_image);
  if (!thrower) return row("throw: load", false, thrower.error().message);
  auto out = loader.alloc(64 * sizeof(int));
  if (!out) return row("throw: alloc", false, out.error().message);
  std::uint64_t p = *out;
  int n = 16;  // threads 16..31 of 32 are out of bounds; whichever reports first owns the record
  auto r = (*thrower)->launch("checked_store", {1, 1, 1}, {32, 1, 1}, {&p, &n});
  const std::string head = "kernel checked_store raised an exception on thread (";
  const std::string tail = ", 0, 0) of block (0, 0, 0): BoundsError";
  bool raised = false;
  if (!r && r.error().code == kcache::ErrorCode::k_aborted && r.error().message.starts_with(head) &&
      r.error().message.ends_with(tail)) {
    std::string x = r.error().message.substr(head.size(), r.error().message.size() - head.size() - tail.size());
    raised = x.size() == 2 && std::isdigit(static_cast<unsigned char>(x[0])) &&
             std::isdigit(static_cast<unsigned char>(x[1])) && x >= "16" && x <= "31";
  }
  row("device exception becomes a host error", raised, r ? "no error" : r.error().message);

  n = 64;  // every thread in bounds: the record was cleared, nothing is raised
  auto again = (*thrower)->launch("checked_store", {1, 1, 1}, {32, 1, 1}, {&p, &n});
  row("next launch after an exception succeeds", static_cast<bool>(again), again ? "" : again.error().message);

  auto bad = loader.load("not an hsaco");
  row("not an hsaco: INVALID_ARGUMENT", !bad && bad.error().code == kcache::ErrorCode::k_invalid_argument,
      bad ? "loaded" : bad.error().message);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--hip-arch") {
    auto hip = kcache::HipLoader::open();
    if (!hip) return 77;
    std::printf("%s\n", (*hip)->arch().c_str());
    return 0;
  }
  if (argc == 2 && std::string(argv[1]) == "--hip-code-object") {
    auto hip = kcache::HipLoader::open();
    if (!hip) return 77;
    std::printf("%d\n", (*hip)->code_object_version());
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s IMAGES_DIR | --hip-arch | --hip-code-object\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  auto cuda = kcache::Loader::open();
  auto hip = kcache::HipLoader::open();
  if (!cuda && !hip) {
    std::printf("SKIP: %s; %s\n", cuda.error().message.c_str(), hip.error().message.c_str());
    return 77;
  }
  std::printf("| check | result | detail\n|---|---|---\n");
  if (cuda) cuda_checks(**cuda, dir);
  else std::printf("| CUDA checks skipped | - | %s\n", cuda.error().message.c_str());
  if (hip) amd_checks(**hip, dir);
  else std::printf("| AMD checks skipped | - | %s\n", hip.error().message.c_str());
  std::printf("%s\n", failures == 0 ? "gpu ok" : "gpu FAILED");
  return failures == 0 ? 0 : 1;
}
