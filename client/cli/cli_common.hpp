// What both kcache executables share: the flags, exit codes, reading a job's files, and failures.
// `kcache` (front.cpp) answers cached compiles over HTTP without loading gRPC; everything else
// runs in `kcache-grpc` (main.cpp), to which it hands over with exec.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "input_file.hpp"
#include "kcache/driver.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache::cli {

// Exit codes, documented in --help; scripts rely on them.
enum ExitCode : int {
  k_exit_ok = 0,
  k_exit_error = 1,        // anything else (internal errors, writing files, a reply naming an unsafe file)
  k_exit_usage = 2,        // bad command line, an unreadable input file, a bad manifest
  k_exit_bad_input = 3,    // the daemon refused the input (INVALID_ARGUMENT, ...), or a bad bundle
  k_exit_not_found = 4,    // key or image not stored
  k_exit_unavailable = 5,  // daemon unreachable or too slow
  k_exit_denied = 6,       // no or unknown token (UNAUTHENTICATED), or a role that falls short
};

inline constexpr const char* k_exit_help =
    "Exit codes: 0 ok, 1 other error, 2 usage, 3 bad input (refused by kcached), 4 not found,\n"
    "5 server unavailable, 6 not allowed (token). Server: --server, else $KCACHE_SERVER, else 127.0.0.1:7878.\n"
    "Token: --token-file, else $KCACHE_TOKEN.";

int exit_code_for(const Error& e);

struct GlobalFlags {
  std::string server;
  bool json = false;
  double timeout_s = 600;
  bool tls = false;
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  std::string token_file;
  void add_to(CLI::App& app);
  bool wants_tls() const { return tls || !tls_ca_file.empty() || !tls_cert_file.empty(); }
};

// A job as a person names it, by flags or in a manifest: its files and the rest of the job.
struct JobFiles {
  std::vector<std::string> files;     // the module, then those linked with it
  std::optional<InputFormat> format;  // of every file; nullopt: by each file's name, else its bytes
  std::vector<std::string> include_dirs;  // CUDA C++: where the headers the source includes are found
  JobSpec spec;  // all but its formats and headers, which come from the files
  std::vector<std::string> archs;
  std::vector<ImageKind> kinds;
  CudaVersion driver = 0;  // --driver; 0: not stated
};

// A job's modules as read from their files, and its spec.
struct JobInput {
  JobSpec spec;  // not yet canonical
  std::vector<std::string> archs;
  std::vector<ImageKind> kinds;
  CudaVersion driver = 0;
  std::vector<std::string> modules;
  // CUDA C++ jobs: the headers the source includes, found through -I (their digests are in spec).
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string_view> views() const { return {modules.begin(), modules.end()}; }
};

// Reads every file of `job` and completes its spec: each file's format (stated, else cu for a .cu
// file, else inferred from its bytes), the device target its archs imply, and for CUDA C++ the
// headers its source includes. The modules and headers together may hold `max_module_bytes`, the
// daemon's --max-module-size: a file past it is refused before it is read (exit 3, as the daemon
// would refuse the job).
JobInput read_job(const JobFiles& job, std::uint64_t max_module_bytes);

// What to compile and how: the flags shared by `compile` and `key`.
struct JobFlags {
  std::vector<std::string> files;  // the module, then those linked with it
  std::string side = "device";
  std::string format;
  std::string target;
  std::vector<std::string> archs;
  std::vector<std::string> emit;
  unsigned opt_level = 2;
  bool debug = false;
  bool lineinfo = false;
  bool fast_math = false;
  std::vector<std::string> entries;
  std::string cpu;
  std::string guard = "reject";
  std::string driver;  // --driver 12.4: the CUDA version of the driver that loads the images
  unsigned amd_code_object = 0;  // --amd-code-object 4: the newest code object version the AMD runtime loads
  // CUDA C++ (.cu, --format cu): NVRTC's, sent with the source.
  std::vector<std::string> include_dirs;  // -I: where the client finds the headers it sends
  std::vector<std::string> defines;       // -D NAME[=VALUE]
  std::vector<std::string> undefines;     // -U NAME
  std::string std;                        // --std c++17
  std::vector<std::string> name_exprs;    // --name-expr 'scale<float>'
  std::vector<std::string> nvrtc_options; // -Xnvrtc OPTION: any other allowed NVRTC option

  // Every repeatable option takes one value per use (`-D N=4 k.cu` leaves k.cu a FILE).
  void add_to(CLI::App& cmd);
  // The job the flags name; fails (usage) on a bad --emit or --driver, and on CUDA C++ flags for
  // a module that is not CUDA C++.
  JobFiles job() const;
  // read_job of job().
  JobInput read(std::uint64_t max_module_bytes) const { return read_job(job(), max_module_bytes); }
  // The image kinds; fails on a bad --emit.
  std::vector<ImageKind> kinds() const;

 private:
  // -D and -U in the order given: NVRTC applies them in order, so `-U N -D N=4` defines N.
  std::vector<std::string> macro_options() const;
  const CLI::App* m_cmd = nullptr;
  const CLI::Option* m_define = nullptr;
  const CLI::Option* m_undefine = nullptr;
};

// --driver's value (12.4) as a CUDA version; 0 when not given. A malformed one fails (usage).
CudaVersion parse_driver_flag(const std::string& text);

struct OutputFlags {
  std::string out_file;
  std::string out_dir;
  void add_to(CLI::App& cmd);
  bool wants_files() const { return !out_file.empty() || !out_dir.empty(); }
};

struct Failure {
  int code;
  std::string message;
  std::vector<std::string> report;  // the daemon's whole report, one line per item (Error::details)
};
[[noreturn]] void fail(int code, std::string message);
[[noreturn]] void fail(const Error& e);
// `e` with an exit code chosen by the caller.
[[noreturn]] void fail(int code, const Error& e);

// Every file-system failure is a Failure naming the path: reading exits k_exit_usage (the
// user named it), or k_exit_bad_input for a file over `limit`; writing exits k_exit_error.
// Inputs are read with read_input_file: regular files only, never past their limit.
std::string read_file(const std::string& path, const InputLimit& limit);
void write_file(const std::filesystem::path& path, std::string_view data);
// Creates `dir` and its parents; fails unless it then is a folder.
void make_directories(const std::filesystem::path& dir);
// Fails (k_exit_error) unless `part`, a value from a daemon or an index, is a safe file name part.
void check_file_name(std::string_view what, std::string_view part);

}  // namespace kcache::cli
