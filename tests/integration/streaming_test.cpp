// Large images travel in chunks: a 64 MiB image fetched with gRPC's default 4 MiB message limit
// on the client, and Compile replies past their inline budget completed by streamed fetches.
#include "daemon_fixture.hpp"
#include "store/store.hpp"

namespace kcache::test {
namespace {

TEST(Streaming, A64MiBImageIsFetchedUnderTheDefaultMessageLimit) {
  TempDir dir;
  // Entries generated through the store API (not by compiling), then served by a real daemon.
  std::string payload(64 << 20, '\0');
  for (std::size_t i = 0; i < payload.size(); i += 8) payload[i] = static_cast<char>((i * 2654435761u) >> 11);
  Key key{sha256("a 64 MiB module")};
  {
    auto store = server::Store::open({dir.path() / "db", nullptr});
    ASSERT_TRUE(store) << store.error().message;
    auto put = (*store)->put(Side::device, key, {},
                             std::vector{server::make_image({"sm_90", ImageKind::ptx}, payload)});
    ASSERT_TRUE(put) << put.error().message;
  }
  auto daemon = DaemonProcess::start(dir.path() / "db", dir.path() / "kcached.log");
  v1::FetchRequest fetch;
  fetch.set_key(key.hex());
  fetch.set_arch("sm_90");
  // Through gRPC's stream (with its default receive limit of 4 MiB), and over the HTTP API.
  for (bool http : {false, true}) {
    ClientOptions options{daemon->address()};
    options.http_fetch = http;
    Client client(options);
    auto fetched = client.fetch(fetch);
    ASSERT_TRUE(fetched) << (http ? "HTTP: " : "gRPC: ") << fetched.error().message;
    EXPECT_EQ(fetched->data.size(), payload.size());
    EXPECT_TRUE(fetched->data == payload);
    EXPECT_EQ(fetched->image.sha256(), sha256_hex(payload));
  }
  EXPECT_EQ(daemon->stop(), 0);
}

using LargeReplies = DaemonTest;

// A kernel that reads a constant table of `bytes` (a lookup table, as hashing and codec kernels
// carry): PTX writes each byte as a number, so the PTX is 4-5 times the table, while LLVM
// compiles it in a fraction of a second.
std::string table_module(std::size_t bytes) {
  std::string ir = "target triple = \"nvptx64-nvidia-cuda\"\n@table = addrspace(1) constant [" +
                   std::to_string(bytes) + " x i8] c\"";
  for (std::size_t i = 0; i < bytes; ++i) {
    unsigned byte = static_cast<unsigned>((i * 2654435761u) >> 11) & 0xff;
    if (byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\') {
      ir += static_cast<char>(byte);
    } else {
      static const char* const k_hex = "0123456789ABCDEF";
      ir += {'\\', k_hex[byte >> 4], k_hex[byte & 15]};
    }
  }
  return ir + "\", align 16\n"
              "define ptx_kernel void @lookup(ptr addrspace(1) %out, i64 %i) {\n"
              "  %p = getelementptr i8, ptr addrspace(1) @table, i64 %i\n"
              "  %v = load i8, ptr addrspace(1) %p\n"
              "  store i8 %v, ptr addrspace(1) %out\n"
              "  ret void\n"
              "}\n";
}

TEST_F(LargeReplies, CompileImagesPastTheInlineBudgetAreStreamed) {
  // Two archs of a module whose PTX is over 1 MiB each: more than the 2 MiB inline budget.
  v1::CompileRequest request = device_request(table_module(320'000), {"sm_80", "sm_90"});
  auto r = m_client->compile(request);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->images_size(), 2);
  std::uint64_t total = 0;
  for (const v1::Image& image : r->images()) {
    EXPECT_EQ(image.data().size(), image.size()) << image.arch();
    EXPECT_EQ(sha256_hex(image.data()), image.sha256()) << image.arch();
    EXPECT_GT(image.size(), 1u << 20) << image.arch();
    total += image.size();
  }
  EXPECT_GT(total, 2u << 20);

  // A hit past the budget: the daemon sends metadata, the client streams the bytes.
  auto hit = m_client->compile(request);
  ASSERT_TRUE(hit) << hit.error().message;
  EXPECT_EQ(hit->outcome(), v1::OUTCOME_HIT);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(hit->images(i).data(), r->images(i).data());
  request.set_digests_only(true);
  auto digests = m_client->compile(request);
  ASSERT_TRUE(digests);
  EXPECT_EQ(digests->images(0).sha256(), r->images(0).sha256());
  EXPECT_TRUE(digests->images(0).data().empty());
}

}  // namespace
}  // namespace kcache::test
