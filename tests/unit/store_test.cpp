// The RocksDB store: atomic entries, separate sides, usage counters, and corruption at rest
// detected on read and never served.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <latch>
#include <thread>

#include "compile/object_check.hpp"
#include "store/store.hpp"
#include "test_support.hpp"

namespace kcache::server {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(reopen()); }
  void TearDown() override {
    if (HasFailure()) {
      m_dir.keep();
      std::fprintf(stderr, "kept %s\n", m_dir.path().c_str());
    }
  }
  void reopen(std::uint64_t max_bytes = 0) {
    m_store.reset();
    auto store = Store::open({m_dir.path() / "db", check_host_object, max_bytes});
    ASSERT_TRUE(store) << store.error().message;
    m_store = std::move(*store);
  }
  static Key key(std::string_view seed) { return Key{sha256(seed)}; }

  test::TempDir m_dir;
  std::unique_ptr<Store> m_store;
};

TEST_F(StoreTest, PutThenListAndGetRoundTrip) {
  std::vector<Image> images = {make_image({"sm_80", ImageKind::ptx}, "ptx for 80", {KernelInfo{.name = "k", .registers = 12}}),
                               make_image({"sm_90", ImageKind::cubin}, std::string(100000, 'c'))};
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, images));
  auto listed = m_store->list(Side::device, key("a"));
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 2u);
  auto got = m_store->get(Side::device, key("a"), {"sm_80", ImageKind::ptx});
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)->data, "ptx for 80");
  ASSERT_EQ((*got)->meta.kernels.size(), 1u);
  EXPECT_EQ((*got)->meta.kernels[0].registers, 12u);
  auto big = m_store->get(Side::device, key("a"), {"sm_90", ImageKind::cubin});
  ASSERT_TRUE(big);
  EXPECT_EQ((*big)->data, std::string(100000, 'c'));
  StoreStats s = m_store->stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.images, 2u);
  EXPECT_EQ(s.bytes, 10u + 100000u);
}

TEST_F(StoreTest, RepeatedReadsComeFromTheHotCacheAndWritesDropIt) {
  const ImageRequest which{"sm_90", ImageKind::ptx};
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(which, "first")}));
  auto first = m_store->get(Side::device, key("a"), which);
  ASSERT_TRUE(first);
  EXPECT_EQ(m_store->stats().hot_cache_hits, 0u);
  EXPECT_EQ(m_store->stats().hot_cache_bytes, 5u);
  auto again = m_store->get(Side::device, key("a"), which);
  ASSERT_TRUE(again);
  EXPECT_EQ(m_store->stats().hot_cache_hits, 1u);
  EXPECT_EQ(again->get(), first->get()) << "the same bytes in memory, not read again";

  // A write of the entry drops it: the next read sees the new bytes.
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(which, "second")}));
  auto replaced = m_store->get(Side::device, key("a"), which);
  ASSERT_TRUE(replaced);
  EXPECT_EQ((*replaced)->data, "second");
  // So does removing it, and the other side never sees it.
  ASSERT_TRUE(m_store->get(Side::device, key("a"), which));
  EXPECT_FALSE(m_store->get(Side::host, key("a"), which));
  ASSERT_TRUE(m_store->remove(Side::device, key("a")));
  auto removed = m_store->get(Side::device, key("a"), which);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code, ErrorCode::k_not_found);
  EXPECT_EQ(m_store->stats().hot_cache_bytes, 0u);
}

// Store::list answers from the hot cache after a first read (no RocksDB iterator per Fetch), and
// every write or removal of the key replaces what it answers.
// Clients that ask at once for an image the hot cache has not seen yet read it from RocksDB (and
// hash it) once between them, all sharing that one copy, rather than one copy each at once.
TEST_F(StoreTest, ConcurrentReadsOfOneImageReadItOnceAndShareIt) {
  const ImageRequest which{"sm_90", ImageKind::cubin};
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(which, std::string(8 << 20, 'c'))}));
  constexpr int k_readers = 8;
  std::latch start(k_readers);
  std::vector<const Image*> got(k_readers, nullptr);
  std::vector<std::thread> readers;
  for (int i = 0; i < k_readers; ++i) {
    readers.emplace_back([&, i] {
      start.arrive_and_wait();
      auto image = m_store->get(Side::device, key("a"), which);
      if (image && (*image)->data.size() == (8u << 20)) got[i] = image->get();
    });
  }
  for (auto& t : readers) t.join();
  StoreStats s = m_store->stats();
  EXPECT_EQ(s.disk_reads, 1u) << "each of " << k_readers << " concurrent gets read the image itself";
  EXPECT_EQ(s.shared_reads + s.hot_cache_hits, static_cast<std::uint64_t>(k_readers - 1));
  for (const Image* image : got) EXPECT_EQ(image, got[0]) << "one copy, shared";
  EXPECT_NE(got[0], nullptr);
  // A read that finds nothing is shared too, and leaves nothing behind: the next read looks again.
  EXPECT_FALSE(m_store->get(Side::device, key("b"), which));
  EXPECT_EQ(m_store->stats().disk_reads, 2u);
  EXPECT_FALSE(m_store->get(Side::device, key("b"), which));
  EXPECT_EQ(m_store->stats().disk_reads, 3u);
}

// The hot image's transfer checksum is computed by its first answer and kept for the next; a copy
// of the image, whose bytes may change, computes its own.
TEST(ImageDerived, IsComputedOnceAndNotCarriedByCopies) {
  Image image = make_image({"sm_90", ImageKind::ptx}, "bytes");
  int computed = 0;
  auto compute = [&] { return static_cast<std::uint64_t>(++computed * 100); };
  EXPECT_EQ(image.transfer_checksum.get(compute), 100u);
  EXPECT_EQ(image.transfer_checksum.get(compute), 100u);
  EXPECT_EQ(computed, 1);
  Image copy = image;
  copy.data = "other bytes";
  EXPECT_EQ(copy.transfer_checksum.get(compute), 200u) << "a copy computes its own";
  Image moved = std::move(copy);
  EXPECT_EQ(moved.transfer_checksum.get(compute), 300u);
  image = moved;
  EXPECT_EQ(image.transfer_checksum.get(compute), 400u) << "an assigned image computes its own";
}

TEST_F(StoreTest, TheImageListIsKeptInMemoryAndWritesReplaceIt) {
  const ImageRequest ptx{"sm_80", ImageKind::ptx}, cubin{"sm_90", ImageKind::cubin};
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(ptx, "one")}));
  std::uint64_t before = m_store->stats().hot_cache_bytes;
  auto first = m_store->list(Side::device, key("a"));
  ASSERT_TRUE(first);
  ASSERT_EQ(first->size(), 1u);
  EXPECT_GT(m_store->stats().hot_cache_bytes, before) << "the list is kept, and counted";
  auto memory = m_store->list(Side::device, key("a"), Store::Reach::memory);
  ASSERT_TRUE(memory);
  EXPECT_EQ(memory->size(), 1u);
  EXPECT_EQ((*memory)[0].sha256, (*first)[0].sha256);

  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(ptx, "one"), make_image(cubin, "two")}));
  auto both = m_store->list(Side::device, key("a"), Store::Reach::memory);
  ASSERT_TRUE(both);
  EXPECT_EQ(both->size(), 2u) << "a write replaces the kept list";
  EXPECT_EQ(m_store->list(Side::host, key("a"))->size(), 0u) << "the other side is another list";
  ASSERT_TRUE(m_store->remove(Side::device, key("a")));
  EXPECT_EQ(m_store->list(Side::device, key("a"))->size(), 0u);
  EXPECT_EQ(m_store->stats().hot_cache_bytes, 0u);
}

// Readers racing a writer never leave a replaced image in the hot cache: once put() has
// returned, every read sees the new bytes. (The cache was dropped before the write, so a read in
// between cached the old image for good.) A stress loop, bounded in time.
TEST_F(StoreTest, TheHotCacheNeverKeepsAnImageAWriteReplaced) {
  const ImageRequest which{"sm_90", ImageKind::ptx};
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image(which, "version 0")}));
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      while (!stop) {
        (void)m_store->get(Side::device, key("a"), which);
        (void)m_store->list(Side::device, key("a"));
      }
    });
  }
  int stale = 0, version = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until && stale == 0) {
    std::string data = "version " + std::to_string(++version);
    // Each write adds an image of an arch of its own (a write adds to the entry): the list, kept
    // too, must follow.
    std::vector<Image> images{make_image(which, data), make_image({"sm_" + std::to_string(100 + version), ImageKind::ptx}, data)};
    ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, images));
    auto got = m_store->get(Side::device, key("a"), which);
    ASSERT_TRUE(got);
    if ((*got)->data != data) ++stale;
    auto listed = m_store->list(Side::device, key("a"));
    ASSERT_TRUE(listed);
    if (listed->size() != static_cast<std::size_t>(version) + 1) ++stale;
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(stale, 0) << "a read after put() returned an older image or list (" << version << " writes)";
}

// An entry removed while it is read (eviction, purge) reads as absent, never as corrupt: get()
// reads the metadata and the payload from one snapshot.
TEST_F(StoreTest, AnEntryRemovedDuringAReadIsNotCorrupt) {
  m_store.reset();
  StoreOptions options{m_dir.path() / "db", check_host_object};
  options.hot_cache_bytes = 0;  // every read goes to RocksDB
  auto store = Store::open(options);
  ASSERT_TRUE(store) << store.error().message;
  m_store = std::move(*store);
  const ImageRequest which{"sm_90", ImageKind::ptx};
  const std::vector<Image> images{make_image(which, std::string(1000, 'p'))};
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) (void)m_store->get(Side::device, key("a"), which);
  });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int rounds = 0;
  while (std::chrono::steady_clock::now() < until && m_store->stats().corrupt_dropped == 0) {
    ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, images));
    ASSERT_TRUE(m_store->remove(Side::device, key("a")));
    ++rounds;
  }
  stop = true;
  reader.join();
  EXPECT_EQ(m_store->stats().corrupt_dropped, 0u) << "after " << rounds << " removals";
}

TEST_F(StoreTest, SidesNeverSeeEachOther) {
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, "dev")}));
  auto host_list = m_store->list(Side::host, key("a"));
  ASSERT_TRUE(host_list);
  EXPECT_TRUE(host_list->empty());
  auto host_get = m_store->get(Side::host, key("a"), {"sm_90", ImageKind::ptx});
  ASSERT_FALSE(host_get);
  EXPECT_EQ(host_get.error().code, ErrorCode::k_not_found);
}

TEST_F(StoreTest, ReplacingAnImageKeepsCountersExactAndSurvivesReopen) {
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, "12345")}));
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, "12")}));
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_80", ImageKind::ptx}, "123")}));
  std::string object = test::host_object_with_llc("define i32 @f() {\n  ret i32 1\n}\n");
  ASSERT_TRUE(m_store->put(Side::host, key("b"), {}, std::vector{make_image({"x86_64", ImageKind::object}, object)}));
  reopen();
  StoreStats s = m_store->stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.images, 3u);
  EXPECT_EQ(s.bytes, 2u + 3u + object.size());
}

TEST_F(StoreTest, RefusesAnImageWhoseDigestDoesNotMatch) {
  Image image = make_image({"sm_90", ImageKind::ptx}, "data");
  image.data = "tampered";
  image.meta.size = image.data.size();
  auto put = m_store->put(Side::device, key("a"), {}, std::vector{image});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, ErrorCode::k_internal);
  EXPECT_EQ(m_store->stats().entries, 0u);
}

// Flips 16 bytes at `offset` in the largest file whose name ends with `suffix` (the one holding
// the image: the meta family's files are tiny). Returns whether a file was found.
bool flip_bytes(const std::filesystem::path& db, const std::string& suffix, std::size_t offset) {
  std::filesystem::path largest;
  std::uintmax_t size = 0;
  for (const auto& f : std::filesystem::directory_iterator(db)) {
    if (f.path().filename().string().ends_with(suffix) && f.file_size() > size) {
      largest = f.path();
      size = f.file_size();
    }
  }
  if (size <= offset + 16) return false;
  {
    std::fstream io(largest, std::ios::in | std::ios::out | std::ios::binary);
    for (std::size_t i = 0; i < 16; ++i) {
      io.seekg(static_cast<std::streamoff>(offset + i));
      char c = 0;
      io.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      io.seekp(static_cast<std::streamoff>(offset + i));
      io.write(&c, 1);
    }
  }
  return true;
}

TEST_F(StoreTest, CorruptBlobIsDroppedNotServed) {
  // 1 MiB of incompressible-ish data goes to a blob file.
  std::string payload;
  for (int i = 0; i < (1 << 20); ++i) payload += static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::cubin}, payload)}));
  ASSERT_TRUE(m_store->flush());
  m_store.reset();
  ASSERT_TRUE(flip_bytes(m_dir.path() / "db", ".blob", 4096));
  ASSERT_NO_FATAL_FAILURE(reopen());
  auto got = m_store->get(Side::device, key("a"), {"sm_90", ImageKind::cubin});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::k_not_found);
  EXPECT_EQ(m_store->stats().corrupt_dropped, 1u);
  auto listed = m_store->list(Side::device, key("a"));
  ASSERT_TRUE(listed);
  EXPECT_TRUE(listed->empty());  // the whole entry is gone; the next compile rebuilds it
  EXPECT_EQ(m_store->stats().entries, 0u);
  EXPECT_EQ(m_store->stats().bytes, 0u);
}

TEST_F(StoreTest, CorruptTableBlockIsDroppedNotServed) {
  std::string payload;  // incompressible, below the blob threshold: it lands in a table block
  for (int i = 0; i < 3000; ++i) payload += static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(m_store->put(Side::device, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, payload)}));
  ASSERT_TRUE(m_store->flush());
  m_store.reset();
  ASSERT_TRUE(flip_bytes(m_dir.path() / "db", ".sst", 1000));
  ASSERT_NO_FATAL_FAILURE(reopen());
  auto got = m_store->get(Side::device, key("a"), {"sm_90", ImageKind::ptx});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::k_not_found);
  EXPECT_EQ(m_store->stats().corrupt_dropped, 1u);
}

// The last line of defence, tested on its own: objects made without kcache's guard.
TEST_F(StoreTest, RefusesHostObjectsNamingDeviceOnlySymbols) {
  struct Case {
    const char* name;
    std::string ir;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"call", "declare ptr @gpu_malloc(i64)\ndefine ptr @f() {\n  %p = call ptr @gpu_malloc(i64 8)\n  ret ptr %p\n}\n",
       "gpu_malloc (referenced)"},
      {"definition", "define void @gpu_helper() {\n  ret void\n}\n", "gpu_helper (defined)"},
      {"pointer in data", "declare void @gpu_signal_exception()\n@table = global ptr @gpu_signal_exception\n",
       "gpu_signal_exception (referenced)"},
      {"ROCm math library call",
       "declare float @__ocml_exp_f32(float)\n"
       "define float @f(float %x) {\n  %y = call float @__ocml_exp_f32(float %x)\n  ret float %y\n}\n",
       "__ocml_exp_f32 (referenced)"},
      {"ROCm kernel library definition", "define i64 @__ockl_get_local_id(i32 %d) {\n  ret i64 0\n}\n",
       "__ockl_get_local_id (defined)"},
      {"ROCm control constant", "@__oclc_ISA_version = constant i32 9000\n", "__oclc_ISA_version (defined)"},
  };
  for (const Case& c : cases) {
    Image image = make_image({"x86_64", ImageKind::object}, test::host_object_with_llc(c.ir));
    auto put = m_store->put(Side::host, key(c.name), {}, std::vector{image});
    ASSERT_FALSE(put) << c.name;
    EXPECT_EQ(put.error().code, ErrorCode::k_internal);
    EXPECT_NE(put.error().message.find(c.expect), std::string::npos) << put.error().message;
    auto listed = m_store->list(Side::host, key(c.name));
    ASSERT_TRUE(listed);
    EXPECT_TRUE(listed->empty());
  }
  EXPECT_EQ(m_store->stats().entries, 0u);
  std::string clean = test::host_object_with_llc("define i32 @f() {\n  ret i32 1\n}\n");
  EXPECT_TRUE(m_store->put(Side::host, key("clean"), {}, std::vector{make_image({"x86_64", ImageKind::object}, clean)}));
}

TEST_F(StoreTest, RefusesImagesOfTheOtherSideAndFailsClosedWithoutACheck) {
  auto device_object = m_store->put(Side::device, key("a"), {}, std::vector{make_image({"x86_64", ImageKind::object}, "o")});
  ASSERT_FALSE(device_object);
  EXPECT_NE(device_object.error().message.find("other side"), std::string::npos);
  auto host_ptx = m_store->put(Side::host, key("a"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, "ptx")});
  ASSERT_FALSE(host_ptx);

  m_store.reset();
  auto unchecked = Store::open({m_dir.path() / "db", nullptr});
  ASSERT_TRUE(unchecked);
  std::string clean = test::host_object_with_llc("define i32 @f() {\n  ret i32 1\n}\n");
  auto put = (*unchecked)->put(Side::host, key("b"), {}, std::vector{make_image({"x86_64", ImageKind::object}, clean)});
  ASSERT_FALSE(put);
  EXPECT_NE(put.error().message.find("no host image check"), std::string::npos);
}

// Eviction and verify.

class EvictionTest : public StoreTest {
 protected:
  static constexpr std::uint64_t k_image = 16 * 1024;
  static constexpr std::uint64_t k_cap = 100 * 1024;  // room for six images
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(reopen(k_cap)); }

  Expected<void> put(std::string_view name) {
    return m_store->put(Side::device, key(name), {},
                        std::vector{make_image({"sm_90", ImageKind::ptx}, std::string(k_image, name[0]))});
  }
  bool present(std::string_view name) {
    auto listed = m_store->list(Side::device, key(name));
    return listed && !listed->empty();
  }
  // Access times have millisecond resolution: lets the clock move on, so order is unambiguous.
  static void next_millisecond() {
    auto start = std::chrono::system_clock::now();
    while (std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now()) <=
           std::chrono::floor<std::chrono::milliseconds>(start)) {
      std::this_thread::yield();
    }
  }
};

TEST_F(EvictionTest, AWriteEvictsTheLeastRecentlyUsedWholeAndUsageNeverPassesTheCap) {
  for (std::string_view name : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(put(name));
    next_millisecond();
  }
  ASSERT_TRUE(present("a"));  // a is now the most recently used
  next_millisecond();
  for (std::string_view name : {"f", "g", "h"}) {
    ASSERT_TRUE(put(name));
    EXPECT_LE(m_store->stats().bytes, k_cap);
    next_millisecond();
  }
  EXPECT_TRUE(present("a"));
  EXPECT_FALSE(present("b"));  // the oldest untouched ones went first
  EXPECT_TRUE(present("h"));
  StoreStats s = m_store->stats();
  EXPECT_GE(s.evictions, 2u);
  EXPECT_EQ(s.evicted_bytes, s.evictions * k_image);
  EXPECT_EQ(s.bytes, s.entries * k_image);  // nothing removed in part
  EXPECT_EQ(s.images, s.entries);
}

TEST_F(EvictionTest, TheBackgroundThreadEvictsDownToTheLowWaterMark) {
  for (std::string_view name : {"a", "b", "c", "d", "e", "f"}) ASSERT_TRUE(put(name));  // 96 KiB: over 90%
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((m_store->stats().bytes > k_cap / 10 * 8 || m_store->stats().evictions == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_LE(m_store->stats().bytes, k_cap / 10 * 8);
  EXPECT_EQ(m_store->stats().evictions, 1u);
}

TEST_F(EvictionTest, AccessTimesSurviveARestart) {
  for (std::string_view name : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(put(name));
    next_millisecond();
  }
  ASSERT_TRUE(present("a"));
  ASSERT_NO_FATAL_FAILURE(reopen(k_cap));  // closing flushes the noted access of a
  ASSERT_TRUE(put("f"));
  ASSERT_TRUE(put("g"));
  EXPECT_TRUE(present("a"));
  EXPECT_FALSE(present("b"));
}

TEST_F(EvictionTest, ImagesLargerThanTheWholeCacheAreRefusedAndNothingIsEvicted) {
  ASSERT_TRUE(put("a"));
  auto huge = m_store->put(Side::device, key("huge"), {},
                           std::vector{make_image({"sm_90", ImageKind::ptx}, std::string(k_cap + 1, 'x'))});
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code, ErrorCode::k_resource_exhausted);
  EXPECT_NE(huge.error().message.find("larger than the whole cache"), std::string::npos);
  EXPECT_TRUE(present("a"));
  EXPECT_EQ(m_store->stats().evictions, 0u);
}

TEST_F(StoreTest, VerifyFindsACorruptEntryAndRepairRemovesIt) {
  std::string payload;
  for (int i = 0; i < (1 << 20); ++i) payload += static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(m_store->put(Side::device, key("bad"), {}, std::vector{make_image({"sm_90", ImageKind::cubin}, payload)}));
  ASSERT_TRUE(m_store->put(Side::device, key("good"), {}, std::vector{make_image({"sm_90", ImageKind::ptx}, "ptx")}));
  std::string object = test::host_object_with_llc("define i32 @f() {\n  ret i32 1\n}\n");
  ASSERT_TRUE(m_store->put(Side::host, key("host"), {}, std::vector{make_image({"x86_64", ImageKind::object}, object)}));
  auto clean = m_store->verify(false);
  ASSERT_TRUE(clean) << clean.error().message;
  EXPECT_TRUE(clean->problems.empty());
  EXPECT_FALSE(clean->counters_wrong);
  EXPECT_EQ(clean->entries, 3u);

  ASSERT_TRUE(m_store->flush());
  m_store.reset();
  ASSERT_TRUE(flip_bytes(m_dir.path() / "db", ".blob", 4096));
  ASSERT_NO_FATAL_FAILURE(reopen());
  auto found = m_store->verify(false);
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_EQ(found->problems.size(), 1u);  // and the walk went on past it
  EXPECT_EQ(found->problems[0].key_hex, key("bad").hex());
  EXPECT_NE(found->problems[0].what.find("image sm_90.cubin: unreadable payload: Corruption"), std::string::npos)
      << found->problems[0].what;
  EXPECT_EQ(found->entries, 2u);
  EXPECT_EQ(m_store->stats().entries, 3u);  // reporting removes nothing

  auto repaired = m_store->verify(true);
  ASSERT_TRUE(repaired);
  EXPECT_EQ(repaired->removed, 1u);
  auto after = m_store->verify(false);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->problems.empty());
  EXPECT_FALSE(after->counters_wrong);
  EXPECT_EQ(m_store->stats().entries, 2u);
  EXPECT_EQ(m_store->stats().bytes, 3u + object.size());
}

}  // namespace
}  // namespace kcache::server
