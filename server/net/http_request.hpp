// The HTTP/1.1 request path of the listeners (http.hpp) without sockets: where a request's header
// block ends, what refuses a request before it is parsed, and the answering of every complete
// request buffered on a connection through cpp-httplib's parser and router. The listener runs
// exactly this on what its event thread has read; fuzz/http_fuzzer.cpp feeds it any bytes.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kcache::server {

// Requests on one kept-alive connection before it is closed: a library client keeps its own.
inline constexpr std::size_t k_max_requests_per_connection = 100000;

// Where the header block of the request at the start of `in` ends (after its blank line), or 0
// while it is incomplete.
std::size_t header_end(std::string_view in);

// Why the request whose header block is `headers` cannot be answered, as a status and a message;
// 0 when it can. Every route is a GET: a body (Content-Length above 0, any Transfer-Encoding) is
// refused before a byte of it is read.
std::pair<int, std::string> request_problem(std::string_view headers);

// What the event thread does with what a connection has sent so far (`in`): wait for more, hand
// the complete request at its start to a pool thread, or refuse it (status, reason, message) and
// close: 431 once `max_header_bytes` pass without the end of the headers, 413 for a body.
struct Verdict {
  enum Next { wait, answer, refuse } next = wait;
  int status = 0;
  std::string reason, message;
};
Verdict judge_request(std::string_view in, std::size_t max_header_bytes);

// A whole answer that closes the connection, for requests refused before routing.
std::string canned_answer(int status, const std::string& reason, const std::string& message);

// The two ends of a connection, as handlers see them (the socket only for httplib::Stream).
struct Endpoints {
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;
  int fd = -1;
};

// A GET plain enough to be answered without cpp-httplib's parser: the hot routes' requests, as
// kcache's clients send them. cpp-httplib spends more on a request than the rest of a hit in
// memory does (a regex per route, a header map, a stringstream for each answer's Keep-Alive).
struct PlainGet {
  std::string_view path;           // the target up to '?', which has no escapes to decode
  std::string_view query;          // after '?', or empty
  std::string_view authorization;  // the first Authorization header's value, or empty
  bool close = false;              // Connection: close
  // The value of the first `name`=... in the query, if any (cpp-httplib's get_param_value).
  std::optional<std::string_view> param(std::string_view name) const;
};

// The request whose header block is `head` (request line to the blank line), when it is a GET by
// HTTP/1.1 whose target is an origin path with no '%', '+' or '#' and whose header lines are each
// a token, a colon and a value of visible characters. Anything else is nullopt, for cpp-httplib.
std::optional<PlainGet> parse_plain_get(std::string_view head);

// A route for PlainGet requests: it answers into `res` (status, headers, and content or
// set_shared_content) and returns true, or returns false, having set nothing, for cpp-httplib's
// routes to answer the request as they would any other.
using FastRoute = std::function<bool(const PlainGet& req, const Endpoints& ends, httplib::Response& res)>;

// cpp-httplib's parser and router, without its listener (process_request is protected), with
// fast routes tried first.
class Router final : public httplib::Server {
 public:
  // Every answer says X-Content-Type-Options: nosniff, and every 401 how to authenticate
  // (WWW-Authenticate: Bearer), whichever route wrote it.
  Router();
  // Parses one request from `stream`, routes it and writes the answer. False when the
  // connection cannot go on; `close` is set when the request or `last` says to close it.
  bool answer(httplib::Stream& stream, bool last, bool& close) { return process_request(stream, last, close, {}); }

  // Tries `route` first for every PlainGet whose path starts with `prefix`.
  void fast_get(std::string prefix, FastRoute route) { m_fast.emplace_back(std::move(prefix), std::move(route)); }
  // The fast route for `path`, or null.
  const FastRoute* fast_route(std::string_view path) const;

  // The head of `res` as cpp-httplib would write it, with the same Keep-Alive terms, or
  // Connection: close when `close`; Content-Length is `res`'s or its body's length.
  std::string head_of(const httplib::Response& res, bool close) const;

  // Answers only requests whose Host names one of `names` (without a port, any case; a name that
  // starts with '.' allows every name ending so), an IP address, or localhost; the others get 421. Empty (the default): any Host. Against DNS
  // rebinding, where a listener takes requests without a token.
  void allow_hosts(std::vector<std::string> names) { m_hosts = std::move(names); }
  // Why a request whose Host header is `host` (empty: none) is not answered; empty when it is.
  std::string host_refusal(std::string_view host) const;

 private:
  std::vector<std::pair<std::string, FastRoute>> m_fast;
  std::vector<std::string> m_hosts;
};

// Where answers go: memory first on an event thread (sent from there without blocking), the
// socket under a deadline for each answer on a pool thread, memory in the fuzzer.
class AnswerSink {
 public:
  virtual ~AnswerSink() = default;
  // Called before each request is answered (the listener starts that answer's deadline).
  virtual void start_answer() {}
  // Writes all of `data`; false once the connection has failed.
  virtual bool write(const char* data, std::size_t size) = 0;
  // Writes `bytes`, which `owner` keeps alive and unchanged: a sink that keeps answers to send
  // them later keeps a reference instead of a copy (set_shared_content).
  virtual bool write_shared(const std::shared_ptr<const void>& /*owner*/, std::string_view bytes) {
    return write(bytes.data(), bytes.size());
  }
  // Forgets what was written since start_answer(), for a request passed to a pool thread
  // (defer()); only a sink that has not sent it yet is ever asked to.
  virtual void drop_answer() {}
  // Whether it holds enough unsent answers that pipelined requests should wait for them to go.
  virtual bool full() const { return false; }
};

// Handlers run first on an event thread, which must never wait: may_wait() is false there, and a
// handler whose answer needs a wait (a read from disk or from the remote tier) calls defer() and
// returns. What it set is then dropped and the request answered again on a pool thread, where
// may_wait() is true (as on any thread that is not an event thread: the fuzzer's).
bool may_wait();
void defer();
// For the listener: marks the calling thread as an event thread.
void become_event_thread();

// Answers `req` with 200 and the body `bytes`, which `owner` keeps alive and unchanged (an image
// in the hot cache): the listener sends them from where they are, without copying them.
void set_shared_content(const httplib::Request& req, httplib::Response& res, std::shared_ptr<const void> owner,
                        std::string_view bytes, const char* content_type);
// The same for a fast route's answer (a PlainGet is never a HEAD and asks no range).
void set_shared_content(httplib::Response& res, std::shared_ptr<const void> owner, std::string_view bytes,
                        const char* content_type);

// What answer_requests leaves the connection to do.
enum class Next {
  more,   // wait for more requests (any left in `in` are incomplete, or wait for a full sink)
  close,  // close it, once what the sink holds is sent
  defer,  // answer the request at the start of `in` on a pool thread
};

// Answers every complete request at the start of `in` in order, through `router` to `sink`,
// erasing each from `in`: what is left is the start of the next. `answered` counts the
// connection's requests (the last one allowed is told to close). Stops early, with Next::more,
// once the sink is full.
Next answer_requests(Router& router, std::string& in, std::size_t& answered, const Endpoints& ends,
                     AnswerSink& sink);

}  // namespace kcache::server
