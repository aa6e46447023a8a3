// kcache::Loader on a machine without a CUDA driver: it says so clearly (tests/gpu covers the
// machines with one).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "kcache/loader.hpp"

namespace kcache {
namespace {

TEST(Loader, SaysClearlyWhenThereIsNoDriver) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); driver != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is present here; tests/gpu exercises the loader against it";
  }
  auto loader = Loader::open();
  ASSERT_FALSE(loader);
  EXPECT_EQ(loader.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(loader.error().message.find("no CUDA driver on this machine: cannot open libcuda.so.1"), std::string::npos)
      << loader.error().message;
}

}  // namespace
}  // namespace kcache
