// kcache::Loader and kcache::HipLoader on a machine without a CUDA driver or an AMD GPU: they say
// so clearly (tests/gpu covers the machines with one); and the one wording of a device exception
// that both loaders report.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

#include "kcache/exception_info.h"
#include "kcache/hip_loader.hpp"
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

// Whether any name HipLoader tries opens here.
bool hip_runtime_present() {
  for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
    if (void* runtime = dlopen(name, RTLD_NOW | RTLD_LOCAL); runtime != nullptr) {
      dlclose(runtime);
      return true;
    }
  }
  return false;
}

TEST(HipLoader, SaysClearlyWhenThereIsNoRuntimeOrGpu) {
  auto loader = HipLoader::open();
  if (loader) {
    GTEST_SKIP() << "an AMD GPU is present here (" << (*loader)->arch()
                 << "); tests/gpu exercises HipLoader against it";
  }
  EXPECT_EQ(loader.error().code, ErrorCode::k_failed_precondition) << loader.error().message;
  EXPECT_NE(loader.error().message.find("libamdhip64.so"), std::string::npos) << loader.error().message;
  if (!hip_runtime_present()) {
    EXPECT_NE(loader.error().message.find("no usable HIP runtime on this machine: cannot open libamdhip64.so"),
              std::string::npos)
        << loader.error().message;
    EXPECT_NE(loader.error().message.find("apt install libamdhip64-5"), std::string::npos) << loader.error().message;
  }
}

TEST(HipLoader, RefusesAnOrdinalThatIsNoGpu) {
  auto loader = HipLoader::open(-1);
  ASSERT_FALSE(loader);
  EXPECT_EQ(loader.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(loader.error().message.find("libamdhip64.so"), std::string::npos) << loader.error().message;
}

kcache_exception_info record_of(const char* name, const char* message) {
  kcache_exception_info record{};
  record.status = 1;
  record.thread[0] = 17;
  record.thread[1] = 2;
  record.block[0] = 3;
  record.block[2] = 1;
  std::strncpy(record.name, name, sizeof record.name - 1);
  std::strncpy(record.message, message, sizeof record.message - 1);
  return record;
}

TEST(RaisedException, NamesKernelThreadBlockExceptionAndMessage) {
  kcache_exception_info record = record_of("BoundsError", "index 33 of 32");
  auto error = raised_exception("checked_store", &record);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, ErrorCode::k_aborted);
  EXPECT_EQ(error->message,
            "kernel checked_store raised BoundsError on thread (17, 2, 0) of block (3, 0, 1): index 33 of 32");
}

TEST(RaisedException, SaysWhatIsMissing) {
  kcache_exception_info record = record_of("", "");
  auto error = raised_exception("k", &record);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->message, "kernel k raised an exception on thread (17, 2, 0) of block (3, 0, 1): no message");
}

TEST(RaisedException, ReadsNoFurtherThanTheRecordsArrays) {
  kcache_exception_info record = record_of("", "");
  std::memset(record.name, 'N', sizeof record.name);  // no terminator: the device lost it
  std::memset(record.message, 'M', sizeof record.message);
  auto error = raised_exception("k", &record);
  ASSERT_TRUE(error);
  EXPECT_NE(error->message.find(std::string(KCACHE_EXCEPTION_NAME_BYTES, 'N') + " on thread"), std::string::npos);
  EXPECT_TRUE(error->message.ends_with(": " + std::string(KCACHE_EXCEPTION_MESSAGE_BYTES, 'M')));
}

TEST(RaisedException, NothingWithoutARecordOrAnException) {
  EXPECT_FALSE(raised_exception("k", nullptr));
  kcache_exception_info record = record_of("BoundsError", "x");
  record.status = 0;
  EXPECT_FALSE(raised_exception("k", &record));
}

}  // namespace
}  // namespace kcache
