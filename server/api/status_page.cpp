#include "api/status_page.hpp"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "api/auth.hpp"
#include "api/http_api.hpp"
#include "cache/cache.hpp"
#include "kcache/http_api.hpp"
#include "kcache/key.hpp"
#include "kcache/sha256.hpp"
#include "kcache/v1/kcache.pb.h"
#include "metrics.hpp"
#include "net/http_request.hpp"
#include "wire/wire.hpp"

// status_page.html, embedded at build time (server/CMakeLists.txt, cmake/EmbedFile.cmake).
extern const unsigned char kcache_status_page_html[];
extern const std::size_t kcache_status_page_html_size;

namespace kcache::server {
namespace {

using json = nlohmann::json;
using WallClock = std::chrono::system_clock;

std::string_view page_template() {
  return {reinterpret_cast<const char*>(kcache_status_page_html), kcache_status_page_html_size};
}

// Text for HTML, in an element or a quoted attribute.
std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '\0':
        out += "\xEF\xBF\xBD";
        break;  // U+FFFD: HTML has no NUL
      default:
        out += c;
    }
  }
  return out;
}

// A path segment or query value, percent-encoded but for [A-Za-z0-9_.~-].
std::string url_encode(std::string_view text) {
  static constexpr char k_hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '~' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += k_hex[c >> 4];
      out += k_hex[c & 15];
    }
  }
  return out;
}

// JSON text; bytes that are not UTF-8 (a hostile kernel name) become U+FFFD rather than an error.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// 1.5 MiB
std::string human_bytes(std::uint64_t bytes) {
  static constexpr const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(k_units)) value /= 1024, ++unit;
  return unit == 0 ? std::to_string(bytes) + " B" : format("%.1f ", value) + k_units[unit];
}

std::string utc_time(WallClock::time_point when) {
  std::time_t t = WallClock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &tm);
  return buffer;
}

std::int64_t unix_seconds(WallClock::time_point when) {
  return std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count();
}

// Answers of each tier so far (the count of its latency histogram), in StatusSample::tiers' order.
std::array<std::uint64_t, 4> tier_answers(const v1::Stats& stats) {
  static constexpr std::array<std::string_view, 4> k_names = {"hot", "local", "remote", "compile"};
  std::array<std::uint64_t, 4> out{};
  for (const v1::TierLatency& t : stats.tier_seconds()) {
    auto at = std::find(k_names.begin(), k_names.end(), t.tier());
    if (at != k_names.end() && !t.buckets().empty())
      out[at - k_names.begin()] = t.buckets(t.buckets_size() - 1).count();
  }
  return out;
}

std::uint64_t all_requests(const v1::Stats& stats) {
  std::uint64_t n = 0;
  for (const v1::RequestCount& r : stats.requests()) n += r.count();
  return n;
}

// The nearest-rank percentile `p` (0-100) of sorted `values`.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return -1;
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

// Why the daemon is not plainly healthy; empty when it is.
std::vector<std::string> health_problems(const v1::Stats& stats, const JobQueue& pool,
                                         const remote::RemoteStats* remote) {
  std::vector<std::string> out;
  if (pool.capacity() > 0 && stats.queued_jobs() >= pool.capacity()) out.push_back("the compile queue is full");
  if (stats.max_bytes() > 0 && stats.bytes() > stats.max_bytes() * 9 / 10)
    out.push_back("the store is past 90% of its cap");
  if (stats.jail() == "none") {
    out.push_back(stats.steps_unjailed() ? "build steps run without a jail (--allow-unjailed-steps): " + stats.jail_reason()
                                         : "no jail, so build steps are refused: " + stats.jail_reason());
  }
  if (remote != nullptr && remote->breaker_open)
    out.push_back("the remote tier is paused (circuit breaker open)");
  else if (remote != nullptr && remote->failures_in_row > 0)
    out.push_back("the remote tier's last call failed");
  return out;
}

// The counters shown, by the name `kcache --json stats` gives them.
std::vector<std::pair<std::string, std::uint64_t>> counters_of(const v1::Stats& s) {
  return {{"hits", s.hits()},
          {"misses", s.misses()},
          {"coalesced", s.coalesced()},
          {"errors", s.errors()},
          {"fetches", s.fetches()},
          {"compiles", s.compiles()},
          {"images_compiled", s.images_compiled()},
          {"entries", s.entries()},
          {"images", s.images()},
          {"bytes", s.bytes()},
          {"max_bytes", s.max_bytes()},
          {"hot_cache_hits", s.hot_cache_hits()},
          {"hot_cache_bytes", s.hot_cache_bytes()},
          {"evictions", s.evictions()},
          {"evicted_bytes", s.evicted_bytes()},
          {"running_jobs", s.running_jobs()},
          {"queued_jobs", s.queued_jobs()},
          {"worker_crashes", s.worker_crashes()},
          {"worker_restarts", s.worker_restarts()},
          {"corrupt_dropped", s.corrupt_dropped()}};
}

std::string hit_rate_text(const v1::Stats& s) { return format("%.2f %%", 100.0 * wire::hit_ratio(s)); }

json sample_json(const StatusSample& s) {
  std::uint64_t asked = s.hits + s.misses + s.coalesced;
  auto seconds = [](double v) { return v < 0 ? json(nullptr) : json(v); };
  return {{"end", s.end},
          {"seconds", s.seconds},
          {"hits", s.hits},
          {"misses", s.misses},
          {"coalesced", s.coalesced},
          {"errors", s.errors},
          {"requests", s.requests},
          {"hit_rate", asked == 0 ? json(nullptr) : json(static_cast<double>(s.hits) / static_cast<double>(asked))},
          {"compile_seconds", {{"p50", seconds(s.p50)}, {"p90", seconds(s.p90)}, {"p99", seconds(s.p99)}}},
          {"tiers", {{"hot", s.tiers[0]}, {"local", s.tiers[1]}, {"remote", s.tiers[2]}, {"compile", s.tiers[3]}}}};
}

json kernel_json(const KernelInfo& k) {
  return {{"name", k.name},
          {"registers", k.registers},
          {"shared_bytes", k.shared_bytes},
          {"local_bytes", k.local_bytes},
          {"spill_stores", k.spill_stores},
          {"spill_loads", k.spill_loads},
          {"sgprs", k.sgprs}};
}

// The image route's path for one image: its download link.
std::string download_path(Side side, const Key& key, const ImageMeta& meta) {
  return std::string(http_api::k_image_prefix) + std::string(side_name(side)) + "/" + key.hex() + "/" +
         url_encode(meta.arch) + "/" + std::string(kind_name(meta.kind));
}

// An entry asked for by the browser: its images, or why there is none to show.
struct EntryView {
  Side side = Side::device;
  std::optional<Key> key;
  std::vector<ImageMeta> images;
  std::string problem;  // empty: found
};

EntryView look_up(Cache& cache, std::string_view side_text, std::string_view key_text) {
  EntryView view;
  auto side = parse_side(side_text);
  if (!side) return view.problem = unknown_side_error(side_text).message, view;
  view.side = *side;
  auto key = parse_key(key_text);
  if (!key) return view.problem = key.error().message, view;
  view.key = *key;
  auto images = cache.lookup(*side, *key);
  if (!images) return view.problem = images.error().message, view;
  if (images->empty()) return view.problem = "no " + std::string(side_name(*side)) + " entry has this key", view;
  view.images = std::move(*images);
  return view;
}

json entry_json(const EntryView& view) {
  json images = json::array();
  for (const ImageMeta& m : view.images) {
    json kernels = json::array();
    for (const KernelInfo& k : m.kernels) kernels.push_back(kernel_json(k));
    images.push_back({{"arch", m.arch},
                      {"kind", kind_name(m.kind)},
                      {"size", m.size},
                      {"sha256", to_hex(m.sha256)},
                      {"kernels", kernels},
                      {"stubbed", m.stubbed},
                      {"download", download_path(view.side, *view.key, m)}});
  }
  return {{"side", side_name(view.side)}, {"key", view.key->hex()}, {"images", images}};
}

// A random nonce for this answer's Content-Security-Policy: only its own inline script and style run.
std::string nonce() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uint64_t a = random(), b = random();
  std::string bytes(reinterpret_cast<const char*>(&a), sizeof a);
  bytes.append(reinterpret_cast<const char*>(&b), sizeof b);
  return to_hex(bytes);
}

// Fills the page's {{name}} markers in one pass: text put in is never read for markers again.
std::string fill(std::string_view page, const std::map<std::string, std::string, std::less<>>& values) {
  std::string out;
  out.reserve(page.size() * 2);
  while (true) {
    std::size_t open = page.find("{{");
    std::size_t close = open == std::string_view::npos ? open : page.find("}}", open);
    if (close == std::string_view::npos) break;
    out.append(page.substr(0, open));
    auto value = values.find(page.substr(open + 2, close - open - 2));
    if (value != values.end()) out += value->second;
    page.remove_prefix(close + 2);
  }
  out.append(page);
  return out;
}

void no_store(httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
}

void send_json(httplib::Response& res, const json& j) {
  no_store(res);
  res.set_content(dump(j) + "\n", "application/json");
}

int refusal_status(ErrorCode code) {
  return code == ErrorCode::k_unauthenticated ? 401 : code == ErrorCode::k_permission_denied ? 403 : 400;
}

// The whole answer to a caller that may not read: the refusal and how to send a token, nothing else.
void refuse_page(httplib::Response& res, const Error& e) {
  res.status = refusal_status(e.code);
  no_store(res);
  res.set_header("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'");
  res.set_header(std::string(http_api::k_error_header), error_code_name(e.code));
  res.set_content(
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kcached: refused</title></head>"
      "<body><h1 id=\"refused\">" +
          std::to_string(res.status) + ": " + escape(e.message) +
          "</h1>"
          "<p>This page needs a token with the read role: send <code>Authorization: Bearer TOKEN</code>, "
          "or enter it here, and kcached keeps it in an HttpOnly cookie for this address "
          "(docs/operations.md, \"The status page\").</p>"
          "<form method=\"get\" action=\"" +
          std::string(http_api::k_session_path) +
          "\"><input type=\"password\" name=\"token\" autocomplete=\"off\" aria-label=\"token\"> "
          "<button type=\"submit\">Open</button></form></body></html>\n",
      "text/html; charset=utf-8");
}

void refuse(httplib::Response& res, const Error& e) {
  res.status = refusal_status(e.code);
  no_store(res);
  res.set_header(std::string(http_api::k_error_header), error_code_name(e.code));
  res.set_content(e.message + "\n", "text/plain; charset=utf-8");
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string entry_link(std::string_view side, std::string_view key) {
  return "/?side=" + url_encode(side) + "&amp;key=" + url_encode(key);
}

// Everything /v1/status answers, also rendered into the page.
json status_json(const v1::Stats& s, const Cache& cache, const JobQueue& pool, WallClock::time_point started) {
  json counters = json::object();
  for (const auto& [name, value] : counters_of(s)) counters[name] = value;
  counters["hit_ratio"] = wire::hit_ratio(s);
  std::optional<remote::RemoteStats> remote;
  if (const remote::RemoteTier* tier = cache.remote()) remote = tier->stats();
  json j = {{"version", KCACHE_VERSION},
            {"uptime_seconds", unix_seconds(WallClock::now()) - unix_seconds(started)},
            {"health", health_problems(s, pool, remote ? &*remote : nullptr).empty() ? "ok" : "degraded"},
            {"problems", health_problems(s, pool, remote ? &*remote : nullptr)},
            {"counters", counters},
            {"workers", pool.workers()},
            {"jail", {{"mode", s.jail()}, {"reason", s.jail_reason()}, {"steps_unjailed", s.steps_unjailed()}}},
            {"queue_capacity", pool.capacity()}};
  if (remote) {
    j["remote"] = {{"url", s.remote()},
                   {"reachable", remote->failures_in_row > 0 ? json(false)
                                 : remote->answered > 0      ? json(true)
                                                             : json(nullptr)},
                   {"last_error", remote->last_error},
                   {"circuit_breaker", remote->breaker_open ? "open" : "closed"},
                   {"lease_waits", s.lease_waits()},
                   {"lease_takeovers", s.lease_takeovers()},
                   {"write_queue_depth", s.remote_write_queue_depth()},
                   {"write_queue_bytes", s.remote_write_queue_bytes()},
                   {"write_drops", s.remote_write_drops()},
                   {"hits", s.remote_hits()},
                   {"misses", s.remote_misses()},
                   {"errors", s.remote_errors()},
                   {"rejected", s.remote_rejected()}};
  } else {
    j["remote"] = nullptr;
  }
  json compiles = json::array();
  for (const Activity::Compile& c : cache.activity().compiles()) {
    json kernels = json::array();
    for (const Activity::Kernel& k : c.kernels) {
      kernels.push_back({{"name", k.name}, {"registers", k.registers}, {"spills", k.spills}});
    }
    compiles.push_back({{"time", unix_seconds(c.when)},
                        {"key", c.key},
                        {"side", side_name(c.side)},
                        {"step", c.tool.empty() ? json(nullptr) : json(c.tool)},
                        {"archs", c.archs},
                        {"seconds", c.seconds},
                        {"kernel_count", c.kernel_count},
                        {"kernels", kernels}});
  }
  j["compiles"] = compiles;
  json steps = json::object();
  for (const v1::StepCount& st : s.steps()) {
    steps[st.tool()] = {{"hits", st.hits()},     {"misses", st.misses()}, {"coalesced", st.coalesced()},
                        {"stored", st.stored()}, {"failed", st.failed()}};
  }
  j["steps"] = steps;
  json errors = json::array();
  for (const Activity::Failure& f : cache.activity().failures()) {
    errors.push_back({{"time", unix_seconds(f.when)},
                      {"what", f.what},
                      {"key", f.key},
                      {"side", f.side},
                      {"archs", f.archs},
                      {"code", f.code},
                      {"message", f.message}});
  }
  j["errors"] = errors;
  return j;
}

// The counters' rows, each value's cell named by its stats name (data-stat) for the refresh and
// the tests.
std::string counters_html(const v1::Stats& s, const JobQueue& pool) {
  auto row = [](std::string_view label, std::string_view name, const std::string& text, const std::string& note) {
    return "<tr><th>" + std::string(label) + "</th><td data-stat=\"" + std::string(name) + "\">" + text + "</td><td>" +
           note + "</td></tr>";
  };
  auto n = [](std::uint64_t value) { return std::to_string(value); };
  std::string cap = s.max_bytes() == 0
                        ? std::string("no cap (--max-size)")
                        : "of " + escape(human_bytes(s.max_bytes())) + " (--max-size) <meter min=\"0\" max=\"" +
                              n(s.max_bytes()) + "\" value=\"" + n(s.bytes()) + "\"></meter>";
  return row("hits", "hits", n(s.hits()), "requests answered from the cache: Compiles and build steps") +
         row("misses", "misses", n(s.misses()), "requests that compiled or ran their step") +
         row("hit rate", "hit_ratio", escape(hit_rate_text(s)), "hits / (hits + misses + coalesced)") +
         row("coalesced", "coalesced", n(s.coalesced()), "waited for an identical compile or step in progress") +
         row("errors", "errors", n(s.errors()), "requests that failed") +
         row("fetches", "fetches", n(s.fetches()), "image reads by key") +
         row("compiles", "compiles", n(s.compiles()), "compile jobs run on a worker") +
         row("entries", "entries", n(s.entries()), "keys stored, both sides") +
         row("images", "images", n(s.images()), "images stored") +
         row("bytes", "bytes", n(s.bytes()), escape(human_bytes(s.bytes())) + " " + cap) +
         row("hot cache hits", "hot_cache_hits", n(s.hot_cache_hits()), "image reads answered from memory") +
         row("evictions", "evictions", n(s.evictions()), "entries evicted, least recently used first") +
         row("workers busy", "running_jobs", n(s.running_jobs()), "of " + n(pool.workers()) + " (--workers)") +
         row("queued", "queued_jobs", n(s.queued_jobs()), "of " + n(pool.capacity()) + " (--queue-depth)") +
         row("worker crashes", "worker_crashes", n(s.worker_crashes()), "workers that crashed, overran or were killed");
}

// The remote tier, from status_json's "remote".
std::string remote_html(const json& r) {
  if (r.is_null()) return "<p>None: this daemon has no remote tier (--remote).</p>";
  std::string reachable = r["reachable"].is_null() ? "not asked yet" : r["reachable"].get<bool>() ? "yes" : "no";
  if (!r["last_error"].get<std::string>().empty())
    reachable += " (last error: " + r["last_error"].get<std::string>() + ")";
  auto row = [](std::string_view label, std::string_view name, const std::string& text) {
    return "<tr><th>" + std::string(label) + "</th><td data-remote=\"" + std::string(name) + "\">" + escape(text) +
           "</td></tr>";
  };
  auto n = [&r](const char* name) { return std::to_string(r[name].get<std::uint64_t>()); };
  return "<table>" + row("Redis", "url", r["url"].get<std::string>()) + row("reachable", "reachable", reachable) +
         row("circuit breaker", "circuit_breaker", r["circuit_breaker"].get<std::string>()) +
         row("lease waits", "lease_waits", n("lease_waits")) +
         row("lease takeovers", "lease_takeovers", n("lease_takeovers")) +
         row("write queue", "write_queue_depth",
             n("write_queue_depth") + " (" + human_bytes(r["write_queue_bytes"].get<std::uint64_t>()) + ")") +
         row("writes dropped", "write_drops", n("write_drops")) +
         row("hits / misses / errors", "hits", n("hits") + " / " + n("misses") + " / " + n("errors")) +
         row("entries refused", "rejected", n("rejected")) + "</table>";
}

std::string compiles_html(const std::vector<Activity::Compile>& compiles) {
  std::string out;
  for (const Activity::Compile& c : compiles) {
    std::string kernels;
    std::uint32_t registers = 0, spills = 0;
    for (const Activity::Kernel& k : c.kernels) {
      kernels += "<li><code>" + escape(k.name) + "</code> " + std::to_string(k.registers) + " registers, " +
                 std::to_string(k.spills) + " spills</li>";
      registers = std::max(registers, k.registers);
      spills += k.spills;
    }
    if (c.kernel_count > c.kernels.size()) {
      kernels += "<li>and " + std::to_string(c.kernel_count - c.kernels.size()) + " more</li>";
    }
    out += "<tr><td>" + escape(utc_time(c.when)) + "</td><td><a class=\"key\" href=\"" +
           entry_link(side_name(c.side), c.key) + "\"><code>" + escape(c.key) + "</code></a></td><td>" +
           escape(c.tool.empty() ? std::string(side_name(c.side)) : c.tool + " step") + "</td><td>" +
           escape(join(c.archs)) + "</td><td><ul>" + kernels +
           "</ul></td><td class=\"n\">" + format("%.1f", c.seconds * 1000) + " ms</td><td class=\"n\">" +
           std::to_string(registers) + "</td><td class=\"n\">" + std::to_string(spills) + "</td></tr>";
  }
  return out.empty() ? "<tr><td colspan=\"8\">none since start</td></tr>" : out;
}

// The build steps by tool: what the compiler launchers asked of this daemon.
std::string steps_html(const v1::Stats& s) {
  std::string out;
  auto n = [](std::uint64_t v) { return std::to_string(v); };
  for (const v1::StepCount& st : s.steps()) {
    out += "<tr><td>" + escape(st.tool()) + "</td><td class=\"n\">" + n(st.hits()) + "</td><td class=\"n\">" +
           n(st.misses()) + "</td><td class=\"n\">" + n(st.coalesced()) + "</td><td class=\"n\">" + n(st.stored()) +
           "</td><td class=\"n\">" + n(st.failed()) + "</td></tr>";
  }
  return out;
}

std::string errors_html(const std::vector<Activity::Failure>& failures) {
  std::string out;
  for (const Activity::Failure& f : failures) {
    std::string key = f.key == "-" || f.side.empty() ? "<code>" + escape(f.key) + "</code>"
                                                     : "<a class=\"key\" href=\"" + entry_link(f.side, f.key) +
                                                           "\"><code>" + escape(f.key) + "</code></a>";
    out += "<tr><td>" + escape(utc_time(f.when)) + "</td><td>" + escape(f.what) + "</td><td>" + key + "</td><td>" +
           escape(f.side) + "</td><td>" + escape(join(f.archs)) + "</td><td>" + escape(f.code) +
           "</td><td><pre class=\"diag\">" + escape(f.message) + "</pre></td></tr>";
  }
  return out.empty() ? "<tr><td colspan=\"7\">none since start</td></tr>" : out;
}

// The entry browser's answer: each image with its kernels and a download link, or why there is none.
std::string entry_html(const EntryView& view) {
  if (!view.problem.empty()) return "<p id=\"entry-problem\">" + escape(view.problem) + "</p>";
  std::string out =
      "<table id=\"entry\"><tr><th>arch</th><th>kind</th><th>size</th><th>SHA-256</th><th>kernels</th>"
      "<th>download</th></tr>";
  for (const ImageMeta& m : view.images) {
    std::string kernels;
    for (const KernelInfo& k : m.kernels) {
      kernels += "<li><code>" + escape(k.name) + "</code> " + std::to_string(k.registers) + " registers" +
                 (k.sgprs > 0 ? ", " + std::to_string(k.sgprs) + " SGPRs" : "") + ", " +
                 std::to_string(k.shared_bytes) + " B shared, " + std::to_string(k.local_bytes) + " B local, " +
                 std::to_string(k.spill_stores) + " spill stores, " + std::to_string(k.spill_loads) +
                 " spill loads</li>";
    }
    std::string file = view.key->hex().substr(0, 16) + "." + m.arch + "." + std::string(kind_name(m.kind));
    out += "<tr><td>" + escape(m.arch) + "</td><td>" + escape(kind_name(m.kind)) + "</td><td class=\"n\">" +
           std::to_string(m.size) + "</td><td><code class=\"sha\">" + to_hex(m.sha256) + "</code></td><td><ul>" +
           kernels + "</ul></td><td><a class=\"download\" href=\"" + escape(download_path(view.side, *view.key, m)) +
           "\" download=\"" + escape(file) + "\">download</a></td></tr>";
  }
  return out + "</table>";
}
}  // namespace

StatusPage::StatusPage(Cache& cache, const JobQueue& pool, std::function<v1::Stats()> stats)
    : m_cache(cache),
      m_pool(pool),
      m_stats(std::move(stats)),
      m_started(WallClock::now()),
      m_last(std::make_unique<v1::Stats>(m_stats())),
      m_last_at(std::chrono::steady_clock::now()) {
  m_sampler = std::thread([this] { sample_loop(); });
}

StatusPage::~StatusPage() {
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
  }
  m_wake.notify_all();
  m_sampler.join();
}

StatusSample StatusPage::delta(const v1::Stats& now, std::vector<double> durations) const {
  const v1::Stats& last = *m_last;
  StatusSample s;
  s.end = unix_seconds(WallClock::now());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_last_at).count();
  s.hits = now.hits() - last.hits();
  s.misses = now.misses() - last.misses();
  s.coalesced = now.coalesced() - last.coalesced();
  s.errors = now.errors() - last.errors();
  s.requests = all_requests(now) - all_requests(last);
  std::sort(durations.begin(), durations.end());
  s.p50 = percentile(durations, 50);
  s.p90 = percentile(durations, 90);
  s.p99 = percentile(durations, 99);
  auto tiers_now = tier_answers(now), tiers_last = tier_answers(last);
  for (std::size_t t = 0; t < s.tiers.size(); ++t) s.tiers[t] = tiers_now[t] - tiers_last[t];
  return s;
}

void StatusPage::sample_loop() {
  std::unique_lock lock(m_mutex);
  auto next = std::chrono::steady_clock::now() + k_interval;
  while (!m_wake.wait_until(lock, next, [this] { return m_stopping; })) {
    next += k_interval;
    lock.unlock();
    v1::Stats now = m_stats();  // takes the store's and the service's locks: not under ours
    std::vector<double> durations = m_cache.activity().take_durations();
    lock.lock();
    m_ring[m_next] = delta(now, std::move(durations));
    m_next = (m_next + 1) % k_samples;
    m_count = std::min(m_count + 1, k_samples);
    *m_last = std::move(now);
    m_last_at = std::chrono::steady_clock::now();
  }
}

std::vector<StatusSample> StatusPage::history() const {
  v1::Stats now = m_stats();
  std::vector<double> durations = m_cache.activity().durations();
  std::lock_guard lock(m_mutex);
  std::vector<StatusSample> out;
  out.reserve(m_count + 1);
  for (std::size_t i = 0; i < m_count; ++i) out.push_back(m_ring[(m_next + k_samples - m_count + i) % k_samples]);
  out.push_back(delta(now, std::move(durations)));
  return out;
}

void StatusPage::add_routes(Router& router, const Authenticator& auth, Metrics& metrics, bool tls) {
  // Each route renders on a pool thread (the snapshot takes the store's and the service's locks,
  // and an entry is read from RocksDB), after the token check. A caller without a token is refused
  // on the event thread, so a flood of them holds no pool thread. `deferred`: the request goes on
  // to a pool thread, where it is checked again and counted.
  auto allowed = [&auth, &metrics](const httplib::Request& req, const char* method, bool& deferred) {
    auto ok = auth.check(http_authorization(req), req.remote_addr, Role::read, method);
    deferred = ok && !may_wait();
    if (deferred) return defer(), ok;
    metrics.count_request("kcache.http", method, ok ? 0 : wire::to_status(ok.error()).error_code());
    return ok;
  };

  // The token as a cookie only the daemon sets: HttpOnly (no script reads it), SameSite=Strict,
  // Secure over TLS. A wrong token is refused as the page would be, and sets nothing.
  router.Get(std::string(http_api::k_session_path), [&auth, &metrics, tls](const httplib::Request& req, httplib::Response& res) {
    const std::string token = req.get_param_value("token");
    auto ok = auth.check("Bearer " + token, req.remote_addr, Role::read, "Session");
    metrics.count_request("kcache.http", "Session", ok ? 0 : wire::to_status(ok.error()).error_code());
    no_store(res);
    res.set_header("Referrer-Policy", "no-referrer");
    if (!ok) return refuse_page(res, ok.error());
    if (token.empty() || token.find_first_of(";, \t\r\n\"\\") != std::string::npos) {
      return refuse_page(res, make_error(ErrorCode::k_invalid_argument, "a token cannot be a cookie's value"));
    }
    res.status = 303;
    res.set_header("Location", "/");
    res.set_header("Set-Cookie", std::string(http_api::k_token_cookie) + "=" + token +
                                     "; Path=/; HttpOnly; SameSite=Strict" + (tls ? "; Secure" : ""));
  });

  router.Get(std::string(http_api::k_status_path),
             [this, allowed](const httplib::Request& req, httplib::Response& res) {
               bool deferred = false;
               auto ok = allowed(req, "Status", deferred);
               if (deferred) return;
               if (!ok) return refuse(res, ok.error());
               send_json(res, status_json(m_stats(), m_cache, m_pool, m_started));
             });

  router.Get(std::string(http_api::k_status_history_path),
             [this, allowed](const httplib::Request& req, httplib::Response& res) {
               bool deferred = false;
               auto ok = allowed(req, "StatusHistory", deferred);
               if (deferred) return;
               if (!ok) return refuse(res, ok.error());
               json samples = json::array();
               for (const StatusSample& s : history()) samples.push_back(sample_json(s));
               samples.back()["partial"] = true;
               send_json(res, {{"interval_seconds", k_interval.count()}, {"samples", samples}});
             });

  router.Get(std::string(http_api::k_status_entry_path),
             [this, allowed](const httplib::Request& req, httplib::Response& res) {
               bool deferred = false;
               auto ok = allowed(req, "StatusEntry", deferred);
               if (deferred) return;
               if (!ok) return refuse(res, ok.error());
               EntryView view = look_up(m_cache, req.get_param_value("side"), req.get_param_value("key"));
               if (!view.problem.empty()) {
                 res.status = view.key && view.images.empty() ? 404 : 400;
                 no_store(res);
                 return res.set_content(view.problem + "\n", "text/plain; charset=utf-8");
               }
               send_json(res, entry_json(view));
             });

  router.Get("/", [this, allowed](const httplib::Request& req, httplib::Response& res) {
    bool deferred = false;
    auto ok = allowed(req, "StatusPage", deferred);
    if (deferred) return;
    if (!ok) return refuse_page(res, ok.error());
    v1::Stats s = m_stats();
    json status = status_json(s, m_cache, m_pool, m_started);
    std::map<std::string, std::string, std::less<>> values;
    std::string n = nonce();
    values["nonce"] = n;
    values["version"] = escape(KCACHE_VERSION);
    values["health"] = escape(status["health"].get<std::string>());
    std::string problems;
    for (const auto& p : status["problems"]) problems += "<li>" + escape(p.get<std::string>()) + "</li>";
    values["problems"] = problems;
    values["uptime"] = std::to_string(status["uptime_seconds"].get<std::int64_t>());
    values["jail"] = escape(s.jail() == "none" ? "none (" + s.jail_reason() + ")" : s.jail());
    values["now"] = escape(utc_time(WallClock::now()));
    values["counters"] = counters_html(s, m_pool);
    values["remote"] = remote_html(status["remote"]);
    values["compiles"] = compiles_html(m_cache.activity().compiles());
    values["steps"] = steps_html(s);
    values["errors"] = errors_html(m_cache.activity().failures());
    // The entry browser: the form as it was sent, and the entry it asked for.
    std::string side = req.has_param("side") ? req.get_param_value("side") : "device";
    std::string key = req.get_param_value("key");
    values["key"] = escape(key);
    values["device_selected"] = side == "host" ? "" : " selected";
    values["host_selected"] = side == "host" ? " selected" : "";
    values["entry"] = key.empty() ? "" : entry_html(look_up(m_cache, side, key));
    no_store(res);
    res.set_header("Content-Security-Policy", "default-src 'none'; script-src 'nonce-" + n + "'; style-src 'nonce-" +
                                                  n +
                                                  "'; connect-src 'self'; img-src 'self'; form-action 'self'; "
                                                  "frame-ancestors 'none'; base-uri 'none'");
    res.set_content(fill(page_template(), values), "text/html; charset=utf-8");
  });
}

}  // namespace kcache::server
