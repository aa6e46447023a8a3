// The HTTP/1.1 request path of the listeners (http.hpp) without sockets: where a request's header
// block ends, what refuses a request before it is parsed, and the answering of every complete
// request buffered on a connection through cpp-httplib's parser and router. The listener runs
// exactly this on what its event thread has read; fuzz/http_fuzzer.cpp feeds it any bytes.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

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

// cpp-httplib's parser and router, without its listener: process_request is protected.
class Router final : public httplib::Server {
 public:
  // Parses one request from `stream`, routes it and writes the answer. False when the
  // connection cannot go on; `close` is set when the request or `last` says to close it.
  bool answer(httplib::Stream& stream, bool last, bool& close) { return process_request(stream, last, close, {}); }
};

// The two ends of a connection, as handlers see them (the socket only for httplib::Stream).
struct Endpoints {
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;
  int fd = -1;
};

// Where answers go: the socket, under a deadline for each answer, in the listener; memory in the
// fuzzer.
class AnswerSink {
 public:
  virtual ~AnswerSink() = default;
  // Called before each request is answered (the listener starts that answer's deadline).
  virtual void start_answer() {}
  // Writes all of `data`; false once the connection has failed.
  virtual bool write(const char* data, std::size_t size) = 0;
};

// Answers every complete request at the start of `in` in order, through `router` to `sink`,
// erasing each from `in`: what is left is the start of the next. `answered` counts the
// connection's requests (the last one allowed is told to close). True when the connection may
// wait for more; false when it must be closed.
bool answer_requests(Router& router, std::string& in, std::size_t& answered, const Endpoints& ends,
                     AnswerSink& sink);

}  // namespace kcache::server
