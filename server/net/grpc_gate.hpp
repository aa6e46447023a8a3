// The gate in front of kcached's gRPC port (issue 29).
//
// gRPC 1.51, which Debian 12 ships, takes HTTP/2 as any peer sends it: one unauthenticated
// connection that opened streams and reset each at once (the "rapid reset" of CVE-2023-44487)
// made the synchronous server start 32,263 threads and hold 3 GB; idle connections were never
// closed and never capped; out of descriptors, its listener stopped accepting for good. gRPC's own
// mitigations came in 1.56-1.59 (a reset stream keeps counting against MAX_CONCURRENT_STREAMS
// until its handler finishes, and a connection that resets too fast gets GOAWAY); 1.51 has
// neither, and per-peer caps or an accept that survives EMFILE are not in gRPC at all.
//
// So kcached owns its gRPC port. gRPC serves on a Unix socket in a folder only kcached's user can
// enter, and this gate listens on --listen, terminates TLS (ALPN "h2", client certificates for
// mutual TLS), and passes each admitted connection's bytes both ways on its own Unix connection,
// reading the HTTP/2 frame headers as they go by (net/h2_frames.hpp) without keeping a payload:
//   - a connection costs gRPC nothing until its TLS handshake, the HTTP/2 preface and its first
//     SETTINGS have arrived, within GateLimits::handshake_time; the slowest of those still waiting
//     makes room for a new connection when the gate is full;
//   - connections are capped in total, per peer address, and by the descriptors kcached keeps
//     for itself (net/admission.hpp);
//   - frames that make the server work but carry no request (RST_STREAM, PING, SETTINGS,
//     PRIORITY, empty DATA) spend a per-connection token bucket; a connection that empties it is
//     sent GOAWAY (ENHANCE_YOUR_CALM) and cut, and its peer address is refused for a while;
//   - gRPC itself caps streams per connection, threads, memory, idle and over-age connections
//     (daemon.cpp's channel arguments).
// One event thread does all of this; it never blocks and never waits on gRPC.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "kcache/expected.hpp"
#include "net/tls.hpp"

namespace kcache::server::net {

class FdBudget;

struct GateLimits {
  std::size_t max_connections = 1024;
  std::size_t max_per_peer = 256;
  // From accept to the TLS handshake, the HTTP/2 preface and the first SETTINGS frame.
  std::chrono::milliseconds handshake_time{5000};
  // Frames that carry no request, per connection: this many at once, refilled at frame_rate per
  // second. A gRPC client sends a few (its SETTINGS, pings, a reset per cancelled call, all its
  // calls' at once when it gives up); the rapid-reset flood sent 45,000 a second.
  double frame_burst = 256;
  double frame_rate = 100;
  // A connection that passes frame_burst, or a header block past max_header_block, is cut (GOAWAY).
  // For `penalty` after, its address's new connections are slowed, not refused: admitted one
  // per admit_spacing (the rest wait, unread, within the per-peer cap) and on probation (an
  // eighth of the frame budget). So its other clients keep working while a flood costs it.
  std::chrono::milliseconds penalty{10000};
  std::chrono::milliseconds admit_spacing{100};
  // One request's header block (HEADERS and its CONTINUATIONs): gRPC's own default is 8 KiB of
  // metadata; a CONTINUATION flood sent 281 MB of one.
  std::size_t max_header_block = 64 << 10;
  std::size_t buffer_bytes = 256 << 10;      // per direction and connection, not yet taken
  int backlog = 4096;
  // gRPC's limit on a request message (0: not watched). A call whose first message declares more
  // is reported to oversized_message with its path ("/kcache.v1.KCache/Compile"): gRPC refuses it
  // (RESOURCE_EXHAUSTED) before any handler or interceptor sees the call, so only the gate can
  // count it (net/grpc_calls.hpp).
  std::uint64_t max_message_bytes = 0;
  std::function<void(std::string_view path)> oversized_message;
};

class GrpcGate {
 public:
  // Listens on HOST:PORT (port 0: a free one) and starts its event thread. gRPC is to serve on
  // upstream_address() (a "unix:" address in a private folder the gate made and removes).
  static Expected<std::unique_ptr<GrpcGate>> start(const std::string& host, int port, const std::string& what,
                                                   const TlsFiles& tls, const GateLimits& limits, FdBudget& budget);
  ~GrpcGate();  // cuts every connection, joins the thread, removes the private folder

  int port() const;
  std::string upstream_address() const;  // for grpc::ServerBuilder::AddListeningPort
  // Accepts no more connections; those open go on (shutdown lets their calls finish).
  void stop_accepting();
  // Waits, up to `deadline`, until no reply is under way: every stream gRPC began to answer has
  // ended and passed the gate, and nothing more has come from gRPC for a moment. For shutdown,
  // before gRPC's own: a unary call's reply leaves gRPC after its handler returns, and gRPC's
  // shutdown deadline cuts the connections with what it has not sent (a long reply to a client
  // slow to read). False: the deadline passed first.
  bool await_replies(std::chrono::steady_clock::time_point deadline);
  // Waits, up to `deadline`, until every byte gRPC wrote has been passed on: each connection has
  // closed, or has no gRPC end yet. For shutdown after gRPC's own, whose last replies may still be
  // in the gate: destroying it at once could cut a reply just answered (the client would see the
  // connection drop and retry a call that was done). False: the deadline passed first.
  bool drain(std::chrono::steady_clock::time_point deadline);

  class Impl;

 private:
  explicit GrpcGate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// The client address in a gRPC peer string the gate made ("unix-abstract:kcached-gate ...
// ipv4:10.0.0.5:51234" becomes "ipv4:10.0.0.5:51234"); any other peer string as it is.
std::string client_of_peer(const std::string& grpc_peer);

}  // namespace kcache::server::net
