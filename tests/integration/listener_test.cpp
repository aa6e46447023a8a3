// No peer can exhaust the listeners: the HTTP image API under slow, oversized, pipelined and too
// many clients, and gRPC under oversized and unauthenticated messages. A real kcached on
// loopback, raw sockets for what no well-behaved client sends, and kcached's own peak memory
// (VmHWM) as the measure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <future>
#include <mutex>
#include <thread>

#include "daemon_fixture.hpp"
#include "store/store.hpp"

namespace kcache::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A plain TCP connection to 127.0.0.1, for requests no well-behaved client sends.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(m_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(m_fd);
      m_fd = -1;
    }
  }
  RawConnection(const RawConnection&) = delete;
  ~RawConnection() {
    if (m_fd >= 0) ::close(m_fd);
  }
  bool connected() const { return m_fd >= 0; }
  // False once the peer is gone.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(m_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Everything received until the peer closes or `timeout` passes.
  std::string read_until_closed(milliseconds timeout) {
    std::string out;
    m_closed = false;
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{m_fd, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 0)) <= 0) break;
      char buffer[65536];
      ssize_t n = ::recv(m_fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        m_closed = true;
        break;
      }
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }
  // What has arrived once `done` says it is enough, the peer closes, or `timeout` passes.
  std::string read_until(const std::function<bool(const std::string&)>& done, milliseconds timeout) {
    std::string out;
    auto deadline = Clock::now() + timeout;
    while (!done(out) && Clock::now() < deadline) {
      pollfd p{m_fd, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 0)) <= 0) break;
      char buffer[65536];
      ssize_t n = ::recv(m_fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }
  bool closed() const { return m_closed; }

 private:
  int m_fd = -1;
  bool m_closed = false;
};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

class Listeners : public DaemonTest {
 protected:
  // Hundreds of connections from one loopback address: not the per-peer cap's test (flood_test.cpp).
  std::vector<std::string> daemon_args() const override {
    return {"--max-connections", "512", "--max-connections-per-peer", "4096"};
  }
  int http_port() {
    auto caps = m_client->capabilities(true);
    EXPECT_TRUE(caps) << caps.error().message;
    return caps ? static_cast<int>(caps->http_port()) : 0;
  }
  // Compiles saxpy once, so later compiles of it are cached; returns its source.
  std::filesystem::path cached_saxpy() {
    std::filesystem::path src = m_dir.path() / "saxpy.ll";
    write_file(src, read_test_data("kernels/saxpy.ll"));
    CommandResult miss = run_cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "k.ptx").string()},
                                 m_daemon->address());
    EXPECT_EQ(miss.exit_code, 0) << miss.err;
    return src;
  }
  // Wall time of one cached `kcache compile`, which must be a hit over HTTP.
  double cached_compile_ms(const std::filesystem::path& src) {
    auto start = Clock::now();
    CommandResult hit = run_cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "k.ptx").string()},
                                m_daemon->address());
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    EXPECT_EQ(hit.exit_code, 0) << hit.err;
    EXPECT_TRUE(hit.out.starts_with("hit  ")) << hit.out;
    return ms;
  }
  std::string fingerprint() { return m_client->capabilities()->fingerprint(); }
};

TEST_F(Listeners, PipelinedRequestsAreAllAnsweredInOrder) {
  RawConnection c(http_port());
  ASSERT_TRUE(c.connected());
  const std::string request = "GET /v1/fingerprint HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  const std::string missing = "GET /v1/device/" + std::string(64, '0') + "/sm_90/ptx HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_TRUE(c.send(request + missing + request));  // one write: three requests
  std::string body = fingerprint() + "\n";
  std::string got = c.read_until([&](const std::string& s) { return count(s, body) == 2; }, milliseconds(5000));
  EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 2u) << got;
  EXPECT_EQ(count(got, "HTTP/1.1 404 Not Found"), 1u) << got;
  EXPECT_LT(got.find("200 OK"), got.find("404")) << "answered in order";
  EXPECT_LT(got.find("404"), got.rfind("200 OK")) << "answered in order";
}

// Readers that ask for a big image and then stop reading: its answer waits in kcached, by
// reference to the hot cache's copy, while the event threads go on answering everyone else. With
// a thread per answer (the pool has 16) they would hold every thread for the write time (10 s);
// with a copy per answer they would cost 8 MiB each.
TEST_F(Listeners, ReadersThatStopReadingABigImageHoldNoThreadAndNoCopy) {
  std::string big(8 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); i += 8) big[i] = static_cast<char>((i * 2654435761u) >> 11);
  const std::string small(4096, 's');
  Key big_key{sha256("a big module")}, small_key{sha256("a small module")};
  m_daemon->stop();
  {
    auto store = server::Store::open({db(), nullptr});
    ASSERT_TRUE(store) << store.error().message;
    for (auto& [key, bytes] : {std::pair{big_key, big}, std::pair{small_key, small}}) {
      auto put = (*store)->put(Side::device, key, {}, std::vector{server::make_image({"sm_90", ImageKind::ptx}, bytes)});
      ASSERT_TRUE(put) << put.error().message;
    }
  }
  restart();
  auto fetch = [&](const Key& key) {
    v1::FetchRequest request;
    request.set_key(key.hex());
    request.set_arch("sm_90");
    return m_client->fetch(request);  // over HTTP: the client's default
  };
  ASSERT_TRUE(fetch(big_key));  // now in the hot cache
  int port = http_port();
  if (!k_asan_build) {
    ASSERT_GT(peak_rss(m_daemon->pid()), 0u);
  }
  std::uint64_t before = peak_rss(m_daemon->pid());

  constexpr int k_stalled = 40;
  std::vector<std::unique_ptr<RawConnection>> stalled;
  const std::string request = "GET /v1/device/" + big_key.hex() + "/sm_90/ptx HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (int i = 0; i < k_stalled; ++i) {
    stalled.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(stalled.back()->connected());
    ASSERT_TRUE(stalled.back()->send(request));
  }
  // Each has its answer started (its socket buffers full), and none reads on.
  std::string first = stalled.back()->read_until([](const std::string& s) { return s.size() >= 4096; }, milliseconds(5000));
  EXPECT_TRUE(first.starts_with("HTTP/1.1 200 OK")) << first.substr(0, 200);

  auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto got = fetch(small_key);
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_EQ(got->data, small);
  }
  auto again = fetch(big_key);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->data == big);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "answered while " << k_stalled << " readers stall, well within their 10 s write time";
  if (!k_asan_build) {
    std::uint64_t grown = peak_rss(m_daemon->pid()) - before;
    EXPECT_LT(grown, 64u << 20) << "kcached's peak memory grew by " << (grown >> 20) << " MiB for " << k_stalled
                                << " stalled answers of 8 MiB (copies would take " << (k_stalled * 8) << " MiB)";
  }
  stalled.clear();
  EXPECT_TRUE(fetch(small_key));
}

TEST_F(Listeners, ARequestWithABodyIsRefusedBeforeTheBodyIsRead) {
  int port = http_port();
  for (const std::string& head : {std::string("POST /v1/fingerprint HTTP/1.1\r\nContent-Length: 400000000\r\n\r\n"),
                                  std::string("GET /v1/fingerprint HTTP/1.1\r\nContent-Length: 10\r\n\r\n"),
                                  std::string("GET /v1/fingerprint HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")}) {
    RawConnection c(port);
    ASSERT_TRUE(c.send(head + std::string(1000, 'x')));
    std::string got = c.read_until_closed(milliseconds(5000));
    EXPECT_TRUE(got.starts_with("HTTP/1.1 413 ")) << head << " -> " << got;
    EXPECT_TRUE(c.closed()) << head;
  }
  RawConnection huge(port);
  ASSERT_TRUE(huge.send("GET /v1/fingerprint HTTP/1.1\r\nX-Filler: " + std::string(40000, 'a')));
  std::string got = huge.read_until_closed(milliseconds(5000));
  EXPECT_TRUE(got.starts_with("HTTP/1.1 431 ")) << got;
}

// 100 clients trickle a request a byte at a time and 200 more leave a partial request line: a
// cached compile still takes well under 50 ms, and each slow client is cut off at its deadline.
KCACHE_NOT_UNDER_ASAN(Listeners, SlowClientsHoldNoThreadAndAreCutOffAtTheirDeadline, "a latency bound does not apply");
TEST_F(Listeners, SlowClientsHoldNoThreadAndAreCutOffAtTheirDeadline) {
  std::filesystem::path src = cached_saxpy();
  int port = http_port();
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 300; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(slow.back()->connected());
    if (i >= 100) {
      ASSERT_TRUE(slow.back()->send("GET /v1/fingerprint HT"));
    }
  }
  auto started = Clock::now();
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string request = "GET /v1/fingerprint HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    for (std::size_t at = 0; !stop && at < request.size() - 1; ++at) {  // never the last byte
      for (int i = 0; i < 100; ++i) (void)slow[static_cast<std::size_t>(i)]->send(request.substr(at, 1));
      std::this_thread::sleep_for(milliseconds(200));  // the clients' pace, not a wait for the daemon
    }
  });
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) ms.push_back(cached_compile_ms(src));
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 50.0) << "median of 7 cached compiles while 300 clients are slow; slowest "
                                     << ms.back() << " ms";
  std::printf("cached compile with 300 slow clients: median %.1f ms, slowest %.1f ms\n", ms[ms.size() / 2], ms.back());

  // Each is closed (408) within the request deadline (5 s), whatever its pace.
  for (std::size_t i : {std::size_t{0}, std::size_t{99}, std::size_t{100}, std::size_t{299}}) {
    auto left = milliseconds(8000) - std::chrono::duration_cast<milliseconds>(Clock::now() - started);
    std::string got = slow[i]->read_until_closed(left);
    EXPECT_TRUE(slow[i]->closed()) << "slow client " << i << " still connected after "
                                   << std::chrono::duration_cast<milliseconds>(Clock::now() - started).count() << " ms";
    EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << got;
  }
  stop = true;
  trickle.join();
}

// Beyond the connection cap (512), a new connection takes the place of the held one waiting
// nearest its deadline: 512 idle sockets cannot keep a cached compile out (issue 29: 2,000 of them
// pushed every cached compile onto gRPC). The listener goes on once they are gone.
TEST_F(Listeners, ConnectionsBeyondTheCapTakeThePlaceOfTheIdlest) {
  std::filesystem::path src = cached_saxpy();
  int port = http_port();
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 512; ++i) {
    held.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(held.back()->connected());
  }
  RawConnection late(port);
  ASSERT_TRUE(late.send("GET /v1/fingerprint HTTP/1.1\r\nConnection: close\r\n\r\n"));
  EXPECT_TRUE(late.read_until_closed(milliseconds(5000)).starts_with("HTTP/1.1 200 OK"));
  // The oldest idle one made room: closed without an answer.
  EXPECT_EQ(held.front()->read_until_closed(milliseconds(2000)), "");
  EXPECT_TRUE(held.front()->closed());

  // A cached compile over HTTP, with the listener full of idle sockets.
  EXPECT_LT(cached_compile_ms(src), 1000.0);
  held.clear();
  auto deadline = Clock::now() + std::chrono::seconds(5);
  bool served = false;
  while (!served && Clock::now() < deadline) {
    RawConnection again(port);
    served = again.send("GET /v1/fingerprint HTTP/1.1\r\nConnection: close\r\n\r\n") &&
             again.read_until_closed(milliseconds(2000)).starts_with("HTTP/1.1 200 OK");
  }
  EXPECT_TRUE(served);
}

// The listen backlog is gRPC's 4096 (capped by net.core.somaxconn), not cpp-httplib's 5, so a
// burst of connections never waits for SYN retries.
TEST_F(Listeners, TheHttpListenBacklogIsLarge) {
  int port = http_port();
  CommandResult ss = run_program({"/usr/bin/ss", "-ltnH", "sport = :" + std::to_string(port)});
  if (ss.exit_code != 0) GTEST_SKIP() << "no ss: " << ss.err;
  std::istringstream line(ss.out);
  std::string state;
  std::uint64_t queued = 0, backlog = 0;
  line >> state >> queued >> backlog;
  EXPECT_GE(backlog, 128u) << ss.out;
}

// Sends `request` `clients` times at once on one channel to `address`, with `token` (none when
// empty); returns how many calls ended with each status code, and one message of each.
std::map<grpc::StatusCode, std::pair<int, std::string>> compile_at_once(const std::string& address,
                                                                         const std::string& token,
                                                                         const v1::CompileRequest& request, int clients) {
  std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());  // one copy, shared by every call
  bytes.clear();
  bytes.shrink_to_fit();
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  std::map<grpc::StatusCode, std::pair<int, std::string>> codes;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<grpc::ByteBuffer> replies(static_cast<std::size_t>(clients));
  grpc::ByteBuffer message(&slice, 1);
  for (int i = 0; i < clients; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token.empty()) contexts.back()->AddMetadata("authorization", "Bearer " + token);
    stub.UnaryCall(contexts.back().get(), "/kcache.v1.KCache/Compile", grpc::StubOptions(), &message,
                   &replies[static_cast<std::size_t>(i)], [&](grpc::Status s) {
                     std::lock_guard lock(mutex);
                     ++finished;
                     auto& [n, text] = codes[s.error_code()];
                     ++n;
                     text = s.error_message();
                     done.notify_one();
                   });
  }
  std::unique_lock lock(mutex);
  EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(90), [&] { return finished == clients; }));
  return codes;
}

class OversizedRequests : public Listeners {
 protected:
  static constexpr const char* k_reader = "read-token-0123456789abcdef";

  void SetUp() override {
    write_file(m_dir.path() / "tokens",
               std::string("ops admin admin-token-0123456789abcdef\nreader read ") + k_reader + "\n");
    std::filesystem::permissions(m_dir.path() / "tokens", std::filesystem::perms::owner_read |
                                                               std::filesystem::perms::owner_write);
    Listeners::SetUp();
  }
  std::vector<std::string> daemon_args() const override {
    auto args = Listeners::daemon_args();
    args.insert(args.end(), {"--tokens-file", (m_dir.path() / "tokens").string()});
    return args;
  }
  int http_port_with_token() {
    ClientOptions o{m_daemon->address(), std::chrono::seconds(30)};
    o.token = "admin-token-0123456789abcdef";
    auto caps = Client(o).capabilities(true);
    EXPECT_TRUE(caps) << caps.error().message;
    return caps ? static_cast<int>(caps->http_port()) : 0;
  }
};

// 64 concurrent requests of 64 MiB + 1 without a token, on each port: kcached's peak memory
// grows by a bounded amount, not by what was sent (4 GiB a port), and it keeps serving.
KCACHE_NOT_UNDER_ASAN(OversizedRequests, SixtyFourAtOnceOnEachPortLeavePeakMemoryBounded,
                      "its redzones and quarantine make a memory bound meaningless");
TEST_F(OversizedRequests, SixtyFourAtOnceOnEachPortLeavePeakMemoryBounded) {
  constexpr std::size_t k_size = (64ULL << 20) + 1;
  constexpr int k_clients = 64;
  int port = http_port_with_token();
  std::uint64_t before = peak_rss(m_daemon->pid());
  ASSERT_GT(before, 0u);

  // HTTP: each sends its headers, then its body as fast as kcached takes it.
  {
    const std::string chunk(1 << 20, 'x');
    std::vector<std::future<std::string>> clients;
    for (int i = 0; i < k_clients; ++i) {
      clients.push_back(std::async(std::launch::async, [&] {
        RawConnection c(port);
        c.send("POST /v1/fingerprint HTTP/1.1\r\nContent-Length: " + std::to_string(k_size) + "\r\n\r\n");
        for (std::size_t sent = 0; sent < k_size && c.send(chunk); sent += chunk.size()) {
        }
        return c.read_until_closed(milliseconds(10000));
      }));
    }
    for (auto& c : clients) EXPECT_TRUE(c.get().starts_with("HTTP/1.1 413 ")) << "every one refused";
  }
  std::uint64_t after_http = peak_rss(m_daemon->pid());

  // gRPC: one serialized Compile of 64 MiB + 1, sent 64 times at once (the slices are shared).
  auto codes = compile_at_once(m_daemon->address(), "", device_request(std::string(k_size, 'x'), {"sm_90"}), k_clients);
  EXPECT_EQ(codes[grpc::StatusCode::UNAUTHENTICATED].first, k_clients) << "every one refused";
  std::uint64_t after_grpc = peak_rss(m_daemon->pid());
  std::printf("kcached peak memory: %.0f MiB at rest, %.0f MiB after 64 x 64 MiB over HTTP, %.0f MiB after the same "
              "over gRPC\n",
              before / 1048576.0, after_http / 1048576.0, after_grpc / 1048576.0);
  EXPECT_LT(after_http - before, 64ULL << 20) << "HTTP bodies are never read";
  EXPECT_LT(after_grpc - before, 64ULL << 20) << "gRPC messages without a token are never read";

  // Still serving, to a client with a token.
  ClientOptions o{m_daemon->address(), std::chrono::seconds(60)};
  o.token = "admin-token-0123456789abcdef";
  auto compiled = Client(o).compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"}));
  EXPECT_TRUE(compiled) << compiled.error().message;
}

// The token and its role are checked on a call's headers, before gRPC reads its message: 64
// Compiles of 64 MiB + 1 at once without a token, then 64 from a client whose role may not
// compile, each get the code and message they always got, and kcached's peak memory barely moves.
KCACHE_NOT_UNDER_ASAN(OversizedRequests, CallsWithoutTheRightTokenAreRefusedBeforeTheirMessageIsRead,
                      "its redzones and quarantine make a memory bound meaningless");
TEST_F(OversizedRequests, CallsWithoutTheRightTokenAreRefusedBeforeTheirMessageIsRead) {
  constexpr std::size_t k_size = (64ULL << 20) + 1;
  constexpr int k_clients = 64;
  const v1::CompileRequest huge = device_request(std::string(k_size, 'x'), {"sm_90"});
  std::uint64_t before = peak_rss(m_daemon->pid());
  ASSERT_GT(before, 0u);

  auto anonymous = compile_at_once(m_daemon->address(), "", huge, k_clients);
  EXPECT_EQ(anonymous.size(), 1u) << "one code for all: " << anonymous.begin()->second.second;
  EXPECT_EQ(anonymous[grpc::StatusCode::UNAUTHENTICATED].first, k_clients);
  EXPECT_TRUE(anonymous[grpc::StatusCode::UNAUTHENTICATED].second.starts_with("kcached needs a token: send "))
      << anonymous[grpc::StatusCode::UNAUTHENTICATED].second;
  std::uint64_t after_anonymous = peak_rss(m_daemon->pid());

  auto unknown = compile_at_once(m_daemon->address(), "not-a-known-token-at-all", huge, k_clients);
  EXPECT_EQ(unknown[grpc::StatusCode::UNAUTHENTICATED].first, k_clients);
  EXPECT_EQ(unknown[grpc::StatusCode::UNAUTHENTICATED].second, "kcached does not know this token");
  std::uint64_t after_unknown = peak_rss(m_daemon->pid());

  auto reader = compile_at_once(m_daemon->address(), k_reader, huge, k_clients);
  EXPECT_EQ(reader.size(), 1u) << "one code for all: " << reader.begin()->second.second;
  EXPECT_EQ(reader[grpc::StatusCode::PERMISSION_DENIED].first, k_clients);
  EXPECT_EQ(reader[grpc::StatusCode::PERMISSION_DENIED].second,
            "Compile needs the compile role; client 'reader' has read");
  std::uint64_t after_reader = peak_rss(m_daemon->pid());

  std::printf("kcached peak memory: %.0f MiB at rest, %.0f MiB after 64 x 64 MiB Compiles without a token, %.0f MiB "
              "after 64 with an unknown one, %.0f MiB after 64 from a reader\n",
              before / 1048576.0, after_anonymous / 1048576.0, after_unknown / 1048576.0, after_reader / 1048576.0);
  EXPECT_LT(after_anonymous - before, 64ULL << 20) << "messages without a token are never read";
  EXPECT_LT(after_reader - before, 64ULL << 20) << "nor those of a role that may not make the call";
  std::string log = read_file(m_dir.path() / "kcached.log");
  EXPECT_NE(log.find("denied Compile to client 'reader'"), std::string::npos) << "denials are still logged by name";

  // Refused calls reach no interceptor: the gate counts them, under the method's own labels.
  ClientOptions admin{m_daemon->address(), std::chrono::seconds(60)};
  admin.token = "admin-token-0123456789abcdef";
  auto stats = Client(admin).stats();
  ASSERT_TRUE(stats) << stats.error().message;
  std::map<std::string, std::uint64_t> compiles;
  for (const auto& r : stats->requests()) {
    if (r.service() == "kcache.v1.KCache" && r.method() == "Compile") compiles[r.code()] += r.count();
  }
  EXPECT_EQ(compiles["UNAUTHENTICATED"], 2u * k_clients);
  EXPECT_EQ(compiles["PERMISSION_DENIED"], static_cast<std::uint64_t>(k_clients));

  // Still serving: a reader may read, an admin may compile.
  ClientOptions reading{m_daemon->address(), std::chrono::seconds(60)};
  reading.token = k_reader;
  auto caps = Client(reading).capabilities();
  EXPECT_TRUE(caps) << caps.error().message;
  ClientOptions o{m_daemon->address(), std::chrono::seconds(60)};
  o.token = "admin-token-0123456789abcdef";
  auto compiled = Client(o).compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"}));
  EXPECT_TRUE(compiled) << compiled.error().message;
}

}  // namespace
}  // namespace kcache::test
