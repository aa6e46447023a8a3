// The remote tier's entry encoding (server/remote/entry.hpp): what a daemon writes to Redis, and
// what it accepts back. Bytes from Redis are hostile: only images whose fleet HMAC is valid and
// whose bytes match the signed digest are served; a half-present entry is a miss.
#include <gtest/gtest.h>

#include <fstream>

#include "remote/entry.hpp"
#include "test_support.hpp"

namespace kcache::server::remote {
namespace {

const FleetSecret k_secret(std::string(32, 's'));
const Digest k_fingerprint = sha256("toolchain");
const Key k_key{sha256("key")};

std::vector<Image> two_images() {
  return {make_image({"sm_80", ImageKind::ptx}, "// ptx for sm_80\n.version 9.0\n", {{"k", 32, 0, 0, 0, 0}}),
          make_image({"sm_80", ImageKind::cubin}, std::string("\x7f" "ELF\0\0binary", 12))};
}

// The fields as HGETALL returns them: name, value, name, value...
std::vector<std::string> flat(const std::vector<Field>& fields) {
  std::vector<std::string> out;
  for (const auto& [name, value] : fields) {
    out.push_back(name);
    out.push_back(value);
  }
  return out;
}

std::vector<std::string> written(Side side = Side::device, const std::vector<Image>& images = two_images()) {
  EntryRecord record{InputFormat::llvm_text, "nvptx64-nvidia-cuda", 1700000000};
  return flat(encode_fields(k_secret, side, k_key, k_fingerprint, record, images));
}

std::string& value_of(std::vector<std::string>& f, std::string_view name) {
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) {
    if (f[i] == name) return f[i + 1];
  }
  throw std::runtime_error("no field " + std::string(name));
}

TEST(RemoteEntry, RoundTripsEveryImageWithItsMetadata) {
  DecodedEntry e = decode_fields(k_secret, Side::device, k_key, k_fingerprint, written());
  EXPECT_TRUE(e.rejected.empty());
  EXPECT_FALSE(e.partial);
  ASSERT_EQ(e.images.size(), 2u);
  std::vector<Image> sent = two_images();
  for (const Image& got : e.images) {
    auto match = std::find_if(sent.begin(), sent.end(), [&](const Image& s) { return s.meta.id() == got.meta.id(); });
    ASSERT_NE(match, sent.end());
    EXPECT_EQ(got.data, match->data);
    EXPECT_EQ(got.meta.sha256, match->meta.sha256);
    EXPECT_EQ(got.meta.kernels, match->meta.kernels);
  }
  EXPECT_EQ(e.record.target, "nvptx64-nvidia-cuda");
  EXPECT_EQ(entry_key(Side::device, k_key), "kcache:{d:" + k_key.hex() + "}");
  EXPECT_TRUE(lease_key(Side::device, k_key, "flight").starts_with(entry_key(Side::device, k_key) + ":lease:"))
      << "a lease shares its entry's hash tag, so its cluster slot";
}

// Someone with Redis access but not the secret rewrites an image and its metadata so size and
// digest match the new bytes: the tag no longer verifies.
TEST(RemoteEntry, OtherBytesWithAMatchingDigestButNoValidTagAreRefused) {
  std::vector<std::string> f = written();
  Image planted = make_image({"sm_80", ImageKind::cubin}, "planted bytes");
  std::string& meta = value_of(f, "m:sm_80.cubin");
  std::string tag = meta.substr(meta.size() - 32);
  meta = written(Side::device, {planted})[3].substr(0, written(Side::device, {planted})[3].size() - 32) + tag;
  value_of(f, "i:sm_80.cubin") = planted.data;
  DecodedEntry e = decode_fields(k_secret, Side::device, k_key, k_fingerprint, f);
  ASSERT_EQ(e.images.size(), 1u);
  EXPECT_EQ(e.images[0].meta.kind, ImageKind::ptx);
  ASSERT_EQ(e.rejected.size(), 1u);
  EXPECT_NE(e.rejected[0].find("HMAC"), std::string::npos) << e.rejected[0];
}

TEST(RemoteEntry, BytesThatDoNotMatchTheSignedDigestAreRefused) {
  std::vector<std::string> f = written();
  value_of(f, "i:sm_80.ptx")[3] ^= 1;
  DecodedEntry e = decode_fields(k_secret, Side::device, k_key, k_fingerprint, f);
  ASSERT_EQ(e.rejected.size(), 1u);
  EXPECT_NE(e.rejected[0].find("digest"), std::string::npos);
  EXPECT_EQ(e.images.size(), 1u);
}

TEST(RemoteEntry, AnotherSecretKeyFingerprintOrSideVerifiesNothing) {
  std::vector<std::string> f = written();
  EXPECT_TRUE(decode_fields(FleetSecret(std::string(32, 't')), Side::device, k_key, k_fingerprint, f).images.empty());
  EXPECT_TRUE(decode_fields(k_secret, Side::device, Key{sha256("other key")}, k_fingerprint, f).images.empty())
      << "an entry copied under another key";
  EXPECT_TRUE(decode_fields(k_secret, Side::device, k_key, sha256("other toolchain"), f).images.empty());
  DecodedEntry host = decode_fields(k_secret, Side::host, k_key, k_fingerprint, f);
  EXPECT_TRUE(host.images.empty()) << "device images are never read as host ones";
}

TEST(RemoteEntry, AHalfPresentEntryIsAMissNotAnError) {
  std::vector<std::string> f = written();
  std::vector<std::string> without_bytes, without_record;
  for (std::size_t i = 0; i < f.size(); i += 2) {
    if (f[i] != "i:sm_80.cubin") without_bytes.insert(without_bytes.end(), {f[i], f[i + 1]});
    if (f[i] != "r") without_record.insert(without_record.end(), {f[i], f[i + 1]});
  }
  DecodedEntry a = decode_fields(k_secret, Side::device, k_key, k_fingerprint, without_bytes);
  EXPECT_TRUE(a.partial);
  EXPECT_TRUE(a.rejected.empty());
  EXPECT_EQ(a.images.size(), 1u) << "the whole image still verifies";
  DecodedEntry b = decode_fields(k_secret, Side::device, k_key, k_fingerprint, without_record);
  EXPECT_TRUE(b.partial);
  EXPECT_TRUE(b.images.empty());
}

TEST(RemoteEntry, OddFieldsAreNamedAndNeverServed) {
  std::vector<std::string> f = written();
  for (std::vector<std::string> extra : std::vector<std::vector<std::string>>{
           {"m:../../etc/passwd.ptx", "x", "i:../../etc/passwd.ptx", "y"},
           {"m:sm_80.exe", "x", "i:sm_80.exe", "y"},
           {"m:sm_80.ptx"},  // odd count
           {"zz", "unknown field"},
           {"m:sm_90.ptx", "short", "i:sm_90.ptx", "bytes"}}) {
    std::vector<std::string> g = f;
    if (extra.size() == 1) {
      g.push_back(extra[0]);
    } else {
      for (std::size_t i = 0; i + 1 < extra.size(); i += 2) {
        // Replace an existing field of the same name (HGETALL has each once), else add it.
        auto it = std::find(g.begin(), g.end(), extra[i]);
        if (it != g.end() && (it - g.begin()) % 2 == 0) *(it + 1) = extra[i + 1];
        else g.insert(g.end(), {extra[i], extra[i + 1]});
      }
    }
    DecodedEntry e = decode_fields(k_secret, Side::device, k_key, k_fingerprint, g);
    EXPECT_FALSE(e.rejected.empty()) << extra[0];
    for (const Image& i : e.images) EXPECT_EQ(i.meta.arch, "sm_80") << extra[0];
  }
}

TEST(RemoteEntry, TheFleetSecretMustBeLongEnough) {
  test::TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.path() / name, std::ios::binary) << bytes;
    return dir.path() / name;
  };
  EXPECT_TRUE(FleetSecret::read(write("ok", std::string(64, 'a') + "\n")));
  auto short_one = FleetSecret::read(write("short", "hunter2\n"));
  ASSERT_FALSE(short_one);
  EXPECT_NE(short_one.error().message.find("at least 32"), std::string::npos) << short_one.error().message;
  EXPECT_FALSE(FleetSecret::read(dir.path() / "absent"));
  EXPECT_FALSE(FleetSecret::read(write("huge", std::string(100000, 'a'))));
  EXPECT_NE(k_secret.tag("a"), FleetSecret(std::string(32, 't')).tag("a"));
}

}  // namespace
}  // namespace kcache::server::remote
