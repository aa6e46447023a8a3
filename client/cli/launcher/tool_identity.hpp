// The digests that name a compile's tools, kept by file identity in the client's state folder, so
// a launch hashes a toolkit's programs once per change of them.
#pragma once

#include <functional>
#include <string>

#include "kcache/expected.hpp"
#include "kcache/sha256.hpp"

namespace kcache::launcher {

// The SHA-256 of a file, kept in the state folder (`tools`) by path, size, modification time and
// inode, so a launch hashes a toolkit's program (150 MB for cicc and ptxas) once per change of it.
Expected<Digest> file_digest(const std::string& path);

// A digest kept in the same table under `identity`, computed by `compute` once per identity.
Expected<Digest> cached_digest(const std::string& identity, const std::function<Expected<Digest>()>& compute);

// How a file is known in that table: size, modification time, inode and path; empty when absent.
std::string file_identity(const std::string& path);

// A host compiler driver's identity (kcache::host_compiler_identity: the driver, the compiler
// proper it names for `proper`, its version text), kept by the driver's file identity: it runs
// once per change of the driver. `driver` is the program's path.
Expected<Digest> host_driver_identity(const std::string& driver, const std::string& proper);

}  // namespace kcache::launcher
