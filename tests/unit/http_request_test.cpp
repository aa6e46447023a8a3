// The fast routes' request parser (server/net/http_request.hpp): what it takes as a plain GET, and
// everything it leaves to cpp-httplib, whose parser decodes, folds and refuses as HTTP says.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/http_request.hpp"

namespace kcache::server {
namespace {

TEST(PlainGet, TakesAClientsFetchWithItsQueryAndTheHeadersThatMatter) {
  auto get = parse_plain_get(
      "GET /v1/select/device/KEY/sm_90?kind=ptx&driver=12.4 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "authorization:  Bearer abc \r\nAuthorization: Bearer second\r\nX-Other: a b\tc\r\n\r\n");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->path, "/v1/select/device/KEY/sm_90");
  EXPECT_EQ(get->query, "kind=ptx&driver=12.4");
  EXPECT_EQ(get->param("kind"), "ptx");
  EXPECT_EQ(get->param("driver"), "12.4");
  EXPECT_FALSE(get->param("kin"));
  EXPECT_EQ(get->authorization, "Bearer abc");  // the first, trimmed, as cpp-httplib reads it
  EXPECT_FALSE(get->close);

  auto closing = parse_plain_get("GET /v1/fingerprint HTTP/1.1\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(closing);
  EXPECT_TRUE(closing->close);
  EXPECT_TRUE(closing->query.empty());
  auto kept = parse_plain_get("GET /x HTTP/1.1\r\nConnection: keep-alive\r\n\r\n");
  ASSERT_TRUE(kept);
  EXPECT_FALSE(kept->close);
}

TEST(PlainGet, LeavesEveryOtherRequestToCppHttplib) {
  const std::vector<std::string> others = {
      "HEAD /x HTTP/1.1\r\n\r\n",                  // not a GET
      "POST /x HTTP/1.1\r\n\r\n",
      "GET /x HTTP/1.0\r\n\r\n",                   // its keep-alive rules differ
      "GET x HTTP/1.1\r\n\r\n",                    // not an origin path
      "GET http://h/x HTTP/1.1\r\n\r\n",
      "GET /a%2Fb HTTP/1.1\r\n\r\n",               // escapes to decode
      "GET /a?kind=p+x HTTP/1.1\r\n\r\n",
      "GET /a#frag HTTP/1.1\r\n\r\n",
      "GET /a b HTTP/1.1\r\n\r\n",
      "GET /a\x80 HTTP/1.1\r\n\r\n",
      "GET /a?kind HTTP/1.1\r\n\r\n",              // a query item without a value
      "GET /a?kind= HTTP/1.1\r\n\r\n",
      "GET /a?=ptx HTTP/1.1\r\n\r\n",
      "GET /a?kind=p=x HTTP/1.1\r\n\r\n",
      "GET /a HTTP/1.1\r\n folded: line\r\n\r\n",  // obsolete line folding
      "GET /a HTTP/1.1\r\nNo Colon\r\n\r\n",
      "GET /a HTTP/1.1\r\n: empty name\r\n\r\n",
      "GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
      "GET /a HTTP/1.1\r\nX: a\x01z\r\n\r\n",      // a control character in a value
      "GET /a HTTP/1.1\r\nX: \xc3\xa9\r\n\r\n",     // bytes past ASCII
      "GET /a HTTP/1.1\r\nX: y\r\n",               // no blank line
      "GET /a HTTP/1.1",
      "",
  };
  for (const std::string& request : others) EXPECT_FALSE(parse_plain_get(request)) << request;
}

}  // namespace
}  // namespace kcache::server
