// The gRPC gate's parts without a daemon: the HTTP/2 frame reader, accept(2) that survives
// running out of descriptors, and the gate's drain at shutdown before a Unix listener standing
// for gRPC (server/net/).
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "net/admission.hpp"
#include "net/grpc_calls.hpp"
#include "net/grpc_gate.hpp"
#include "net/h2_frames.hpp"
#include "test_support.hpp"

namespace kcache::server::net {
namespace {

std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream, const std::string& payload) {
  std::uint32_t n = static_cast<std::uint32_t>(payload.size());
  std::string f = {static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n), static_cast<char>(type),
                   static_cast<char>(flags), static_cast<char>(stream >> 24), static_cast<char>(stream >> 16),
                   static_cast<char>(stream >> 8), static_cast<char>(stream)};
  return f + payload;
}

TEST(H2FrameReader, ReportsEveryFrameHeaderHoweverTheBytesAreCut) {
  std::string stream = std::string(k_h2_client_preface) + frame(0x4, 0, 0, std::string(6, '\0')) +
                       frame(0x1, 0x4, 1, "headers") + frame(0x0, 0x1, 1, std::string(70000, 'x')) +
                       frame(0x3, 0, 1, std::string(4, '\0')) + frame(0x6, 0x1, 0, std::string(8, '\0'));
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{9}, std::size_t{4096}, stream.size()}) {
    H2FrameReader reader(true);
    std::vector<H2Frame> seen;
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      ASSERT_TRUE(reader.feed(std::string_view(stream).substr(at, piece), [&](const H2Frame& f) {
        seen.push_back(f);
        return true;
      }));
    }
    ASSERT_EQ(seen.size(), 5u) << "pieces of " << piece;
    EXPECT_TRUE(seen[0].is(H2Type::settings));
    EXPECT_EQ(seen[0].length, 6u);
    EXPECT_TRUE(seen[1].is(H2Type::headers));
    EXPECT_EQ(seen[1].stream, 1u);
    EXPECT_EQ(seen[2].length, 70000u);
    EXPECT_TRUE(seen[3].is(H2Type::rst_stream));
    EXPECT_EQ(seen[4].flags, k_h2_flag_ack);
    EXPECT_EQ(reader.offset(), stream.size());
    EXPECT_EQ(reader.boundary(), stream.size());
  }
}

TEST(H2FrameReader, TheBoundaryStaysBeforeAFrameNotYetWhole) {
  H2FrameReader reader(false);  // a server's bytes: no preface
  std::string first = frame(0x4, 0, 0, "");
  std::string data = frame(0x0, 0, 1, std::string(100, 'd'));
  ASSERT_TRUE(reader.feed(first + data.substr(0, 50), [](const H2Frame&) { return true; }));
  EXPECT_EQ(reader.boundary(), first.size());
  ASSERT_TRUE(reader.feed(data.substr(50), [](const H2Frame&) { return true; }));
  EXPECT_EQ(reader.boundary(), first.size() + data.size());
}

TEST(H2FrameReader, AWrongPrefaceIsNotHttp2AndAStopIsFinal) {
  H2FrameReader http1(true);
  EXPECT_FALSE(http1.feed("GET / HTTP/1.1\r\n\r\n", [](const H2Frame&) { return true; }));
  H2FrameReader stopped(true);
  std::string two = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x3, 0, 1, std::string(4, '\0'));
  int calls = 0;
  EXPECT_FALSE(stopped.feed(two, [&](const H2Frame&) { return ++calls < 1; }));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(stopped.feed(frame(0x4, 0, 0, ""), [&](const H2Frame&) { return ++calls > 0; }));
  EXPECT_EQ(calls, 1);
}

TEST(H2FrameReader, GoawayIsAFrameItReadsBack) {
  std::string goaway = h2_goaway(7, k_h2_enhance_your_calm, "calm");
  H2FrameReader reader(false);
  H2Frame seen;
  ASSERT_TRUE(reader.feed(goaway, [&](const H2Frame& f) {
    seen = f;
    return true;
  }));
  EXPECT_TRUE(seen.is(H2Type::goaway));
  EXPECT_EQ(seen.length, 12u);
  EXPECT_EQ(goaway.substr(9, 8), std::string("\0\0\0\x07\0\0\0\x0b", 8));
}

int listening_socket(int& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 64);
  socklen_t length = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  port = ntohs(a.sin_port);
  return fd;
}

// Out of descriptors, the accepter still takes connections off the backlog (closing them), so
// an event loop does not spin on a listener that stays readable; with descriptors back, it
// accepts again.
// A gRPC client's side of a connection, its header blocks made by nghttp2's HPACK encoder, which
// indexes what it sent before (a second call's :path is then one byte naming the table entry).
class GrpcClientBytes {
 public:
  GrpcClientBytes() { nghttp2_hd_deflate_new(&m_deflater, 4096); }
  ~GrpcClientBytes() { nghttp2_hd_deflate_del(m_deflater); }

  std::string header_block(const std::string& path) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "127.0.0.1"},
        {"content-type", "application/grpc"}, {"te", "trailers"}};
    std::vector<nghttp2_nv> nva;
    for (auto& [name, value] : fields) {
      nva.push_back({reinterpret_cast<std::uint8_t*>(name.data()), reinterpret_cast<std::uint8_t*>(value.data()),
                     name.size(), value.size(), NGHTTP2_NV_FLAG_NONE});
    }
    std::string out(nghttp2_hd_deflate_bound(m_deflater, nva.data(), nva.size()), '\0');
    auto n = nghttp2_hd_deflate_hd(m_deflater, reinterpret_cast<std::uint8_t*>(out.data()), out.size(), nva.data(),
                                   nva.size());
    out.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
    return out;
  }

 private:
  nghttp2_hd_deflater* m_deflater = nullptr;
};

// The 5-byte gRPC prefix of a message of `length` bytes, and `body` bytes of it.
std::string message(std::uint32_t length, std::size_t body) {
  std::string m = {0, static_cast<char>(length >> 24), static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                   static_cast<char>(length)};
  return m + std::string(body, 'm');
}

// Feeds `bytes` through a frame reader into a watcher, `cut` bytes at a time.
std::vector<DeclaredMessage> watch(const std::string& bytes, std::size_t cut, bool* stopped = nullptr) {
  H2FrameReader reader(true);
  GrpcCallWatcher calls;
  std::vector<DeclaredMessage> out;
  for (std::size_t at = 0; at < bytes.size(); at += cut) {
    reader.feed(
        std::string_view(bytes).substr(at, cut),
        [&](const H2Frame& f) {
          calls.frame(f);
          return true;
        },
        [&](const H2Frame& f, std::string_view piece) {
          if (auto d = calls.payload(f, piece)) out.push_back(*d);
        });
  }
  if (stopped != nullptr) *stopped = calls.stopped();
  return out;
}

TEST(GrpcCallWatcher, NamesEachCallsMethodAndTheLengthItsMessageDeclares) {
  GrpcClientBytes client;
  // In the order sent: each block may name entries the ones before it added.
  std::string first = client.header_block("/kcache.v1.KCache/Compile");
  // The same path again: HPACK sends it as an index into the dynamic table.
  std::string second = client.header_block("/kcache.v1.KCache/Compile");
  std::string third = client.header_block("/kcache.v1.KCache/GetStats");
  ASSERT_LT(second.size(), first.size());
  std::string bytes = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x1, 0x4, 1, first) +
                      frame(0x0, 0x0, 1, message(3u << 20, 100)) + frame(0x0, 0x1, 1, std::string(50, 'm')) +
                      frame(0x1, 0x4, 3, second) + frame(0x0, 0x1, 3, message(7, 7)) + frame(0x1, 0x4, 5, third) +
                      frame(0x0, 0x1, 5, message(0, 0));
  for (std::size_t cut : {bytes.size(), std::size_t{1}, std::size_t{3}, std::size_t{7}}) {
    SCOPED_TRACE("cut " + std::to_string(cut));
    bool stopped = true;
    auto calls = watch(bytes, cut, &stopped);
    EXPECT_FALSE(stopped);
    ASSERT_EQ(calls.size(), 3u);
    EXPECT_EQ(calls[0].path, "/kcache.v1.KCache/Compile");
    EXPECT_EQ(calls[0].length, 3u << 20);
    EXPECT_EQ(calls[1].path, "/kcache.v1.KCache/Compile");
    EXPECT_EQ(calls[1].length, 7u);
    EXPECT_EQ(calls[2].path, "/kcache.v1.KCache/GetStats");
    EXPECT_EQ(calls[2].length, 0u);
  }
}

TEST(GrpcCallWatcher, ReadsThroughPaddingPriorityAndContinuation) {
  GrpcClientBytes client;
  std::string block = client.header_block("/kcache.v1.KCache/Fetch");
  std::string half1 = block.substr(0, block.size() / 2), half2 = block.substr(block.size() / 2);
  // HEADERS with PADDED (3 bytes of padding) and PRIORITY, its block cut in two by a CONTINUATION;
  // then DATA with PADDED whose prefix is cut across two frames.
  std::string headers = std::string(1, '\3') + std::string(5, '\0') + half1 + std::string(3, '\0');
  std::string data1 = std::string(1, '\2') + message(1234, 0).substr(0, 2) + std::string(2, '\0');
  std::string bytes = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x1, 0x8 | 0x20, 1, headers) +
                      frame(0x9, 0x4, 1, half2) + frame(0x0, 0x8, 1, data1) +
                      frame(0x0, 0x1, 1, message(1234, 4).substr(2));
  for (std::size_t cut : {bytes.size(), std::size_t{1}, std::size_t{5}}) {
    SCOPED_TRACE("cut " + std::to_string(cut));
    bool stopped = true;
    auto calls = watch(bytes, cut, &stopped);
    EXPECT_FALSE(stopped);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].path, "/kcache.v1.KCache/Fetch");
    EXPECT_EQ(calls[0].length, 1234u);
  }
}

TEST(GrpcCallWatcher, AResetCallAndABrokenBlockAnswerNothing) {
  GrpcClientBytes client;
  std::string block = client.header_block("/kcache.v1.KCache/Compile");
  std::string reset = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x1, 0x4, 1, block) +
                      frame(0x3, 0, 1, std::string(4, '\0')) + frame(0x0, 0x1, 1, message(99, 0));
  EXPECT_TRUE(watch(reset, reset.size()).empty());
  // An index the table does not have: the header table is unknown from here on, so nothing more.
  std::string broken = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x1, 0x4, 1, "\xff\x7f") +
                       frame(0x0, 0x1, 1, message(99, 0));
  bool stopped = false;
  EXPECT_TRUE(watch(broken, broken.size(), &stopped).empty());
  EXPECT_TRUE(stopped);
  // DATA on a stream that never had headers names no call.
  std::string orphan = std::string(k_h2_client_preface) + frame(0x4, 0, 0, "") + frame(0x0, 0x1, 9, message(99, 0));
  EXPECT_TRUE(watch(orphan, orphan.size()).empty());
}

TEST(Accepter, OutOfDescriptorsItDrainsTheBacklogAndThenAcceptsAgain) {
  int port = 0;
  int listen_fd = listening_socket(port);
  Accepter accepter("test listener");
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(kcache::test::connect_loopback(port));
  for (int fd : clients) ASSERT_GE(fd, 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // No descriptor above the highest now open: accept4 fails with EMFILE.
  int highest = ::dup(0);
  ::close(highest);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(highest);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  sockaddr_storage peer{};
  int got = accepter.accept(listen_fd, peer);
  int error = errno;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(got, -1);
  EXPECT_EQ(error, EAGAIN) << "the backlog is drained, not left to spin on";
  for (int fd : clients) {
    char byte;
    EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "refused connections are closed";
    ::close(fd);
  }
  int again = kcache::test::connect_loopback(port);
  ASSERT_GE(again, 0);
  int accepted = accepter.accept(listen_fd, peer);
  EXPECT_GE(accepted, 0);
  for (int fd : {again, accepted, listen_fd}) ::close(fd);
}

TEST(FdBudget, TakesNoMoreThanItsLimit) {
  FdBudget budget(7);
  EXPECT_TRUE(budget.take(3));
  EXPECT_TRUE(budget.take(3));
  EXPECT_FALSE(budget.take(3));
  EXPECT_EQ(budget.held(), 6u);
  budget.give_back(3);
  EXPECT_TRUE(budget.take(1));
}

// A gate on a loopback port, with a Unix listener where gRPC would serve, and one client connected
// through it whose HTTP/2 preface made the gate connect upstream.
struct GateWithOneClient {
  FdBudget budget{64};
  std::unique_ptr<GrpcGate> gate;
  int grpc_listener = -1, client = -1, upstream = -1;

  void start() {
    auto started = GrpcGate::start("127.0.0.1", 0, "test gate", {}, GateLimits{}, budget);
    ASSERT_TRUE(started) << started.error().message;
    gate = std::move(*started);
    std::string path = gate->upstream_address().substr(std::strlen("unix:"));
    grpc_listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(path.size(), sizeof address.sun_path);
    std::memcpy(address.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(grpc_listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(grpc_listener, 4), 0);
    client = kcache::test::connect_loopback(gate->port());
    ASSERT_GE(client, 0);
    std::string hello = std::string(k_h2_client_preface) + frame(4, 0, 0, "");  // and an empty SETTINGS
    ASSERT_EQ(::send(client, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
    upstream = ::accept4(grpc_listener, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(upstream, 0) << std::strerror(errno);
  }
  ~GateWithOneClient() {
    gate.reset();
    for (int fd : {grpc_listener, client, upstream}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// gRPC's side of a reply: `frames` DATA frames of 16 KiB on stream 1, written whole, then its end
// closed (as gRPC closes a connection after its last stream at shutdown).
constexpr std::size_t k_reply_frame_bytes = 9 + (16 << 10);
void write_reply_then_close(int fd, std::size_t frames) {
  std::string chunk = frame(0, 0, 1, std::string(16 << 10, 'r'));
  for (std::size_t i = 0; i < frames; ++i) {
    for (std::size_t at = 0; at < chunk.size();) {
      ssize_t w = ::send(fd, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL);
      if (w <= 0) return (void)::shutdown(fd, SHUT_RDWR);  // the gate cut the connection
      at += static_cast<std::size_t>(w);
    }
  }
  ::shutdown(fd, SHUT_RDWR);
}

// kcached's stop drains the gate after gRPC's own shutdown, then destroys it: what gRPC wrote
// before closing reaches the client whole, though the gate still held most of it.
TEST(GrpcGate, ItsDrainPassesOnEveryByteGrpcWroteBeforeItIsDestroyed) {
  GateWithOneClient g;
  ASSERT_NO_FATAL_FAILURE(g.start());
  constexpr std::size_t k_frames = 256;  // 4 MiB: past the gate's 256 KiB buffer and the sockets'
  std::thread grpc([&] { write_reply_then_close(g.upstream, k_frames); });
  std::atomic<bool> go{false};
  std::size_t received = 0;
  std::thread client([&] {
    while (!go) std::this_thread::yield();
    char buffer[64 << 10];
    for (ssize_t n; (n = ::recv(g.client, buffer, sizeof buffer, 0)) > 0;) received += static_cast<std::size_t>(n);
  });
  // The client has read nothing yet, so most of the reply is still on its way when the drain
  // starts; destroyed at once instead, the gate loses it.
  go = true;
  EXPECT_TRUE(g.gate->drain(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  g.gate.reset();
  grpc.join();
  client.join();
  EXPECT_EQ(received, k_frames * k_reply_frame_bytes);
}

// A gRPC client sends WINDOW_UPDATEs as it reads a long reply, also after gRPC has closed its end
// at shutdown. A socket closed with such input unread is reset, and the reset drops what the
// kernel had not yet sent: the reply's end. The gate sends FIN after the last bytes and reads the
// client until it closes too.
TEST(GrpcGate, AReplyReachesAClientThatKeepsSendingWindowUpdatesAsItReads) {
  GateWithOneClient g;
  ASSERT_NO_FATAL_FAILURE(g.start());
  constexpr std::size_t k_frames = 256;  // 4 MiB
  std::thread grpc([&] { write_reply_then_close(g.upstream, k_frames); });
  const std::string window_update = frame(8, 0, 0, std::string("\x00\x01\x00\x00", 4));
  std::size_t received = 0;
  std::thread client([&] {
    char buffer[16 << 10];
    std::size_t since_update = 0;
    for (ssize_t n; (n = ::recv(g.client, buffer, sizeof buffer, 0)) > 0;) {
      received += static_cast<std::size_t>(n);
      since_update += static_cast<std::size_t>(n);
      if (since_update >= (64 << 10)) {
        since_update = 0;
        ::send(g.client, window_update.data(), window_update.size(), MSG_NOSIGNAL);
      }
      // A client slower than the gate: its input piles up once gRPC has closed.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  grpc.join();
  EXPECT_TRUE(g.gate->drain(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  client.join();
  EXPECT_EQ(received, k_frames * k_reply_frame_bytes);
}

// kcached's stop waits for the replies under way before gRPC's own shutdown (whose deadline cuts
// connections): a stream gRPC began to answer holds it until gRPC ends it and the end is passed on.
TEST(GrpcGate, AwaitingRepliesWaitsForEachStreamGrpcBeganToAnswer) {
  GateWithOneClient g;
  ASSERT_NO_FATAL_FAILURE(g.start());
  auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(g.gate->await_replies(started + std::chrono::seconds(5))) << "no reply under way";
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));

  auto send_upstream = [&](const std::string& bytes) {
    ASSERT_EQ(::send(g.upstream, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  };
  // gRPC answers stream 1: its headers and a message, not yet its end (trailers).
  const std::string begun = frame(1, 0x4, 1, "h") + frame(0, 0, 1, std::string(100, 'm'));
  send_upstream(begun);
  started = std::chrono::steady_clock::now();
  EXPECT_FALSE(g.gate->await_replies(started + std::chrono::milliseconds(300))) << "the reply is under way";
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));

  const std::string end = frame(1, 0x4 | 0x1, 1, "t");  // END_HEADERS | END_STREAM
  send_upstream(end);
  EXPECT_TRUE(g.gate->await_replies(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  // By then the client has it all.
  std::string got(4096, '\0');
  ssize_t n = ::recv(g.client, got.data(), got.size(), MSG_DONTWAIT);
  EXPECT_EQ(n, static_cast<ssize_t>(begun.size() + end.size()));
}

// A client that never reads holds the drain only until its deadline.
TEST(GrpcGate, ADrainEndsAtItsDeadlineWhenAClientNeverReads) {
  GateWithOneClient g;
  ASSERT_NO_FATAL_FAILURE(g.start());
  std::thread grpc([&] { write_reply_then_close(g.upstream, 256); });
  auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(g.gate->drain(started + std::chrono::milliseconds(300)));
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
  g.gate.reset();  // cuts the connection, so gRPC's side stops writing
  grpc.join();
}

TEST(PeerCounts, EachAddressHasItsCap) {
  PeerCounts peers(2);
  EXPECT_TRUE(peers.add("10.0.0.1"));
  EXPECT_TRUE(peers.add("10.0.0.1"));
  EXPECT_FALSE(peers.add("10.0.0.1"));
  EXPECT_TRUE(peers.add("10.0.0.2"));
  peers.remove("10.0.0.1");
  EXPECT_TRUE(peers.add("10.0.0.1"));
}

}  // namespace
}  // namespace kcache::server::net
