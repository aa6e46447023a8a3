// What kcache-grpc prints of the daemon's replies: a table or lines for a person, or one JSON
// object on stdout with --json. Failures go to stderr (and stdout with --json).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "image_output.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache::cli {

// "hit", "miss", "coalesced" (kcache/job.hpp's names); "unknown" for a value this client does not know.
std::string outcome_text(v1::Outcome outcome);

// The table lines of a reply's images.
std::vector<ImageLine> image_lines(const std::vector<const v1::Image*>& images);
// Writes a reply's images per the output flags (write_images); returns each one's path.
std::vector<std::string> write_images(const OutputFlags& out, const std::vector<const v1::Image*>& images,
                                      const std::vector<const std::string*>& data);

// An image as JSON: arch, kind, size, digest, where it was written (null: nowhere), and what the
// reply says of it (needs JIT, stubbed symbols, lowered names, kernels).
nlohmann::json image_json(const v1::Image& image, const std::string& path);

// A compile's reply: its key, outcome, images (written to `paths`) and diagnostics.
void print_compiled(const GlobalFlags& g, const v1::CompileResponse& response, const std::vector<std::string>& paths);
// One image served for `key`, `how` ("hit", "hit (bundle)"), written to `path`.
void print_served(const GlobalFlags& g, const std::string& how, const std::string& key, const v1::Image& image,
                  const std::string& path);
// Which keys are stored, with their images.
void print_lookup(const GlobalFlags& g, const v1::LookupResponse& response);
void print_key(const GlobalFlags& g, const std::string& key, const std::string& fingerprint);
// Every counter the daemon reports, the requests by method and status, and the latency histograms.
void print_stats(const GlobalFlags& g, const v1::Stats& stats);
void print_capabilities(const GlobalFlags& g, const v1::Capabilities& caps);
void print_verified(const GlobalFlags& g, const v1::VerifyResponse& response);
void print_evicted(const GlobalFlags& g, const v1::EvictResponse& response);
void print_purged(const GlobalFlags& g, const v1::PurgeResponse& response);
void print_serving(const GlobalFlags& g);
void print_bundle(const GlobalFlags& g, const std::string& dir, std::size_t modules, std::size_t images);

// Prints a failure (stderr, and the JSON object with --json); returns its exit code.
int report_failure(const GlobalFlags& g, const Failure& f);

// Progress of the modules of a precompile on stderr, from any thread: a bar on a terminal, else a
// line per module.
class Progress {
 public:
  explicit Progress(std::size_t total);
  // Module `name` is done (`failed`: with an error, reported at the end).
  void done(const std::string& name, bool failed);
  // Ends the bar's line.
  void finish();

 private:
  std::mutex m_mutex;  // guards m_done and the output
  std::size_t m_total;
  std::size_t m_done = 0;
  bool m_tty;
};

}  // namespace kcache::cli
