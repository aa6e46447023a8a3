#include "kcache/driver.hpp"

#include <array>
#include <charconv>
#include <optional>

namespace kcache {
namespace {

// From the PTX ISA release history (docs.nvidia.com/cuda/parallel-thread-execution, "Release
// Notes"): ISA 8.5 shipped with CUDA 12.5 and 12.6, 8.6 with 12.7, 8.7 with 12.8, 8.8 with 12.9.
constexpr std::array<DriverPtxRow, 26> k_driver_ptx = {{
    {9000, 60},  {9010, 61},  {9020, 62},  {10000, 63}, {10010, 64}, {10020, 65}, {11000, 70},
    {11010, 71}, {11020, 72}, {11030, 73}, {11040, 74}, {11050, 75}, {11060, 76}, {11070, 77},
    {11080, 78}, {12000, 80}, {12010, 81}, {12020, 82}, {12030, 83}, {12040, 84}, {12050, 85},
    {12070, 86}, {12080, 87}, {12090, 88}, {13000, 90}, {13010, 91},
}};

std::optional<std::uint32_t> parse_number(std::string_view text) {
  std::uint32_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

Error malformed(std::string_view text, std::string_view why) {
  return make_error(ErrorCode::k_invalid_argument, "'" + std::string(text.substr(0, 40)) +
                                                       "' is not a CUDA driver version (" + std::string(why) +
                                                       "): give MAJOR.MINOR as nvidia-smi shows it (12.4), or "
                                                       "cuDriverGetVersion's number (12040)");
}

}  // namespace

std::string cuda_version_name(CudaVersion version) {
  if (version == 0) return "not stated";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string ptx_isa_name(int ptx_isa) { return std::to_string(ptx_isa / 10) + "." + std::to_string(ptx_isa % 10); }

Expected<void> check_cuda_version(std::uint64_t version) {
  if (version == 0) return {};
  if (version % 10 != 0 || version / 1000 < 1 || version / 1000 > 99) {
    return malformed(std::to_string(version), "cuDriverGetVersion reports 1000 * major + 10 * minor, major 1 to 99");
  }
  return {};
}

Expected<CudaVersion> parse_cuda_version(std::string_view text) {
  std::size_t dot = text.find('.');
  if (dot == std::string_view::npos) {
    auto number = parse_number(text);
    if (!number) return malformed(text, "not a number");
    if (*number == 0) return malformed(text, "0 is no version");
    if (auto ok = check_cuda_version(*number); !ok) return ok.error();
    return *number;
  }
  std::string_view rest = text.substr(dot + 1);
  std::size_t second = rest.find('.');
  std::string_view minor_text = rest.substr(0, second);
  if (second != std::string_view::npos && !parse_number(rest.substr(second + 1))) return malformed(text, "bad patch level");
  auto major = parse_number(text.substr(0, dot));
  auto minor = parse_number(minor_text);
  if (!major || !minor) return malformed(text, "not MAJOR.MINOR");
  if (*major < 1 || *major > 99 || *minor > 9) return malformed(text, "major 1 to 99, minor 0 to 9");
  return *major * 1000 + *minor * 10;
}

int ptx_isa_of(std::string_view ptx) {
  // Comments may come first; the directive is within the first lines of any real module.
  std::string_view head = ptx.substr(0, 64 * 1024);
  for (std::size_t at = head.find(".version"); at != std::string_view::npos; at = head.find(".version", at + 1)) {
    std::size_t i = at + 8;
    if (i >= head.size() || (head[i] != ' ' && head[i] != '\t')) continue;
    while (i < head.size() && (head[i] == ' ' || head[i] == '\t')) ++i;
    int major = 0, digits = 0;
    while (i < head.size() && head[i] >= '0' && head[i] <= '9' && digits < 3) major = major * 10 + (head[i++] - '0'), ++digits;
    if (digits == 0 || i + 1 >= head.size() || head[i] != '.' || head[i + 1] < '0' || head[i + 1] > '9') continue;
    return major * 10 + (head[i + 1] - '0');
  }
  return 0;
}

bool driver_loads(CudaVersion driver, CudaVersion toolkit, bool is_cubin, std::string_view data) {
  if (driver == 0) return true;
  if (is_cubin) return toolkit == 0 || driver_loads_cubins_of(driver, toolkit);
  return ptx_isa_of(data) <= max_ptx_isa_for_driver(driver);
}

std::span<const DriverPtxRow> driver_ptx_table() { return k_driver_ptx; }

int max_ptx_isa_for_driver(CudaVersion driver) {
  int isa = 0;
  for (const DriverPtxRow& row : k_driver_ptx) {
    if (driver >= row.cuda) isa = row.ptx_isa;
  }
  return isa;
}

bool driver_loads_cubins_of(CudaVersion driver, CudaVersion toolkit) { return driver / 1000 >= toolkit / 1000; }

Expected<int> ptx_isa_cap_for(CudaVersion driver, int daemon_ptx_isa) {
  if (driver == 0) return 0;
  int isa = max_ptx_isa_for_driver(driver);
  if (isa == 0) {
    return make_error(ErrorCode::k_failed_precondition,
                      "a driver for CUDA " + cuda_version_name(driver) + " JITs no PTX ISA kcache emits (the oldest is " +
                          ptx_isa_name(k_driver_ptx.front().ptx_isa) + ", CUDA " +
                          cuda_version_name(k_driver_ptx.front().cuda) + "): update the driver");
  }
  return isa >= daemon_ptx_isa ? 0 : isa;
}

}  // namespace kcache
