// The GPU end of the load path, for a machine with a GPU: loads images kcache made (a cubin, and
// PTX for the driver's JIT), launches saxpy, checks the numbers, and triggers a device exception
// through rtlib that must come back as a host error with its message.
// Usage: kcache_gpu_test IMAGES_DIR   (made by tests/gpu/run.sh). Exit 77 (skip) without a driver.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s IMAGES_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  auto loader = kcache::Loader::open();
  if (!loader) {
    std::printf("SKIP: %s\n", loader.error().message.c_str());
    return 77;
  }
  std::printf("| check | result | detail\n|---|---|---\n");
  row("device", true, (*loader)->arch());
  row("driver (CUDA version)", (*loader)->driver_version() == kcache::installed_driver_version(),
      kcache::cuda_version_name((*loader)->driver_version()));
  std::string cubin = read(dir + "/saxpy." + (*loader)->arch() + ".cubin");
  if (!cubin.empty()) saxpy(**loader, "saxpy cubin", cubin);
  else row("saxpy cubin for " + (*loader)->arch(), false, "not prepared");
  saxpy(**loader, "saxpy PTX sm_80 (driver JIT)", read(dir + "/saxpy.sm_80.ptx"));

  auto bad = (*loader)->load(".version 8.0\n.target sm_80\n.address_size 64\nnonsense;\n");
  row("bad PTX: JIT error log comes back", !bad && bad.error().message.find("nonsense") != std::string::npos,
      bad ? "loaded" : bad.error().message.substr(0, 80));

  auto thrower = (*loader)->load(read(dir + "/throw.sm_80.ptx"));
  if (!thrower) {
    row("throw: load", false, thrower.error().message);
  } else {
    auto out = (*loader)->alloc(64 * sizeof(int));
    std::uint64_t p = out ? *out : 0;
    int n = 16;  // threads 16..31 of 32 are out of bounds
    auto r = (*thrower)->launch("checked_store", {1, 1, 1}, {32, 1, 1}, {&p, &n});
    bool raised = !r && r.error().code == kcache::ErrorCode::k_aborted &&
                  r.error().message.find("BoundsError") != std::string::npos;
    row("device exception becomes a host error", raised, r ? "no error" : r.error().message);
  }
  std::printf("%s\n", failures == 0 ? "gpu ok" : "gpu FAILED");
  return failures == 0 ? 0 : 1;
}
