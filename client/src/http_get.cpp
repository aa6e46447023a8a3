#include "http_get.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "file_names.hpp"

namespace kcache {
namespace {

constexpr std::size_t k_max_header_bytes = 64u << 10;

Error unavailable(const std::string& what) { return make_error(ErrorCode::k_unavailable, what); }

// A header value, quoted and cut short for a message.
std::string shown(std::string_view value) { return quote_for_message(value); }

char lower_case(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Whether header names `a` and `b` are the same, in any case (ASCII).
bool name_is(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower_case(a[i]) != lower_case(b[i])) return false;
  }
  return true;
}

const HttpReply::Field* find_field(const HttpReply& reply, std::string_view name) {
  for (const HttpReply::Field& f : reply.fields) {
    if (name_is(std::string_view(reply.head).substr(f.name_at, f.name_size), name)) return &f;
  }
  return nullptr;
}

// The status line and headers of a reply (`head`: up to the empty line, exclusive, at most
// k_max_header_bytes). Strict: the status is three digits after HTTP/1.0 or HTTP/1.1, every
// header line has a name and a colon, and a header that decides framing (Content-Length) may
// appear once.
Expected<HttpReply> parse_head(std::string head) {
  HttpReply reply;
  reply.head = std::move(head);
  const std::string_view text = reply.head;
  std::size_t line_end = text.find("\r\n");
  std::string_view status_line = text.substr(0, line_end);
  auto digit = [&](std::size_t i) { return status_line[i] >= '0' && status_line[i] <= '9'; };
  bool ok = (status_line.starts_with("HTTP/1.1 ") || status_line.starts_with("HTTP/1.0 ")) &&
            status_line.size() >= 12 && digit(9) && digit(10) && digit(11) &&
            (status_line.size() == 12 || status_line[12] == ' ');
  if (!ok) return unavailable("not an HTTP reply: " + shown(status_line));
  reply.version = std::string(status_line.substr(0, 8));
  reply.status = (status_line[9] - '0') * 100 + (status_line[10] - '0') * 10 + (status_line[11] - '0');
  if (reply.status < 200) return unavailable("unexpected HTTP status " + std::to_string(reply.status));
  reply.fields.reserve(16);
  while (line_end != std::string_view::npos) {
    std::size_t start = line_end + 2;
    line_end = text.find("\r\n", start);
    std::string_view line = text.substr(start, line_end == std::string_view::npos ? std::string_view::npos : line_end - start);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 || line.find_first_of(" \t") < colon) {
      return unavailable("malformed HTTP header line " + shown(line));
    }
    std::size_t value = line.find_first_not_of(" \t", colon + 1);
    std::size_t value_end = line.find_last_not_of(" \t");
    std::string_view name = line.substr(0, colon);
    if (name_is(name, "content-length") && find_field(reply, "content-length") != nullptr) {
      return unavailable("HTTP reply with more than one Content-Length");
    }
    auto at = static_cast<std::uint32_t>(start);  // the head is at most k_max_header_bytes
    reply.fields.push_back(
        {at, static_cast<std::uint32_t>(colon),
         value == std::string_view::npos ? at : at + static_cast<std::uint32_t>(value),
         value == std::string_view::npos ? 0 : static_cast<std::uint32_t>(value_end + 1 - value)});
  }
  return reply;
}

// The length of the body that follows `reply`'s head: its Content-Length, a plain decimal number
// up to k_max_http_body_bytes. No Content-Length or any Transfer-Encoding is refused: kcached
// always sends the length, and guessing where a body ends would misread the next reply.
Expected<std::uint64_t> body_length(const HttpReply& reply) {
  if (reply.has_header("transfer-encoding")) {
    return unavailable("HTTP reply with Transfer-Encoding " + shown(reply.header("transfer-encoding")) +
                       ": only Content-Length bodies are read here");
  }
  if (!reply.has_header("content-length")) {
    return unavailable("HTTP reply without Content-Length: its end cannot be known");
  }
  std::string_view text = reply.header("content-length");
  std::uint64_t n = 0;
  bool ok = !text.empty() && text.size() <= 19;  // 19 digits cannot overflow 64 bits
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || n > k_max_http_body_bytes) {
    return unavailable("HTTP Content-Length " + shown(text) + " is not a byte count up to " +
                       std::to_string(k_max_http_body_bytes));
  }
  return n;
}

}  // namespace

std::string_view HttpReply::header(std::string_view name) const {
  const Field* f = find_field(*this, name);
  return f == nullptr ? std::string_view() : std::string_view(head).substr(f->value_at, f->value_size);
}

bool HttpReply::has_header(std::string_view name) const { return find_field(*this, name) != nullptr; }

Expected<HttpConnection> HttpConnection::open(const std::string& host_in, int port, std::chrono::milliseconds timeout) {
  std::string host = host_in;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    HttpConnection c(fd, host_in, timeout);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (!c.wait(POLLOUT) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last_error = err != 0 ? std::strerror(err) : "timed out";
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Connected: from here the socket blocks, with the timeout on each read and write, so a
    // reply costs one recv rather than recv, poll and recv again.
    timeval limit{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0 ||
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    ::freeaddrinfo(found);
    return c;
  }
  ::freeaddrinfo(found);
  return unavailable("cannot connect to " + host_in + ":" + std::to_string(port) + ": " + last_error);
}

HttpConnection::~HttpConnection() {
  if (m_fd >= 0) ::close(m_fd);
}

Expected<void> HttpConnection::wait(short events) {
  pollfd p{m_fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, static_cast<int>(m_timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return unavailable("timed out");
  if (rc < 0) return unavailable(std::strerror(errno));
  return {};
}

Expected<std::size_t> HttpConnection::receive(char* into, std::size_t size) {
  for (;;) {
    ssize_t n = ::recv(m_fd, into, size, 0);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) return unavailable("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return unavailable("timed out");  // SO_RCVTIMEO
    return unavailable(std::strerror(errno));
  }
}

Expected<void> HttpConnection::fill() {
  char chunk[16384];  // a head, and what came with it
  auto n = receive(chunk, sizeof chunk);
  if (!n) return n.error();
  m_buffer.append(chunk, *n);
  return {};
}

Expected<HttpReply> HttpConnection::get(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& headers) {
  if (!m_reusable) return unavailable("this HTTP connection is not reusable after an earlier failed or closing reply");
  auto reply = exchange(path, headers);
  if (!reply) {
    m_reusable = false;  // what is left unread on it would be taken for the next reply
    return reply;
  }
  if (!m_buffer.empty() || reply->header("connection") == "close" || reply->version == "HTTP/1.0") m_reusable = false;
  return reply;
}

Expected<HttpReply> HttpConnection::exchange(const std::string& path,
                                             const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string request;
  request.reserve(64 + path.size() + m_host.size() + 256 * headers.size());
  request.append("GET ").append(path).append(" HTTP/1.1\r\nHost: ").append(m_host).append("\r\n");
  for (const auto& [name, value] : headers) request.append(name).append(": ").append(value).append("\r\n");
  request.append("\r\n");
  for (std::size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(m_fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return unavailable("timed out");  // SO_SNDTIMEO
    } else if (n < 0 && errno != EINTR) {
      return unavailable(std::strerror(errno));
    }
  }

  std::size_t end = 0;
  while ((end = m_buffer.find("\r\n\r\n")) == std::string::npos) {
    if (m_buffer.size() > k_max_header_bytes) return unavailable("HTTP headers too long");
    if (auto more = fill(); !more) return more.error();
  }
  if (end > k_max_header_bytes) return unavailable("HTTP headers too long");
  std::string head = m_buffer.substr(0, end);
  m_buffer.erase(0, end + 4);
  auto reply = parse_head(std::move(head));
  if (!reply) return reply;
  auto length = body_length(*reply);
  if (!length) return length.error();
  // The body goes straight into its string: what came with the head, then the rest, read where
  // it belongs and never past its end (the next reply's bytes stay in the socket). The string
  // grows as bytes arrive, not to a length a peer merely claims.
  std::string& body = reply->body;
  std::size_t have = std::min<std::size_t>(m_buffer.size(), *length);
  body.assign(m_buffer, 0, have);
  m_buffer.erase(0, have);
  while (have < *length) {
    if (body.size() == have) body.resize(std::min<std::size_t>(*length, std::max<std::size_t>(2 * have, 256 << 10)));
    auto n = receive(body.data() + have, body.size() - have);
    if (!n) return n.error();
    have += *n;
  }
  return reply;
}

}  // namespace kcache
