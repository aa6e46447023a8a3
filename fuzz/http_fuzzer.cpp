// libFuzzer target: the HTTP request path of kcached's listeners (server/net/http_request.hpp), fed
// raw bytes as a connection would send them: the event thread's verdict on what has arrived
// (wait, answer, or refuse with 413/431), then the pool's answering of every complete request,
// pipelined ones included, through cpp-httplib's parser and a router with the image API's route
// patterns (server/api/http_api.cpp; the handlers here stand in for the store). Any input must
// end in answers that are HTTP/1.1 and a connection kept or closed, never a crash, a sanitizer
// report or an exception.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "net/http_request.hpp"

namespace {

using kcache::server::Router;

constexpr std::size_t k_max_header_bytes = 16 << 10;  // HttpLimits' default

class MemorySink final : public kcache::server::AnswerSink {
 public:
  bool write(const char* data, std::size_t size) override {
    m_out.append(data, size);
    return m_out.size() < (1U << 20);  // a peer that stops reading, past 1 MiB
  }
  const std::string& out() const { return m_out; }

 private:
  std::string m_out;
};

Router& router() {
  static Router* r = [] {
    auto* made = new Router();
    made->set_keep_alive_max_count(kcache::server::k_max_requests_per_connection);
    made->Get("/v1/fingerprint", [](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization").empty()) {
        res.status = 401;
        res.set_header("X-Kcache-Error", "UNAUTHENTICATED");
        return;
      }
      res.set_header("X-Kcache-Fingerprint", std::string(64, '0'));
      res.set_content(std::string(64, '0') + "\n", "text/plain");
    });
    // The fast route takes plain requests first; one that declines leaves them to the route below.
    made->fast_get("/v1/select/", [](const kcache::server::PlainGet& req, const kcache::server::Endpoints&,
                                     httplib::Response& res) {
      if (req.param("decline")) return false;
      auto body = std::make_shared<const std::string>(std::string(req.path) + std::string(req.authorization));
      res.set_header("X-Kcache-Image", std::string(req.param("kind").value_or("none")));
      if (req.param("error")) {
        res.status = 404;
        res.set_content("not found\n", "text/plain");
      } else {
        kcache::server::set_shared_content(res, body, *body, "application/octet-stream");
      }
      return true;
    });
    made->Get(R"(/v1/select/(device|host)/([^/]+)/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
      std::string body = req.matches[1].str() + req.matches[2].str() + req.matches[3].str();
      if (req.has_param("kind")) body += req.get_param_value("kind");
      res.set_header("X-Kcache-Image", body);
      res.set_content(body, "application/octet-stream");
    });
    made->Get(R"(/v1/(device|host)/([^/]+)/([^/]+)/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
      std::string compile = req.get_header_value("X-Kcache-Compile");
      res.set_header("X-Kcache-Sha256", req.matches[2].str());
      // As the image API answers: a shared body, sent after cpp-httplib's head.
      auto body = std::make_shared<const std::string>(req.matches[3].str() + req.matches[4].str() + compile);
      kcache::server::set_shared_content(req, res, body, *body, "application/octet-stream");
    });
    return made;
  }();
  return *r;
}

}  // namespace

// The first byte sets how the rest arrives: in reads of 1 to 256 bytes, as the event thread reads.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t read_size = static_cast<std::size_t>(data[0]) + 1;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  kcache::server::Endpoints ends{"127.0.0.1", "127.0.0.1", 40000, 8080, -1};
  MemorySink sink;
  std::string in;
  std::size_t answered = 0;
  bool open = true;
  while (open && !bytes.empty()) {
    // The listener reads until twice the header limit, then judges.
    std::size_t n = std::min({read_size, bytes.size(), 2 * k_max_header_bytes - std::min(in.size(), 2 * k_max_header_bytes)});
    if (n == 0) n = 1;
    in.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
    auto verdict = kcache::server::judge_request(in, k_max_header_bytes);
    if (verdict.next == kcache::server::Verdict::wait) continue;
    if (verdict.next == kcache::server::Verdict::refuse) {
      std::string answer = kcache::server::canned_answer(verdict.status, verdict.reason, verdict.message);
      sink.write(answer.data(), answer.size());
      break;
    }
    // Not an event thread: no handler defers.
    open = kcache::server::answer_requests(router(), in, answered, ends, sink) == kcache::server::Next::more;
  }
  if (!sink.out().empty() && !sink.out().starts_with("HTTP/1.1 ")) __builtin_trap();
  return 0;
}
