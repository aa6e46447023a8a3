#include "http_request.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

namespace kcache::server {
namespace {

thread_local bool t_event_thread = false;
thread_local bool t_deferred = false;
// The body a handler set with set_shared_content, sent after cpp-httplib's head of the answer.
thread_local struct {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
} t_shared;

// A request for cpp-httplib's parser: reads end where the request's headers end (so a pipelined
// request stays for the next round), writes go to the sink.
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(const std::string& in, std::size_t end, const Endpoints& ends, AnswerSink& sink)
      : m_in(in), m_end(end), m_ends(ends), m_sink(sink) {}

  bool failed() const { return m_failed; }

  bool is_readable() const override { return m_pos < m_end; }
  bool is_writable() const override { return !m_failed; }
  ssize_t read(char* ptr, size_t size) override {
    std::size_t n = std::min(size, m_end - m_pos);
    std::memcpy(ptr, m_in.data() + m_pos, n);
    m_pos += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (m_failed || !m_sink.write(ptr, size)) m_failed = true;
    return m_failed ? -1 : static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = m_ends.peer_ip;
    port = m_ends.peer_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = m_ends.local_ip;
    port = m_ends.local_port;
  }
  socket_t socket() const override { return m_ends.fd; }

 private:
  const std::string& m_in;
  std::size_t m_pos = 0;
  const std::size_t m_end;
  const Endpoints& m_ends;
  AnswerSink& m_sink;
  bool m_failed = false;
};

}  // namespace

bool may_wait() { return !t_event_thread; }
void defer() { t_deferred = true; }
void become_event_thread() { t_event_thread = true; }

void set_shared_content(const httplib::Request& req, httplib::Response& res, std::shared_ptr<const void> owner,
                        std::string_view bytes, const char* content_type) {
  // cpp-httplib's content providers write nothing through a Router that never listened (they
  // stop once the server "is shutting down"), so the body goes around it: cpp-httplib writes the
  // head, with this length, and answer_requests the body. The whole body, always: a Range
  // header is ignored, as RFC 9110 allows (this Request is cpp-httplib's own, not const).
  const_cast<httplib::Request&>(req).ranges.clear();
  res.status = 200;
  res.set_header("Content-Type", content_type);
  res.set_header("Content-Length", std::to_string(bytes.size()));
  if (req.method == "HEAD") return;
  t_shared = {std::move(owner), bytes};
}

std::size_t header_end(std::string_view in) {
  auto pos = in.find("\r\n\r\n");
  return pos == std::string_view::npos ? 0 : pos + 4;
}

std::pair<int, std::string> request_problem(std::string_view headers) {
  std::size_t line = headers.find("\r\n");
  while (line != std::string_view::npos && line + 2 < headers.size()) {
    std::size_t next = headers.find("\r\n", line + 2);
    std::string_view field = headers.substr(line + 2, next - line - 2);
    line = next;
    auto colon = field.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(field.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string_view value = field.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (name == "transfer-encoding" || (name == "content-length" && value.find_first_not_of('0') != std::string_view::npos)) {
      return {413, "this API takes GET requests without a body"};
    }
  }
  return {0, {}};
}

Verdict judge_request(std::string_view in, std::size_t max_header_bytes) {
  std::size_t end = header_end(in);
  if (end == 0) {
    if (in.size() <= max_header_bytes) return {};
    return {Verdict::refuse, 431, "Request Header Fields Too Large",
            "the request's headers pass " + std::to_string(max_header_bytes) + " bytes"};
  }
  if (auto [status, message] = request_problem(in.substr(0, end)); status != 0) {
    return {Verdict::refuse, status, "Payload Too Large", std::move(message)};
  }
  return {Verdict::answer, 0, {}, {}};
}

std::string canned_answer(int status, const std::string& reason, const std::string& message) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: text/plain; charset=utf-8\r\n" +
         "Content-Length: " + std::to_string(message.size() + 1) + "\r\nConnection: close\r\n\r\n" + message + "\n";
}

Next answer_requests(Router& router, std::string& in, std::size_t& answered, const Endpoints& ends,
                     AnswerSink& sink) {
  // Pipelined requests are answered in order, each with its own write deadline.
  for (std::size_t end = header_end(in); end != 0 && !sink.full(); end = header_end(in)) {
    sink.start_answer();
    if (auto [status, message] = request_problem(std::string_view(in).substr(0, end)); status != 0) {
      std::string answer = canned_answer(status, "Payload Too Large", message);
      sink.write(answer.data(), answer.size());
      return Next::close;
    }
    RequestStream stream(in, end, ends, sink);
    bool close = false;
    bool last = ++answered >= k_max_requests_per_connection;
    t_deferred = false;
    bool ok = router.answer(stream, last, close);
    auto shared = std::exchange(t_shared, {});
    if (t_deferred) {  // as if never asked: the pool answers it again
      t_deferred = false;
      sink.drop_answer();
      --answered;
      return Next::defer;
    }
    if (ok && !stream.failed() && shared.owner && !sink.write_shared(shared.owner, shared.bytes)) ok = false;
    in.erase(0, end);
    if (!ok || close || last || stream.failed()) return Next::close;
  }
  return Next::more;
}

}  // namespace kcache::server
