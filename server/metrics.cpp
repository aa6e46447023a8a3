#include "metrics.hpp"

#include <grpcpp/support/server_interceptor.h>

#include "kcache/v1/kcache.pb.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <sstream>

#include "net/http_request.hpp"
#include "wire/wire.hpp"

namespace kcache::server {
namespace {

const char* status_name(int code) {
  static constexpr const char* k_names[] = {"OK",
                                            "CANCELLED",
                                            "UNKNOWN",
                                            "INVALID_ARGUMENT",
                                            "DEADLINE_EXCEEDED",
                                            "NOT_FOUND",
                                            "ALREADY_EXISTS",
                                            "PERMISSION_DENIED",
                                            "RESOURCE_EXHAUSTED",
                                            "FAILED_PRECONDITION",
                                            "ABORTED",
                                            "OUT_OF_RANGE",
                                            "UNIMPLEMENTED",
                                            "INTERNAL",
                                            "UNAVAILABLE",
                                            "DATA_LOSS",
                                            "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? k_names[code] : "UNKNOWN";
}

// The label of every call to a method no service here defines.
constexpr const char* k_unknown_method = "unknown";

class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(Metrics& metrics, std::string service, std::string method)
      : m_metrics(metrics), m_service(std::move(service)), m_method(std::move(method)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      m_metrics.count_request(m_service, m_method, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  Metrics& m_metrics;
  std::string m_service, m_method;
};

// The (service, method) labels of a call to `path` ("/kcache.v1.KCache/Compile"). Anyone may
// call any name, token or not: a name becomes a label only if it is a method this binary knows,
// so the label set (and /metrics, and GetStats) stays bounded.
std::pair<std::string, std::string> labels_of(std::string_view path) {
  auto slash = path.rfind('/');
  std::string service(slash == std::string_view::npos || slash == 0 ? "" : path.substr(1, slash - 1));
  std::string method(path.substr(slash == std::string_view::npos ? 0 : slash + 1));
  if (service.empty() || google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(service + "." + method) == nullptr) {
    return {k_unknown_method, k_unknown_method};
  }
  return {service, method};
}

class CountingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(Metrics& metrics) : m_metrics(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    auto [service, method] = labels_of(info->method() ? info->method() : "");
    return new CountingInterceptor(m_metrics, std::move(service), std::move(method));
  }

 private:
  Metrics& m_metrics;
};

// Label values escape backslash, quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// One histogram's samples; `labels` ("tier=\"hot\"" or empty) go before `le`.
void write_histogram(std::ostream& out, std::string_view name, const std::string& labels,
                     const google::protobuf::RepeatedPtrField<v1::HistogramBucket>& buckets, double sum) {
  std::string braces = labels.empty() ? "" : "{" + labels + "}";
  std::uint64_t count = 0;
  for (const v1::HistogramBucket& b : buckets) {
    out << name << "_bucket{" << labels << (labels.empty() ? "" : ",") << "le=\"";
    if (std::isinf(b.le())) out << "+Inf";
    else out << b.le();
    out << "\"} " << b.count() << "\n";
    count = b.count();
  }
  out << name << "_sum" << braces << ' ' << sum << "\n" << name << "_count" << braces << ' ' << count << "\n";
}

// Cumulative buckets from per-bucket `counts`, whose upper bounds are `bounds` and then +Inf.
template <std::size_t N>
void fill_buckets(const std::array<std::uint64_t, N + 1>& counts, const std::array<double, N>& bounds,
                  google::protobuf::RepeatedPtrField<v1::HistogramBucket>& out) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    v1::HistogramBucket* b = out.Add();
    b->set_le(i < N ? bounds[i] : INFINITY);
    b->set_count(cumulative);
  }
}

// Stats fields that are levels, not running totals.
bool is_gauge(const std::string& field) {
  return field == "entries" || field == "bytes" || field == "images" || field == "queued_jobs" ||
         field == "running_jobs" || field == "max_bytes" || field == "hot_cache_bytes" ||
         field == "remote_write_queue_depth" || field == "remote_write_queue_bytes" || field == "remote_breaker_open";
}

}  // namespace

void Metrics::count_request(const std::string& service, const std::string& method, int code) {
  std::lock_guard lock(m_mutex);
  ++m_requests[{service, method, code}];
}

void Metrics::count_call(std::string_view path, int code) {
  auto [service, method] = labels_of(path);
  count_request(service, method, code);
}

void Metrics::observe_compile(double seconds) {
  std::size_t bucket = 0;
  while (bucket < k_compile_buckets.size() && seconds > k_compile_buckets[bucket]) ++bucket;
  std::lock_guard lock(m_mutex);
  ++m_buckets[bucket];
  m_compile_seconds += seconds;
  ++m_compiles;
}

void Metrics::observe_tier(Tier tier, double seconds) {
  std::size_t bucket = 0;
  while (bucket < k_tier_buckets.size() && seconds > k_tier_buckets[bucket]) ++bucket;
  std::lock_guard lock(m_mutex);
  TierHistogram& h = m_tiers[static_cast<std::size_t>(tier)];
  ++h.buckets[bucket];
  h.seconds += seconds;
}

void Metrics::fill(v1::Stats& stats) const {
  std::lock_guard lock(m_mutex);
  for (const auto& [id, count] : m_requests) {
    v1::RequestCount* r = stats.add_requests();
    r->set_service(std::get<0>(id));
    r->set_method(std::get<1>(id));
    r->set_code(status_name(std::get<2>(id)));
    r->set_count(count);
  }
  fill_buckets(m_buckets, k_compile_buckets, *stats.mutable_compile_seconds());
  stats.set_compile_seconds_sum(m_compile_seconds);
  static constexpr std::array<const char*, 4> k_tier_names = {"hot", "local", "remote", "compile"};
  for (std::size_t t = 0; t < m_tiers.size(); ++t) {
    v1::TierLatency* out = stats.add_tier_seconds();
    out->set_tier(k_tier_names[t]);
    fill_buckets(m_tiers[t].buckets, k_tier_buckets, *out->mutable_buckets());
    out->set_sum(m_tiers[t].seconds);
  }
}

std::string Metrics::render(const v1::Stats& stats) {
  std::ostringstream out;
  out.precision(17);
  const google::protobuf::Descriptor* d = stats.GetDescriptor();
  const google::protobuf::Reflection* r = stats.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_UINT64 || f->is_repeated()) continue;
    bool gauge = is_gauge(f->name());
    std::string name = "kcache_" + f->name() + (gauge ? "" : "_total");
    out << "# HELP " << name << " kcache.v1.Stats." << f->name() << "\n";
    out << "# TYPE " << name << (gauge ? " gauge\n" : " counter\n");
    out << name << ' ' << r->GetUInt64(stats, f) << "\n";
  }
  out << "# HELP kcache_jail_info How tools run on peers' bytes: bwrap (jailed) or none; steps_unjailed=\"true\" "
         "where build steps run without a jail (--allow-unjailed-steps)\n"
      << "# TYPE kcache_jail_info gauge\n"
      << "kcache_jail_info{mode=\"" << label(stats.jail()) << "\",steps_unjailed=\""
      << (stats.steps_unjailed() ? "true" : "false") << "\"} 1\n";
  out << "# HELP kcache_hit_ratio Requests (Compiles and build steps) answered from the cache: hits / (hits + misses + "
         "coalesced)\n"
      << "# TYPE kcache_hit_ratio gauge\n"
      << "kcache_hit_ratio " << wire::hit_ratio(stats) << "\n";
  out << "# HELP kcache_requests_total gRPC calls by service, method and final status\n"
      << "# TYPE kcache_requests_total counter\n";
  for (const v1::RequestCount& rc : stats.requests()) {
    out << "kcache_requests_total{service=\"" << label(rc.service()) << "\",method=\"" << label(rc.method())
        << "\",code=\"" << rc.code() << "\"} " << rc.count() << "\n";
  }
  out << "# HELP kcache_steps_total Build steps (the compiler launcher's cicc, ptxas and host compiles) by tool "
         "and what became of them\n"
      << "# TYPE kcache_steps_total counter\n";
  for (const v1::StepCount& sc : stats.steps()) {
    const std::pair<const char*, std::uint64_t> outcomes[] = {{"hit", sc.hits()},       {"miss", sc.misses()},
                                                              {"coalesced", sc.coalesced()}, {"stored", sc.stored()},
                                                              {"failed", sc.failed()}};
    for (const auto& [outcome, count] : outcomes) {
      out << "kcache_steps_total{tool=\"" << label(sc.tool()) << "\",outcome=\"" << outcome << "\"} " << count << "\n";
    }
  }
  out << "# HELP kcache_launcher_uncacheable_total Compiles launchers ran without the cache, by reason\n"
      << "# TYPE kcache_launcher_uncacheable_total counter\n";
  for (const v1::ReasonCount& rc : stats.uncacheable()) {
    out << "kcache_launcher_uncacheable_total{reason=\"" << label(rc.reason()) << "\"} " << rc.count() << "\n";
  }
  out << "# HELP kcache_compile_duration_seconds Compile time on a worker\n"
      << "# TYPE kcache_compile_duration_seconds histogram\n";
  write_histogram(out, "kcache_compile_duration_seconds", "", stats.compile_seconds(), stats.compile_seconds_sum());
  out << "# HELP kcache_tier_duration_seconds How long an answer took, by the tier that gave it\n"
      << "# TYPE kcache_tier_duration_seconds histogram\n";
  for (const v1::TierLatency& t : stats.tier_seconds()) {
    write_histogram(out, "kcache_tier_duration_seconds", "tier=\"" + label(t.tier()) + "\"", t.buckets(), t.sum());
  }
  return out.str();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Metrics::interceptor_factory() {
  return std::make_unique<CountingFactory>(*this);
}

void add_metrics_route(httplib::Server& server, std::function<v1::Stats()> stats) {
  server.Get("/metrics", [stats = std::move(stats)](const httplib::Request&, httplib::Response& res) {
    // The snapshot takes the store's and the service's locks, which a compile may hold a while:
    // not for an event thread.
    if (!may_wait()) return defer();
    res.set_content(Metrics::render(stats()), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace kcache::server
