// The gRPC gate's parts without a daemon: the HTTP/2 frame reader, and accept(2) that survives
// running out of descriptors (server/net/).
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/admission.hpp"
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
