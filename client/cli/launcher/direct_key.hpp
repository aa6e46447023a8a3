// Direct mode's key and its look-up on this machine, with no gRPC and no protocol buffers: shared by
// the launcher (launch.cpp, nvcc.cpp) and by `kcache` itself (cli/front.cpp), which answers a
// compile its manifest holds before the full client, with gRPC, ever starts.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kcache/key.hpp"
#include "kcache/sha256.hpp"
#include "kcache/step.hpp"
#include "launcher/direct.hpp"

namespace kcache::launcher {

// nvcc's tools as direct mode names them: the digests of nvcc (the program `nvcc` names), its
// profile, cudafe++, fatbinary, ptxas, cicc and libdevice of its toolkit, and the identity of the
// host compiler it runs (-ccbin, NVCC_CCBIN, else gcc); nullopt where one cannot be named.
std::optional<std::string> nvcc_tools(const std::string& nvcc, const std::map<std::string, std::string>& env,
                                      const std::vector<std::string>& args);

// The manifest's key: the tools, the command line's view (direct_args), the folder where it
// matters, and the environment that reaches a compile (k_direct_environment).
Digest direct_key_of(const std::string& tools, const DirectArgs& args, const std::map<std::string, std::string>& env,
                     const std::filesystem::path& folder);

// This process's environment, by name.
std::map<std::string, std::string> this_environment();

// Where this machine keeps a key's manifest (empty without a state folder).
std::filesystem::path manifest_path(const Digest& key);
// The file system as the checks see it: stat, sha256_file and directory listings.
FileSystem real_file_system();

// The program of `name` that PATH finds after this one (kcache installed under a compiler's name
// early on PATH: a masquerade symlink); empty when none.
std::string next_on_path(const std::string& name);
// The toolkit's nvcc: $CUDA_PATH/bin/nvcc, $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc;
// empty when none is there.
std::string toolkit_nvcc();

// A host-side object's name (the host compile's object, nvcc's whole compile's, a device link's):
// a step of `tool` of that identity, the key's arguments and its inputs by digest, giving
// k_step_object. The daemon and this machine's objects (local_objects.hpp) keep it under key().
struct ObjectName {
  StepTool tool = StepTool::nvcc;
  Digest identity{};
  std::vector<std::string> key_args;
  std::vector<std::pair<std::string, Digest>> inputs;

  StepSpec spec() const;
  Key key() const;
};

// A device link (nvcc -dlink, `nvcc` found as for nvcc_tools) named by its inputs' bytes: the
// command line without the object's place, the digest of every object and archive it links and
// of each -l library its -L folders hold, nvcc's tools (nvcc_tools) and nvlink's program, and the
// environment that reaches nvcc (k_direct_environment). nullopt where one cannot be read.
std::optional<ObjectName> device_link_name(const std::string& nvcc, const std::map<std::string, std::string>& env,
                                           const std::vector<std::string>& args);

// answer_from_this_machine for a command line that names nvcc (kcache run as nvcc, or `kcache
// nvcc ...`); nullopt for any other.
std::optional<int> answer_nvcc_from_this_machine(int argc, char** argv);

// A compile of `nvcc` answered from this machine's manifest and objects alone, with no daemon: the
// object and dependency file written into place, what the compile printed printed, the counters
// kept; the compiler's exit code (0). nullopt: not so answered (no manifest, no entry holds, the
// object is not on this machine, a command line direct mode does not take): the full launcher runs.
// A device link (nvcc -dlink) likewise, from this machine's objects by device_link_name.
std::optional<int> answer_from_this_machine(const std::string& nvcc, const std::vector<std::string>& args);

}  // namespace kcache::launcher
