// Hostile peers against a real kcached (issue 29): a raw HTTP/2 client that opens streams and
// resets each at once (the "rapid reset" of CVE-2023-44487), an idle-socket holder that goes up
// to the descriptor limit, and SIGTERM in the middle of a flood. All on loopback; the hostile
// peer speaks from 127.0.0.2, so that the penalty for its address leaves the well-behaved client
// (127.0.0.1) alone, as it would leave another host alone. Bounded in count and time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_fixture.hpp"
#include "test_support.hpp"

namespace kcache::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr std::uint64_t k_mib = 1ULL << 20;

// A field of /proc/PID/status, in its own units (kB for memory); 0 when absent.
std::uint64_t proc_status(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}
std::uint64_t rss_bytes(pid_t pid) { return proc_status(pid, "VmRSS") * 1024; }
std::uint64_t threads_of(pid_t pid) { return proc_status(pid, "Threads"); }

void put_frame(std::string& out, std::uint8_t type, std::uint8_t flags, std::uint32_t stream, const std::string& payload) {
  std::uint32_t n = static_cast<std::uint32_t>(payload.size());
  out += {static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n), static_cast<char>(type),
          static_cast<char>(flags), static_cast<char>(stream >> 24), static_cast<char>(stream >> 16),
          static_cast<char>(stream >> 8), static_cast<char>(stream)};
  out += payload;
}

// HPACK (RFC 7541) without Huffman or the dynamic table: a literal field, not indexed.
void put_literal(std::string& block, int static_name, const std::string& name, const std::string& value) {
  if (static_name > 0 && static_name < 15) {
    block += static_cast<char>(static_name);
  } else if (static_name >= 15) {
    block += static_cast<char>(0x0f);
    block += static_cast<char>(static_name - 15);
  } else {
    block += static_cast<char>(0x00);
    block += static_cast<char>(name.size());
    block += name;
  }
  block += static_cast<char>(value.size());  // every value here is under 127 bytes
  block += value;
}

// The request headers of a gRPC call to `path`, with a bearer `token` when not empty.
std::string grpc_headers(const std::string& path, const std::string& token) {
  std::string block;
  block += static_cast<char>(0x83);  // :method POST
  block += static_cast<char>(0x86);  // :scheme http
  put_literal(block, 4, "", path);   // :path
  put_literal(block, 1, "", "kcache");  // :authority
  put_literal(block, 31, "", "application/grpc");  // content-type
  put_literal(block, 0, "te", "trailers");
  if (!token.empty()) put_literal(block, 23, "", "Bearer " + token);  // authorization
  return block;
}

// The rapid-reset flood: on one connection at a time, HEADERS then RST_STREAM (CANCEL) for
// stream after stream, as fast as the socket takes them; when the daemon cuts the connection,
// a new one, and so on until `stop`.
struct FloodReport {
  std::uint64_t streams = 0, connections = 0, goaways = 0;
};
FloodReport rapid_reset(int port, const std::string& token, const std::atomic<bool>& stop) {
  FloodReport report;
  const std::string block = grpc_headers("/kcache.v1.KCache/GetStats", token);
  while (!stop) {
    int fd = connect_loopback(port, "127.0.0.2");
    if (fd < 0) continue;
    ++report.connections;
    std::string hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    put_frame(hello, 0x4, 0, 0, "");  // SETTINGS
    bool open = ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size());
    std::uint32_t stream = 1;
    std::string seen;
    while (open && !stop && stream < 0x7fff0000u) {
      std::string batch;
      for (int i = 0; i < 64; ++i, stream += 2) {
        put_frame(batch, 0x1, 0x4, stream, block);        // HEADERS, END_HEADERS
        put_frame(batch, 0x3, 0, stream, {0, 0, 0, 8});   // RST_STREAM, CANCEL
      }
      std::size_t at = 0;
      while (open && at < batch.size() && !stop) {
        ssize_t n = ::send(fd, batch.data() + at, batch.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          at += static_cast<std::size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          pollfd p{fd, POLLOUT | POLLIN, 0};
          ::poll(&p, 1, 100);
        } else {
          open = false;
        }
        char buffer[65536];
        ssize_t r;
        while ((r = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT)) > 0) {
          if (seen.size() < (1u << 20)) seen.append(buffer, static_cast<std::size_t>(r));
        }
        if (r == 0) open = false;
      }
      if (at == batch.size()) report.streams += 64;
    }
    // A GOAWAY with ENHANCE_YOUR_CALM among what the daemon sent.
    if (seen.find(std::string("\x00\x00\x00\x0b", 4)) != std::string::npos) ++report.goaways;
    ::close(fd);
    if (!stop) std::this_thread::sleep_for(milliseconds(10));  // the attacker's pace of reconnects
  }
  return report;
}

class Floods : public DaemonTest, public ::testing::WithParamInterface<bool> {
 protected:
  static constexpr const char* k_token = "compile-token-0123456789abcdef";

  void SetUp() override {
    write_file(m_dir.path() / "tokens", std::string("builder compile ") + k_token + "\n");
    std::filesystem::permissions(m_dir.path() / "tokens",
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    DaemonTest::SetUp();
  }
  std::vector<std::string> daemon_args() const override {
    if (!GetParam()) return {};
    return {"--tokens-file", (m_dir.path() / "tokens").string()};
  }
  std::string token() const { return GetParam() ? k_token : ""; }
};

// 2 s of rapid reset, reconnecting whenever cut (the first cut comes within the first burst, so
// the rest is the slowed address trying again, every 10 ms, each new connection on probation and
// cut again): the daemon cuts each with GOAWAY, keeps its threads and memory bounded, and answers
// another client's cached compile and stats within 1 s throughout.
TEST_P(Floods, ARapidResetFloodIsCutWhileOthersAreServed) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  std::vector<std::string> env_args;
  if (!token().empty()) {
    write_file(m_dir.path() / "token", token() + "\n");
    env_args = {"--token-file", (m_dir.path() / "token").string()};
  }
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), env_args.begin(), env_args.end());
    return run_cli(args, m_daemon->address());
  };
  ASSERT_EQ(cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "k.ptx").string()}).exit_code, 0);

  const pid_t pid = m_daemon->pid();
  const std::uint64_t threads_before = threads_of(pid);
  const std::uint64_t rss_before = rss_bytes(pid);
  std::atomic<bool> stop{false};
  FloodReport report;
  std::thread flood([&] { report = rapid_reset(m_daemon->port(), token(), stop); });

  std::uint64_t threads_peak = 0, rss_peak = 0;
  double slowest_ms = 0;
  int answered = 0;
  auto end = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < end) {
    auto started = Clock::now();
    CommandResult hit = cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "k.ptx").string()});
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    started = Clock::now();
    CommandResult stats = cli({"stats"});
    ms = std::max(ms, std::chrono::duration<double, std::milli>(Clock::now() - started).count());
    EXPECT_EQ(hit.exit_code, 0) << hit.err;
    EXPECT_TRUE(hit.out.starts_with("hit")) << hit.out;
    EXPECT_EQ(stats.exit_code, 0) << stats.err;
    slowest_ms = std::max(slowest_ms, ms);
    ++answered;
    threads_peak = std::max(threads_peak, threads_of(pid));
    rss_peak = std::max(rss_peak, rss_bytes(pid));
  }
  stop = true;
  flood.join();
  std::printf("rapid reset (%s token): %llu streams on %llu connections, %llu GOAWAYs; threads %llu -> peak %llu; "
              "RSS %llu -> peak %llu MiB; %d cached compiles and stats, slowest %.0f ms\n",
              GetParam() ? "with a" : "no", static_cast<unsigned long long>(report.streams),
              static_cast<unsigned long long>(report.connections), static_cast<unsigned long long>(report.goaways),
              static_cast<unsigned long long>(threads_before), static_cast<unsigned long long>(threads_peak),
              static_cast<unsigned long long>(rss_before / k_mib), static_cast<unsigned long long>(rss_peak / k_mib),
              answered, slowest_ms);
  EXPECT_GE(report.goaways, 1u) << "the flooding connection is cut with GOAWAY (ENHANCE_YOUR_CALM)";
  // gRPC's threads are capped (daemon.cpp, grpc_threads: 128 with 2 workers); the flood is cut
  // after at most 128 streams, so that it takes no thread a well-behaved call needs.
  EXPECT_LE(threads_peak, threads_before + 128);
  if (!k_asan_build) {
    EXPECT_LT(slowest_ms, 1000.0) << "a cached compile and a stats call, each within 1 s";
    EXPECT_LT(rss_peak, rss_before + 256 * k_mib);
    // Within 64 MiB of where it was, 10 s after at most.
    auto settled = Clock::now() + std::chrono::seconds(10);
    while (rss_bytes(pid) > rss_before + 64 * k_mib && Clock::now() < settled) {
      std::this_thread::sleep_for(milliseconds(100));  // polling the kernel's count, not waiting for a time
    }
    EXPECT_LE(rss_bytes(pid), rss_before + 64 * k_mib);
  }
  // The flooding address is slowed for a while; the log names it once per penalty, not per cut
  // or stream.
  std::string log = read_file(m_dir.path() / "kcached.log");
  std::size_t cuts = 0;
  for (std::size_t at = 0; (at = log.find("slowing new connections from 127.0.0.2", at)) != std::string::npos; ++at) ++cuts;
  EXPECT_GE(cuts, 1u);
  EXPECT_LE(cuts, 1u) << "one line while the penalty lasts (10 s)";
  EXPECT_LT(log.size(), 1 * k_mib) << "the log grows by lines per cut, not per stream";
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutTokens, Floods, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "WithAToken" : "WithoutAToken"; });

bool closed_within(int fd, milliseconds time);

// One connection from `from` that sends `count` HEADERS+RST_STREAM pairs at once, then reads what
// the daemon sends until it closes the connection (or 2 s pass). Whether a GOAWAY came back.
bool burst_of_resets(int port, const char* from, int count) {
  int fd = connect_loopback(port, from);
  if (fd < 0) return false;
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  put_frame(out, 0x4, 0, 0, "");  // SETTINGS
  const std::string block = grpc_headers("/kcache.v1.KCache/GetStats", "");
  for (std::uint32_t i = 0, stream = 1; i < static_cast<std::uint32_t>(count); ++i, stream += 2) {
    put_frame(out, 0x1, 0x4, stream, block);       // HEADERS, END_HEADERS
    put_frame(out, 0x3, 0, stream, {0, 0, 0, 8});  // RST_STREAM, CANCEL
  }
  ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  std::string seen;
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buffer[65536];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    seen.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return seen.find(std::string("\x00\x00\x00\x0b", 4)) != std::string::npos;  // ENHANCE_YOUR_CALM
}

// The gate punishes a connection, not an address: bursts of 300 HEADERS+RST_STREAM, each on a new
// connection from the address the well-behaved client uses too, cut each time, while 40 stats
// calls from that same address all succeed (before, the address was refused for 10 s after each
// cut and 22 of 40 failed).
using GateFloods = DaemonTest;

TEST_F(GateFloods, AFloodingConnectionIsCutAndItsAddressKeepsWorking) {
  std::atomic<bool> stop{false};
  std::atomic<int> bursts{0}, goaways{0};
  std::thread flood([&] {
    while (!stop) {
      ++bursts;
      if (burst_of_resets(m_daemon->port(), "127.0.0.1", 300)) ++goaways;
      for (int i = 0; i < 25 && !stop; ++i) std::this_thread::sleep_for(milliseconds(20));  // a burst every ~0.5 s
    }
  });
  int failed = 0;
  std::string first_failure;
  for (int i = 0; i < 40; ++i) {
    CommandResult stats = run_cli({"stats"}, m_daemon->address());
    if (stats.exit_code != 0 && failed++ == 0) first_failure = stats.err;
  }
  stop = true;
  flood.join();
  EXPECT_EQ(failed, 0) << "of 40 stats calls from the flooding address; the first said: " << first_failure;
  EXPECT_GE(goaways.load(), 1) << bursts.load() << " bursts, none cut";
  EXPECT_NE(read_file(m_dir.path() / "kcached.log").find("slowing new connections from 127.0.0.1"), std::string::npos);
}

// A CONTINUATION flood: one header block that never ends, 16 KiB frames as fast as the socket
// takes them. The gate cuts it once the block passes 64 KiB, so kcached's memory stays where it
// was (before: 84 to 532 MiB, and it stayed there), and others are served.
TEST_F(GateFloods, AContinuationFloodIsCutAndCostsNoMemory) {
  const pid_t pid = m_daemon->pid();
  const std::uint64_t rss_before = rss_bytes(pid), peak_before = peak_rss(pid);
  int fd = connect_loopback(m_daemon->port(), "127.0.0.2");
  ASSERT_GE(fd, 0);
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  put_frame(out, 0x4, 0, 0, "");                                                     // SETTINGS
  put_frame(out, 0x1, 0, 1, grpc_headers("/kcache.v1.KCache/GetStats", ""));  // HEADERS without END_HEADERS
  const std::string filler(16 << 10, 'a');
  std::string continuation;
  put_frame(continuation, 0x9, 0, 1, filler);  // CONTINUATION, never END_HEADERS
  std::uint64_t sent = 0;
  bool open = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL) > 0;
  auto end = Clock::now() + std::chrono::seconds(2);
  while (open && Clock::now() < end && sent < (256ULL << 20)) {
    ssize_t n = ::send(fd, continuation.data(), continuation.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::uint64_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 200) <= 0) open = !closed_within(fd, milliseconds(1));
    } else {
      open = false;
    }
  }
  EXPECT_TRUE(!open || closed_within(fd, milliseconds(2000))) << "the flooding connection is cut";
  ::close(fd);
  std::printf("CONTINUATION flood: %llu KiB sent before the cut; RSS %llu -> %llu MiB, peak %llu -> %llu MiB\n",
              static_cast<unsigned long long>(sent >> 10), static_cast<unsigned long long>(rss_before / k_mib),
              static_cast<unsigned long long>(rss_bytes(pid) / k_mib),
              static_cast<unsigned long long>(peak_before / k_mib), static_cast<unsigned long long>(peak_rss(pid) / k_mib));
  EXPECT_LT(sent, 64ULL << 20) << "the gate read far past the 64 KiB header block";
  if (!k_asan_build) {
    EXPECT_LT(rss_bytes(pid), rss_before + 32 * k_mib) << "kept memory";
    EXPECT_LT(peak_rss(pid), std::max(peak_before, rss_before) + 32 * k_mib) << "peak memory";
  }
  EXPECT_EQ(run_cli({"stats"}, m_daemon->address()).exit_code, 0);
  EXPECT_NE(read_file(m_dir.path() / "kcached.log").find("header block passed"), std::string::npos);
}

// Idle sockets held open from one address, `count` to `port`, until dropped.
std::vector<int> hold_idle(int port, int count) {
  std::vector<int> held;
  for (int i = 0; i < count; ++i) {
    int fd = connect_loopback(port, "127.0.0.2");
    if (fd >= 0) held.push_back(fd);
  }
  return held;
}

// Whether the daemon closed `fd` (EOF or reset) within `time`; whatever it sent is read and dropped.
bool closed_within(int fd, milliseconds time) {
  auto deadline = Clock::now() + time;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return true;
  }
}

// kcached under `prlimit --nofile=256`: idle sockets on both ports, as many as the holder can
// open. A well-behaved client is served throughout, each idle socket is closed at its deadline
// (5 s), the listeners accept again once the holder is gone, and the log says so in a few lines.
class DescriptorLimit : public DaemonTest {
 protected:
  void SetUp() override {
    std::filesystem::path wrapper = m_dir.path() / "kcached-nofile-256";
    write_file(wrapper, std::string("#!/bin/sh\nexec prlimit --nofile=256 ") + KCACHE_DAEMON_PATH + " \"$@\"\n");
    std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
    DaemonTest::SetUp();
  }
  std::string daemon_executable() const override { return (m_dir.path() / "kcached-nofile-256").string(); }
};

TEST_F(DescriptorLimit, IdleSocketsUpToTheLimitAreClosedAndTheListenersGoOn) {
  if (std::system("prlimit --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no prlimit (util-linux)";
  ASSERT_EQ(proc_status(m_daemon->pid(), "Pid"), static_cast<std::uint64_t>(m_daemon->pid()));
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  auto compile = [&] {
    return run_cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "k.ptx").string()},
                   m_daemon->address());
  };
  ASSERT_EQ(compile().exit_code, 0);
  auto caps = m_client->capabilities(true);
  ASSERT_TRUE(caps) << caps.error().message;
  auto started = Clock::now();
  std::vector<int> held = hold_idle(m_daemon->port(), 300);
  std::vector<int> held_http = hold_idle(static_cast<int>(caps->http_port()), 300);
  held.insert(held.end(), held_http.begin(), held_http.end());
  // Served while the listeners are full of idle sockets (a cached compile over HTTP, stats over gRPC).
  for (int i = 0; i < 3; ++i) {
    auto t = Clock::now();
    CommandResult hit = compile();
    CommandResult stats = run_cli({"stats"}, m_daemon->address());
    EXPECT_EQ(hit.exit_code, 0) << hit.err;
    EXPECT_TRUE(hit.out.starts_with("hit")) << hit.out;
    EXPECT_EQ(stats.exit_code, 0) << stats.err;
    if (!k_asan_build) {
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 2.0);
    }
  }
  // Every idle socket is closed at its deadline (5 s from its accept), or was refused or made
  // room at once.
  std::size_t still_open = 0;
  for (int fd : held) {
    auto left = milliseconds(8000) - std::chrono::duration_cast<milliseconds>(Clock::now() - started);
    if (!closed_within(fd, std::max(left, milliseconds(1)))) ++still_open;
    ::close(fd);
  }
  EXPECT_EQ(still_open, 0u) << "of " << held.size() << " idle sockets";
  // New connections are accepted again.
  CommandResult stats = run_cli({"stats"}, m_daemon->address());
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(compile().exit_code, 0);
  std::string log = read_file(m_dir.path() / "kcached.log");
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = log.find("refusing new connections", at)) != std::string::npos; ++at) ++lines;
  EXPECT_LE(lines, 20u) << "one line per episode, not per connection";
  EXPECT_EQ(log.find("accept:"), std::string::npos);
}

// One address may hold --max-connections-per-peer connections on each listener; the next from it
// is refused, and another address is still served.
class PeerCap : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--max-connections-per-peer", "8"}; }
};

TEST_F(PeerCap, OneAddressHoldsItsShareAndNoMore) {
  auto caps = m_client->capabilities(true);
  ASSERT_TRUE(caps) << caps.error().message;
  for (int port : {m_daemon->port(), static_cast<int>(caps->http_port())}) {
    std::vector<int> held = hold_idle(port, 8);
    ASSERT_EQ(held.size(), 8u);
    int ninth = connect_loopback(port, "127.0.0.2");
    ASSERT_GE(ninth, 0);
    EXPECT_TRUE(closed_within(ninth, milliseconds(2000))) << "the ninth connection from 127.0.0.2, port " << port;
    ::close(ninth);
    for (int fd : held) EXPECT_FALSE(closed_within(fd, milliseconds(1))) << "a connection within the share";
    EXPECT_EQ(run_cli({"stats"}, m_daemon->address()).exit_code, 0);
    for (int fd : held) ::close(fd);
  }
}

// SIGTERM in the middle of a rapid-reset flood and 200 idle sockets: kcached stops cleanly well
// within its shutdown deadline.
using FloodShutdown = DaemonTest;

TEST_F(FloodShutdown, SigtermEndsTheDaemonDuringAFlood) {
  std::atomic<bool> stop{false};
  std::vector<int> held = hold_idle(m_daemon->port(), 200);
  std::thread flood([&] { rapid_reset(m_daemon->port(), "", stop); });
  // The flood has been cut once: the daemon saw it.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (read_file(m_dir.path() / "kcached.log").find("slowing new connections from 127.0.0.2") == std::string::npos &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));  // polling the log for a condition
  }
  auto started = Clock::now();
  int status = m_daemon->stop();
  double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  stop = true;
  flood.join();
  for (int fd : held) ::close(fd);
  EXPECT_EQ(status, 0);
  EXPECT_LT(seconds, 10.0) << "the shutdown deadline is 30 s for calls in progress; none are";
}

}  // namespace
}  // namespace kcache::test
