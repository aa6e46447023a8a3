// What a client's CUDA driver can load: the PTX ISA table (one test per row, from NVIDIA's PTX
// ISA release history), driver versions as people and cuDriverGetVersion write them, and cubins
// across toolkit versions.
#include <gtest/gtest.h>

#include "kcache/driver.hpp"
#include "kcache/job.hpp"
#include "kcache/select.hpp"

namespace kcache {
namespace {

struct Row {
  const char* driver;  // as nvidia-smi shows it
  int ptx_isa;         // the newest PTX ISA that driver JITs
};

class DriverPtxTable : public testing::TestWithParam<Row> {};

TEST_P(DriverPtxTable, GivesTheNewestIsaTheReleaseNotesName) {
  auto driver = parse_cuda_version(GetParam().driver);
  ASSERT_TRUE(driver) << driver.error().message;
  EXPECT_EQ(max_ptx_isa_for_driver(*driver), GetParam().ptx_isa) << "CUDA " << GetParam().driver;
}

// Every row of the PTX ISA release history from CUDA 9.0 on, and the versions between rows.
INSTANTIATE_TEST_SUITE_P(
    ReleaseHistory, DriverPtxTable,
    testing::Values(Row{"9.0", 60}, Row{"9.1", 61}, Row{"9.2", 62}, Row{"10.0", 63}, Row{"10.1", 64},
                    Row{"10.2", 65}, Row{"11.0", 70}, Row{"11.1", 71}, Row{"11.2", 72}, Row{"11.3", 73},
                    Row{"11.4", 74}, Row{"11.5", 75}, Row{"11.6", 76}, Row{"11.7", 77}, Row{"11.8", 78},
                    Row{"12.0", 80}, Row{"12.1", 81}, Row{"12.2", 82}, Row{"12.3", 83}, Row{"12.4", 84},
                    Row{"12.5", 85}, Row{"12.6", 85}, Row{"12.7", 86}, Row{"12.8", 87}, Row{"12.9", 88},
                    Row{"13.0", 90}, Row{"13.1", 91},
                    // A driver newer than the table takes the newest ISA this build knows.
                    Row{"13.9", 91}, Row{"14.0", 91}, Row{"99.9", 91},
                    // Patch levels never change the ISA.
                    Row{"12.4.1", 84}, Row{"11.8.0", 78}),
    [](const testing::TestParamInfo<Row>& info) {
      std::string name = std::string("cuda_") + info.param.driver;
      for (char& c : name) c = c == '.' ? '_' : c;
      return name;
    });

TEST(DriverPtxTable, IsOrderedAndCoversEveryRowOnce) {
  auto table = driver_ptx_table();
  ASSERT_FALSE(table.empty());
  for (std::size_t i = 1; i < table.size(); ++i) {
    EXPECT_LT(table[i - 1].cuda, table[i].cuda);
    EXPECT_LT(table[i - 1].ptx_isa, table[i].ptx_isa);
  }
  EXPECT_EQ(max_ptx_isa_for_driver(8000), 0) << "CUDA 8.0 predates the table";
}

TEST(CudaVersion, ParsesWhatPeopleAndTheDriverApiWrite) {
  EXPECT_EQ(*parse_cuda_version("12.4"), 12040u);
  EXPECT_EQ(*parse_cuda_version("12040"), 12040u);
  EXPECT_EQ(*parse_cuda_version("13.0.1"), 13000u);
  EXPECT_EQ(*parse_cuda_version("9.2"), 9020u);
  EXPECT_EQ(cuda_version_name(12040), "12.4");
  EXPECT_EQ(cuda_version_name(0), "not stated");
  for (const char* bad : {"", "12", "12.", ".4", "12.10", "12.4.x", "abc", "-12.4", "0", "12045", "100.0", "0.5",
                          "12.4 ", "1e4", "4294967296"}) {
    auto v = parse_cuda_version(bad);
    ASSERT_FALSE(v) << "'" << bad << "' parsed as " << *v;
    EXPECT_EQ(v.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(v.error().message.find("is not a CUDA driver version"), std::string::npos) << v.error().message;
  }
}

TEST(CudaVersion, WireValuesMustBeOnesTheDriverReports) {
  EXPECT_TRUE(check_cuda_version(0)) << "not stated";
  EXPECT_TRUE(check_cuda_version(12040));
  EXPECT_TRUE(check_cuda_version(13000));
  for (std::uint64_t bad : {12045ULL, 999ULL, 100000ULL, 4294967295ULL, 1ULL << 40}) {
    auto v = check_cuda_version(bad);
    ASSERT_FALSE(v) << bad;
    EXPECT_EQ(v.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(v.error().message.find(std::to_string(bad)), std::string::npos) << "names it: " << v.error().message;
  }
}

TEST(CudaVersion, CubinsLoadOnTheirOwnMajorAndNewerDrivers) {
  EXPECT_TRUE(driver_loads_cubins_of(13000, 13000));
  EXPECT_TRUE(driver_loads_cubins_of(13000, 13010)) << "minor version compatibility";
  EXPECT_TRUE(driver_loads_cubins_of(14000, 13000));
  EXPECT_FALSE(driver_loads_cubins_of(12080, 13000));
  EXPECT_FALSE(driver_loads_cubins_of(12040, 13000));
  EXPECT_FALSE(driver_loads_cubins_of(11080, 12040));
  EXPECT_TRUE(driver_loads_cubins_of(12000, 12040));
}

TEST(CudaVersion, TheKeysCapIsSetOnlyBelowTheDaemonsIsa) {
  EXPECT_EQ(*ptx_isa_cap_for(0, 90), 0) << "not stated";
  EXPECT_EQ(*ptx_isa_cap_for(11080, 90), 78);
  EXPECT_EQ(*ptx_isa_cap_for(12000, 90), 80);
  EXPECT_EQ(*ptx_isa_cap_for(12040, 90), 84);
  EXPECT_EQ(*ptx_isa_cap_for(12080, 90), 87);
  EXPECT_EQ(*ptx_isa_cap_for(13000, 90), 0) << "takes everything the daemon emits";
  EXPECT_EQ(*ptx_isa_cap_for(14000, 90), 0);
  EXPECT_EQ(*ptx_isa_cap_for(12040, 84), 0) << "a daemon on CUDA 12.4";
  auto too_old = ptx_isa_cap_for(8000, 90);
  ASSERT_FALSE(too_old);
  EXPECT_EQ(too_old.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(too_old.error().message.find("CUDA 8.0"), std::string::npos) << too_old.error().message;
}

TEST(CudaVersion, PtxTakesTheCubinsPlaceOnceEach) {
  std::vector<ImageRequest> asked = {{"sm_80", ImageKind::ptx}, {"sm_80", ImageKind::cubin}, {"sm_90", ImageKind::cubin}};
  EXPECT_EQ(ptx_in_place_of_cubins(asked),
            (std::vector<ImageRequest>{{"sm_80", ImageKind::ptx}, {"sm_90", ImageKind::ptx}}));
}

TEST(PtxIsaOf, ReadsTheVersionDirective) {
  EXPECT_EQ(ptx_isa_of("//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 8.4\n.target sm_80\n"), 84);
  EXPECT_EQ(ptx_isa_of(".version\t9.0\n"), 90);
  EXPECT_EQ(ptx_isa_of(".version 10.1\n"), 101);
  EXPECT_EQ(ptx_isa_of(".target sm_80\n"), 0);
  EXPECT_EQ(ptx_isa_of(".versionx 8.4\n.version 7.8\n"), 78);
  EXPECT_EQ(ptx_isa_of(".version 8"), 0);
  EXPECT_EQ(ptx_isa_of(""), 0);
}

// Selection for a stated driver, table-driven over drivers 11.8 to future ones: the images of a
// CUDA 13 daemon's driverless job (PTX 9.0 and a cubin for sm_80) and what each driver gets.
TEST(SelectForDriver, PassesOverWhatTheDriverCannotLoad) {
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::ptx}, {"sm_80", ImageKind::cubin}};
  std::vector<std::string> data = {".version 9.0\n.target sm_80\n", "\x7f" "ELF"};
  struct Case {
    CudaVersion driver;
    const char* expected;  // arch.kind, or "none"
  };
  for (Case c : {Case{0, "sm_80.cubin"}, Case{11080, "none"}, Case{12000, "none"}, Case{12040, "none"},
                 Case{12080, "none"}, Case{13000, "sm_80.cubin"}, Case{14000, "sm_80.cubin"}}) {
    SCOPED_TRACE(cuda_version_name(c.driver));
    auto loadable = [&](std::size_t i) { return driver_loads(c.driver, 13000, images[i].kind == ImageKind::cubin, data[i]); };
    auto chosen = select_image(images, *parse_sm_arch("sm_86"), std::nullopt, loadable);
    std::string got = chosen ? images[chosen->index].arch + "." + std::string(kind_name(images[chosen->index].kind)) : "none";
    EXPECT_EQ(got, c.expected);
  }
  // The images of a job for 12.4 (PTX 8.4 in place of the cubin): every driver from 12.4 takes it.
  std::vector<ImageRequest> capped = {{"sm_80", ImageKind::ptx}};
  std::vector<std::string> capped_data = {".version 8.4\n"};
  for (CudaVersion driver : {11080u, 12000u, 12040u, 12080u, 13000u, 14000u}) {
    auto chosen = select_image(capped, *parse_sm_arch("sm_80"), std::nullopt,
                               [&](std::size_t i) { return driver_loads(driver, 13000, false, capped_data[i]); });
    EXPECT_EQ(chosen.has_value(), driver >= 12040u) << cuda_version_name(driver);
    if (chosen) {
      EXPECT_TRUE(chosen->needs_jit);
    }
  }
}

}  // namespace
}  // namespace kcache
