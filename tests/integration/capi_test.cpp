// The C API, from a program written in C and linked against libkcache.so, against a real daemon.
#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using CApi = DaemonTest;

TEST_F(CApi, FromC) {
  std::filesystem::path module = m_dir.path() / "saxpy.ll";
  write_file(module, own_module(read_test_data("kernels/saxpy.ll")));  // its first fetch is a miss
  auto r = run_program({KCACHE_CAPI_TEST_PATH, m_daemon->address(), module.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "capi ok\n") << r.err;
}

TEST(CApiUnreachable, NamesTheServer) {
  TempDir dir;
  write_file(dir.path() / "m.ll", read_test_data("kernels/saxpy.ll"));
  // Each call's deadline bounds its retries (25 s at the default 60 s: 8 attempts a call); a fifth
  // of a second keeps the program's five failing calls to about a second.
  auto r = run_program({KCACHE_CAPI_TEST_PATH, "127.0.0.1:1", (dir.path() / "m.ll").string(), "0.2"});
  EXPECT_EQ(r.exit_code, 1) << "its checks fail one by one; none crashes on the NULL image a failed call leaves";
  EXPECT_NE(r.err.find("cannot reach kcached at 127.0.0.1:1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kcache::test
