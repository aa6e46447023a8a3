// The CUDA driver a client runs, and what it can load: PTX up to the ISA its CUDA version JITs,
// and cubins from a toolkit of its own major version or older. Shared by the daemon (which caps
// the PTX it emits) and by clients (which state their driver and pick images).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace kcache {

// A CUDA version as cuDriverGetVersion reports it: 1000 * major + 10 * minor (12040 is 12.4).
// 0 means "not stated": the daemon emits for its own toolkit.
using CudaVersion = std::uint32_t;

// "12.4"; "not stated" for 0.
std::string cuda_version_name(CudaVersion version);

// Parses "12.4", "12.4.1" (the patch level is ignored: it never changes the PTX ISA) or
// cuDriverGetVersion's own "12040". INVALID_ARGUMENT naming the text when malformed or impossible.
Expected<CudaVersion> parse_cuda_version(std::string_view text);

// Whether `version`, as sent on the wire, is one cuDriverGetVersion can report: 0 (not stated),
// or 1000 * major + 10 * minor with major 1..99. INVALID_ARGUMENT naming it otherwise.
Expected<void> check_cuda_version(std::uint64_t version);

// One row of NVIDIA's PTX ISA release history: the first CUDA version whose driver JITs `ptx_isa`
// (90 is ISA 9.0).
struct DriverPtxRow {
  CudaVersion cuda;
  int ptx_isa;
};
// Every row, oldest first (CUDA 9.0, ISA 6.0, up to the newest release this build knows).
std::span<const DriverPtxRow> driver_ptx_table();

// The newest PTX ISA a driver of CUDA `driver` JITs; 0 when the driver predates the table (older
// than CUDA 9.0). A driver newer than the table gets the newest row's ISA.
int max_ptx_isa_for_driver(CudaVersion driver);

// Whether a driver of CUDA `driver` loads cubins assembled by the toolkit of CUDA `toolkit`: the
// same major version (minor version compatibility) or a newer driver.
bool driver_loads_cubins_of(CudaVersion driver, CudaVersion toolkit);

// The PTX ISA cap a job for `driver` carries in its key (JobSpec::ptx_isa_cap), given the newest
// ISA the daemon emits (`daemon_ptx_isa`, Capabilities.ptx_isa_version): 0 when the driver JITs
// everything the daemon emits (or states nothing), so such jobs share their images with jobs that
// state no driver; else the driver's newest ISA. FAILED_PRECONDITION for a driver older than the
// table: no PTX the daemon can emit loads there.
Expected<int> ptx_isa_cap_for(CudaVersion driver, int daemon_ptx_isa);

// The ISA of a PTX module from its `.version` directive (84 for 8.4); 0 when it has none.
int ptx_isa_of(std::string_view ptx);

// Whether a driver of CUDA `driver` (0: not stated, loads all) loads an image of `kind` whose
// bytes are `data`, made by the toolkit of CUDA `toolkit` (0: unknown, taken as loadable).
// PTX: its ISA is at most the driver's. Cubin: the toolkit's major is at most the driver's.
bool driver_loads(CudaVersion driver, CudaVersion toolkit, bool is_cubin, std::string_view data);

// "8.4" for 84.
std::string ptx_isa_name(int ptx_isa);

}  // namespace kcache
