// The newest compiles and errors, and the compile times of the current interval, for the status
// page (api/status_page.hpp). Every list is a fixed ring and every string is cut to a bound: what
// a client sends (a module's kernel names, a compiler's diagnostics) cannot make it grow.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "image.hpp"
#include "kcache/expected.hpp"

namespace kcache::server {

class Activity {
 public:
  static constexpr std::size_t k_max_compiles = 50;         // newest compiles kept
  static constexpr std::size_t k_max_errors = 50;           // newest errors kept
  static constexpr std::size_t k_max_kernels = 32;          // kernels kept per compile
  static constexpr std::size_t k_max_archs = 16;            // archs kept per record
  static constexpr std::size_t k_max_name_bytes = 256;      // a kernel's or an arch's name
  static constexpr std::size_t k_max_message_bytes = 4096;  // an error's message
  static constexpr std::size_t k_max_durations = 4096;      // compile times sampled per interval

  // One kernel of a compile: the most registers and spilled bytes' instructions (stores and
  // loads) over the compile's images.
  struct Kernel {
    std::string name;
    std::uint32_t registers = 0;
    std::uint32_t spills = 0;
  };
  struct Compile {
    std::chrono::system_clock::time_point when;
    std::string key;  // hex
    Side side = Side::device;
    std::string tool;  // a build step's tool (cicc, clang, ptxas, host); empty: a Compile
    std::vector<std::string> archs;
    double seconds = 0;            // on the workers, from the first part's start
    std::size_t kernel_count = 0;  // all of them; `kernels` holds the first k_max_kernels
    std::vector<Kernel> kernels;
  };
  struct Failure {
    std::chrono::system_clock::time_point when;
    std::string what;  // "compile" or "fetch"
    std::string key;   // hex, or "-" when it was refused before a key was known
    std::string side;
    std::vector<std::string> archs;
    std::string code;  // ERROR_CODE name
    std::string message;
  };

  // A compile of (side, key) that made `images` in `seconds`; `tool` names a build step's tool.
  void compiled(Side side, std::string_view key, const std::vector<Image>& images, double seconds,
                std::string_view tool = {});
  // A request that failed with `error`; `archs` what it asked for ("what" says which request).
  void failed(std::string_view what, std::string_view key, std::string_view side, const std::vector<std::string>& archs,
              const Error& error);

  // Newest first.
  std::vector<Compile> compiles() const;
  std::vector<Failure> failures() const;
  // The compile times (seconds) seen since the last take, a uniform sample of at most
  // k_max_durations of them; take_durations also starts the next interval.
  std::vector<double> durations() const;
  std::vector<double> take_durations();

 private:
  mutable std::mutex m_mutex;  // guards everything below
  std::deque<Compile> m_compiles;
  std::deque<Failure> m_failures;
  std::vector<double> m_durations;
  std::uint64_t m_durations_seen = 0;  // this interval's, for the sample
  std::minstd_rand m_random{20261206};
};

}  // namespace kcache::server
