#include "net/http_request.hpp"

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

// ASCII letters compared without case, as HTTP compares header names.
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trimmed(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

// RFC 9110's tchar: what a header name is made of.
bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$&'*+-.^_`|~", c) != nullptr;
}

// A query cpp-httplib would read exactly as PlainGet::param does: items of one name and one value,
// neither empty, with nothing to decode.
bool plain_query(std::string_view query) {
  while (!query.empty()) {
    std::string_view item = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), item.size() + 1));
    auto eq = item.find('=');
    if (eq == 0 || eq == std::string_view::npos || eq + 1 == item.size() ||
        item.find('=', eq + 1) != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// The value of the first header `name` (lower case) in a header block, trimmed; empty if none.
std::string_view header_value(std::string_view headers, std::string_view name) {
  for (std::size_t line = headers.find("\r\n"); line != std::string_view::npos && line + 2 < headers.size();) {
    std::size_t next = headers.find("\r\n", line + 2);
    std::string_view field = headers.substr(line + 2, next - line - 2);
    line = next;
    auto colon = field.find(':');
    if (colon != std::string_view::npos && iequals(field.substr(0, colon), name)) return trimmed(field.substr(colon + 1));
  }
  return {};
}

// How to authenticate, on every 401 (RFC 9110, 11.6.1).
constexpr const char* k_www_authenticate = "Bearer realm=\"kcached\"";

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 421: return "Misdirected Request";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
  }
}

}  // namespace

std::optional<std::string_view> PlainGet::param(std::string_view name) const {
  for (std::string_view rest = query; !rest.empty();) {
    std::string_view item = rest.substr(0, rest.find('&'));
    rest.remove_prefix(std::min(rest.size(), item.size() + 1));
    auto eq = item.find('=');
    if (item.substr(0, eq) == name) return item.substr(eq + 1);
  }
  return std::nullopt;
}

std::optional<PlainGet> parse_plain_get(std::string_view head) {
  constexpr std::string_view k_version = " HTTP/1.1";
  std::size_t eol = head.find("\r\n");
  if (!head.starts_with("GET /") || eol == std::string_view::npos) return std::nullopt;
  std::string_view line = head.substr(0, eol);
  if (!line.ends_with(k_version)) return std::nullopt;
  std::string_view target = line.substr(4, line.size() - 4 - k_version.size());
  for (char c : target) {
    if (c <= ' ' || c >= 0x7f || c == '%' || c == '+' || c == '#') return std::nullopt;
  }
  PlainGet get;
  auto question = target.find('?');
  get.path = target.substr(0, question);
  if (question != std::string_view::npos) get.query = target.substr(question + 1);
  if (!plain_query(get.query)) return std::nullopt;
  bool seen_authorization = false, seen_connection = false;
  for (std::size_t pos = eol + 2;;) {
    std::size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) return std::nullopt;
    if (next == pos) break;  // the blank line
    std::string_view field = head.substr(pos, next - pos);
    pos = next + 2;
    auto colon = field.find(':');
    if (colon == 0 || colon == std::string_view::npos) return std::nullopt;
    std::string_view name = field.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char)) return std::nullopt;
    std::string_view value = trimmed(field.substr(colon + 1));
    for (char c : value) {
      if ((c < ' ' && c != '\t') || c >= 0x7f) return std::nullopt;
    }
    if (iequals(name, "authorization") && !std::exchange(seen_authorization, true)) get.authorization = value;
    if (iequals(name, "connection") && !std::exchange(seen_connection, true)) get.close = value == "close";
  }
  return get;
}

const FastRoute* Router::fast_route(std::string_view path) const {
  for (const auto& [prefix, route] : m_fast) {
    if (path.starts_with(prefix)) return &route;
  }
  return nullptr;
}

Router::Router() {
  set_default_headers({{"X-Content-Type-Options", "nosniff"}});
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 401 && !res.has_header("WWW-Authenticate")) res.set_header("WWW-Authenticate", k_www_authenticate);
  });
}

std::string Router::head_of(const httplib::Response& res, bool close) const {
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers) {
    if (!iequals(name, "connection") && !iequals(name, "keep-alive")) head += name + ": " + value + "\r\n";
  }
  if (!res.has_header("X-Content-Type-Options")) head += "X-Content-Type-Options: nosniff\r\n";
  if (res.status == 401 && !res.has_header("WWW-Authenticate")) {
    head += std::string("WWW-Authenticate: ") + k_www_authenticate + "\r\n";
  }
  if (!res.has_header("Content-Length")) head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  if (close) {
    head += "Connection: close\r\n";
  } else {
    head += "Keep-Alive: timeout=" + std::to_string(keep_alive_timeout_sec_) +
            ", max=" + std::to_string(keep_alive_max_count_) + "\r\n";
  }
  head += "\r\n";
  return head;
}

std::string Router::host_refusal(std::string_view host) const {
  // No Host at all: not a browser's request (browsers always send one), so no rebinding.
  if (m_hosts.empty() || host.empty()) return {};
  // The name without its port: "[::1]:7879", "127.0.0.1:7879", "farm.example:7879".
  std::string_view name = host;
  if (name.starts_with('[')) {
    name = name.substr(0, name.find(']') + 1);
  } else if (auto colon = name.rfind(':'); colon != std::string_view::npos) {
    name = name.substr(0, colon);
  }
  // A browser sends an address literal only where the page's URL names it: no rebinding.
  bool literal = name.starts_with('[') || (!name.empty() && name.find_first_not_of("0123456789.") == std::string_view::npos);
  if (literal || iequals(name, "localhost")) return {};
  for (const std::string& allowed : m_hosts) {
    // ".svc" allows every name that ends so (names no public zone can hand out).
    bool suffix = allowed.starts_with('.') && name.size() > allowed.size() &&
                  iequals(name.substr(name.size() - allowed.size()), allowed);
    if (suffix || iequals(name, allowed)) return {};
  }
  std::string names;
  for (const std::string& allowed : m_hosts) names += (names.empty() ? "" : ", ") + allowed;
  return "this listener answers no request for the host '" + std::string(host.substr(0, 200)) +
         "': it serves its addresses, localhost and " + names +
         " (--http-host adds a name; with --tokens-file, any name is served to a caller with a token)";
}

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
  if (req.method == "HEAD") owner.reset();
  set_shared_content(res, std::move(owner), bytes, content_type);
}

void set_shared_content(httplib::Response& res, std::shared_ptr<const void> owner, std::string_view bytes,
                        const char* content_type) {
  res.status = 200;
  res.set_header("Content-Type", content_type);
  res.set_header("Content-Length", std::to_string(bytes.size()));
  if (owner) t_shared = {std::move(owner), bytes};
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
    std::string_view name = field.substr(0, colon);
    std::string_view value = trimmed(field.substr(colon + 1));
    if (iequals(name, "transfer-encoding") ||
        (iequals(name, "content-length") && value.find_first_not_of('0') != std::string_view::npos)) {
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
         "X-Content-Type-Options: nosniff\r\n" +
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
    if (std::string refusal = router.host_refusal(header_value(std::string_view(in).substr(0, end), "host"));
        !refusal.empty()) {
      std::string answer = canned_answer(421, "Misdirected Request", refusal);
      sink.write(answer.data(), answer.size());
      return Next::close;
    }
    bool close = false, ok = true;
    bool last = ++answered >= k_max_requests_per_connection;
    t_deferred = false;
    t_shared = {};
    httplib::Response res;
    auto plain = parse_plain_get(std::string_view(in).substr(0, end));
    const FastRoute* route = plain ? router.fast_route(plain->path) : nullptr;
    if (route != nullptr && (*route)(*plain, ends, res)) {
      if (!t_deferred) {
        close = plain->close || last;
        std::string head = router.head_of(res, close);
        ok = sink.write(head.data(), head.size()) &&
             (t_shared.owner || res.body.empty() || sink.write(res.body.data(), res.body.size()));
      }
    } else {
      RequestStream stream(in, end, ends, sink);
      ok = router.answer(stream, last, close) && !stream.failed();
    }
    auto shared = std::exchange(t_shared, {});
    if (t_deferred) {  // as if never asked: the pool answers it again
      t_deferred = false;
      sink.drop_answer();
      --answered;
      return Next::defer;
    }
    if (ok && shared.owner && !sink.write_shared(shared.owner, shared.bytes)) ok = false;
    in.erase(0, end);
    if (!ok || close || last) return Next::close;
  }
  return Next::more;
}

}  // namespace kcache::server
