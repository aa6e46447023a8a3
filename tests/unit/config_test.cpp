// kcached's addresses: the one HOST:PORT parser, the loopback rule, and the HTTP image API's
// default address beside gRPC's.
#include <gtest/gtest.h>

#include "config.hpp"

namespace kcache::server {
namespace {

TEST(ListenAddress, ParsesHostAndPortAndRefusesTheRest) {
  auto v4 = parse_listen_address("127.0.0.1:7878", "--listen");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 7878);
  auto v6 = parse_listen_address("[::1]:0", "--listen");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x", "::1:80",
                          "host:9999999999"}) {
    auto r = parse_listen_address(bad, "--http-listen");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(r.error().message.find("--http-listen"), std::string::npos) << r.error().message;
  }
}

TEST(ListenAddress, LoopbackIsAnAddressLiteralNotAName) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host : {"127.x.example", "127.0.0.1.example", "0.0.0.0", "10.0.0.1", "::", "", "128.0.0.1"}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
}

TEST(ListenAddress, TheHttpImageApiDefaultsToTheNextPortOnTheSameHost) {
  Config c;
  c.listen = "127.0.0.1:7878";
  EXPECT_EQ(*http_listen_address(c), "127.0.0.1:7879");
  c.listen = "[::1]:7000";
  EXPECT_EQ(*http_listen_address(c), "[::1]:7001");
  c.listen = "127.0.0.1:0";
  EXPECT_EQ(*http_listen_address(c), "127.0.0.1:0") << "port 0: any free port for both";
  c.http_listen = "off";
  EXPECT_EQ(*http_listen_address(c), "");
  c.http_listen = "0.0.0.0:9000";
  EXPECT_EQ(*http_listen_address(c), "0.0.0.0:9000");
  c.http_listen.clear();
  c.listen = "127.0.0.1:65535";
  EXPECT_FALSE(http_listen_address(c));
}

}  // namespace
}  // namespace kcache::server
