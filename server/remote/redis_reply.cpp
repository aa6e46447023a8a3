#include "remote/redis_reply.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>  // sdsalloc: the size of a reader's buffer

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <new>

#include "remote/redis_reader.hpp"

namespace kcache::server::remote {
namespace {

// hiredis's own reply objects would be copied once more into RedisReply (for a 64 KiB image, a
// fresh 64 KiB that the first touch of its pages makes the largest cost of a remote hit). Its
// reader takes functions that build the reply instead; they also count the reply's bytes against
// the caps, so that a hostile value is refused before it is held whole.

// How much read buffer a connection keeps between replies. hiredis's default (16 KiB) gives a
// bigger buffer back after every reply and grows a new one by doubling for the next: for each
// 64 KiB value, 112 KiB of copies and fresh pages. A reply's first k_kept_read_buffer bytes are
// free of the shared budget (RedisOptions::max_held_reply_bytes): a connection holds them anyway.
constexpr std::size_t k_kept_read_buffer = 1 << 20;

// The bulk string hiredis's reader waits for: its announced length, and the buffer length at
// which it will be whole (hiredis builds a bulk string only once all its bytes are buffered).
struct PendingBulk {
  std::size_t length = 0;
  std::size_t buffer_end = 0;
};

// Reads hiredis 0.14's reader state (read.h's public struct): when the current task is a bulk
// string, `pos` is at its length line. nullopt when the reader waits for anything else, or the
// line is not whole yet or is not a length (hiredis then refuses it itself).
std::optional<PendingBulk> pending_bulk(const redisReader& r) {
  if (r.ridx < 0 || r.rstack[r.ridx].type != REDIS_REPLY_STRING || r.pos >= r.len) return std::nullopt;
  std::string_view rest(r.buf + r.pos, r.len - r.pos);
  std::size_t eol = rest.find("\r\n");
  if (eol == std::string_view::npos || eol == 0 || eol > 20) return std::nullopt;
  unsigned long long length = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + eol, length);
  if (ec != std::errc() || end != rest.data() + eol || length > SIZE_MAX / 4) return std::nullopt;
  return PendingBulk{static_cast<std::size_t>(length), r.pos + eol + 2 + static_cast<std::size_t>(length) + 2};
}

// A connection's reader state (the reader's privdata): the reply being built, held to the cap on
// one reply and to the memory all replies share.
struct ReplyBudget {
  std::size_t limit = 0;                // RedisOptions::max_reply_bytes
  std::shared_ptr<ReplyMemory> memory;  // all of the client's replies; null: no shared limit
  const redisReader* reader = nullptr;  // whose buffer holds the reply's bytes until they are built
  std::size_t built = 0;                // the reply's values so far: strings and array slots
  std::size_t held = 0;                 // what the reply has taken from `memory`
  enum class Over { none, reply, memory };
  Over over = Over::none;  // refused; the connection is spent

  ReplyBudget(std::size_t limit, std::shared_ptr<ReplyMemory> memory) : limit(limit), memory(std::move(memory)) {}
  ~ReplyBudget() { give_back(held); }
  ReplyBudget(const ReplyBudget&) = delete;
  ReplyBudget& operator=(const ReplyBudget&) = delete;

  // Whether the reply, at `size` bytes of values and `footprint` bytes of memory, may go on;
  // takes what the footprint needs beyond what the reply holds (a footprint only grows).
  bool allows(std::size_t size, std::size_t footprint) {
    if (over != Over::none) return false;
    if (size > limit) {
      over = Over::reply;
      return false;
    }
    std::size_t charged = footprint > k_kept_read_buffer ? footprint - k_kept_read_buffer : 0;
    if (memory == nullptr || charged <= held) return true;
    if (!memory->take(charged - held)) {
      over = Over::memory;
      return false;
    }
    held = charged;
    return true;
  }
  std::size_t buffer_bytes() const { return reader != nullptr && reader->buf != nullptr ? sdsalloc(reader->buf) : 0; }

  // A value of `bytes` about to be built (its bytes still in the read buffer).
  bool take(std::size_t bytes) {
    if (bytes > SIZE_MAX / 4 || built + bytes > SIZE_MAX / 4) return allows(SIZE_MAX, SIZE_MAX);
    built += bytes;
    return allows(built, built + buffer_bytes());
  }
  // Before reading more: the reply with what waits in the buffer, and a bulk string announced
  // there at its whole length (built once, and buffered whole until then).
  bool admits(const redisReader& r) {
    auto bulk = pending_bulk(r);
    std::size_t waiting = r.len - std::min(r.pos, r.len);
    std::size_t size = built + std::max(waiting, bulk ? bulk->length : 0);
    std::size_t buffer = std::max(buffer_bytes(), bulk ? bulk->buffer_end : 0);
    return allows(size, built + buffer + (bulk ? bulk->length : 0));
  }
  // A reply is whole: what it holds of `memory` for its values goes with it (what was for the read
  // buffer, if that was let go, is given back); the next one starts from nothing.
  std::shared_ptr<const ReplyHold> finish() {
    std::size_t footprint = built + buffer_bytes();
    std::size_t charged = footprint > k_kept_read_buffer ? footprint - k_kept_read_buffer : 0;
    if (charged < held) {
      give_back(held - charged);
      held = charged;
    }
    std::shared_ptr<const ReplyHold> hold;
    if (held > 0) hold = std::make_shared<const ReplyHold>(memory, std::exchange(held, 0));
    built = 0;
    return hold;
  }
  void give_back(std::size_t bytes) {
    if (memory != nullptr && bytes > 0) memory->give_back(bytes);
  }

  std::string refusal() const {
    if (over == Over::memory) {
      return "a reply that would take the replies held at once past " + std::to_string(memory->limit()) + " bytes";
    }
    return "a reply over " + std::to_string(limit) + " bytes";
  }
};

// Where the object for `task` goes: a new root, or its slot in the parent array, which was sized
// for all its elements when it was made (so the pointer stays valid).
RedisReply* reply_slot(const redisReadTask* task) {
  if (task->parent == nullptr) return new (std::nothrow) RedisReply;
  auto* parent = static_cast<RedisReply*>(task->parent->obj);
  return &parent->elements[static_cast<std::size_t>(task->idx)];
}

ReplyBudget& budget_of(const redisReadTask* task) { return *static_cast<ReplyBudget*>(task->privdata); }
ReplyBudget& budget_of(redisContext* c) { return *static_cast<ReplyBudget*>(c->reader->privdata); }

// Each returns null (hiredis then fails the reply as "Out of memory") when memory or the budget
// runs out; none lets an exception into hiredis's C code.
void* create_string(const redisReadTask* task, char* str, std::size_t len) {
  if (!budget_of(task).take(len)) return nullptr;
  RedisReply* r = reply_slot(task);
  if (r == nullptr) return nullptr;
  r->type = task->type == REDIS_REPLY_STRING   ? RedisReply::Type::string
            : task->type == REDIS_REPLY_STATUS ? RedisReply::Type::status
                                               : RedisReply::Type::error;
  try {
    r->str.assign(str, len);
  } catch (const std::bad_alloc&) {
    if (task->parent == nullptr) delete r;
    return nullptr;
  }
  return r;
}

void* create_array(const redisReadTask* task, int elements) {
  // A count below -1 is malformed (-1, a nil array, goes to create_nil).
  if (elements < 0 || !budget_of(task).take(static_cast<std::size_t>(elements) * sizeof(RedisReply))) return nullptr;
  RedisReply* r = reply_slot(task);
  if (r == nullptr) return nullptr;
  r->type = RedisReply::Type::array;
  try {
    r->elements.resize(static_cast<std::size_t>(elements));
  } catch (const std::bad_alloc&) {
    if (task->parent == nullptr) delete r;
    return nullptr;
  }
  return r;
}

void* create_integer(const redisReadTask* task, long long value) {
  RedisReply* r = reply_slot(task);
  if (r == nullptr) return nullptr;
  r->type = RedisReply::Type::integer;
  r->integer = value;
  return r;
}

void* create_nil(const redisReadTask* task) {
  RedisReply* r = reply_slot(task);
  if (r != nullptr) r->type = RedisReply::Type::nil;
  return r;
}

// hiredis frees only roots (a reply it gives up on, or never handed out).
void free_reply(void* reply) { delete static_cast<RedisReply*>(reply); }

redisReplyObjectFunctions k_reply_functions = {create_string, create_array, create_integer, create_nil, free_reply};

using ReplyPtr = std::unique_ptr<RedisReply>;

// Makes `reader` build RedisReply under `budget` (which it does not own).
void build_replies(redisReader* reader, ReplyBudget* budget) {
  reader->fn = &k_reply_functions;
  reader->privdata = budget;
  reader->maxbuf = k_kept_read_buffer;
  budget->reader = reader;
}

// A whole reply takes what it holds of the budget with it. hiredis keeps a read buffer that grew
// for a large reply until the connection's next read, and a connection back in the pool would hold
// it outside any budget: a fresh reader (same functions and budget) replaces one whose buffer grew
// past what is kept, once nothing else is buffered.
void finish_reply(redisReader*& reader, ReplyBudget& budget, RedisReply& reply) {
  if (reader->len == 0 && reader->ridx == -1 && sdsalloc(reader->buf) > k_kept_read_buffer) {
    if (redisReader* fresh = redisReaderCreate(); fresh != nullptr) {
      fresh->fn = reader->fn;
      fresh->privdata = reader->privdata;
      fresh->maxbuf = reader->maxbuf;
      redisReaderFree(reader);
      reader = fresh;
      budget.reader = fresh;
    }
  }
  reply.hold = budget.finish();
}

}  // namespace

ReadReplies read_replies(std::string_view bytes, std::size_t max_reply_bytes, std::size_t chunk,
                         const std::shared_ptr<ReplyMemory>& memory) {
  ReadReplies out;
  ReplyBudget budget(max_reply_bytes, memory);
  struct Reader {
    redisReader* r = redisReaderCreate();
    ~Reader() { redisReaderFree(r); }
  } reader;
  if (reader.r == nullptr) throw std::bad_alloc();
  build_replies(reader.r, &budget);
  chunk = std::max<std::size_t>(chunk, 1);
  while (!out.error) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.r, &raw) != REDIS_OK) {
      out.error = budget.over != ReplyBudget::Over::none ? budget.refusal() : std::string(reader.r->errstr);
      break;
    }
    if (raw != nullptr) {
      ReplyPtr reply(static_cast<RedisReply*>(raw));
      finish_reply(reader.r, budget, *reply);
      out.replies.push_back(std::move(*reply));
      continue;
    }
    if (!budget.admits(*reader.r)) {
      out.error = budget.refusal();
      break;
    }
    if (bytes.empty()) break;  // a reply cut short: no error, as a socket that has more to come
    std::string_view piece = bytes.substr(0, chunk);
    bytes.remove_prefix(piece.size());
    if (redisReaderFeed(reader.r, piece.data(), piece.size()) != REDIS_OK) out.error = reader.r->errstr;
  }
  return out;
}

bool ReplyMemory::take(std::size_t bytes) {
  std::size_t held = m_held.load(std::memory_order_relaxed);
  do {
    if (bytes > m_limit - std::min(held, m_limit)) return false;
  } while (!m_held.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

void ContextFree::operator()(redisContext* c) const {
  auto* budget = c->reader != nullptr ? static_cast<ReplyBudget*>(c->reader->privdata) : nullptr;
  redisFree(c);
  delete budget;
}

void cap_replies(redisContext& c, std::size_t max_reply_bytes, std::shared_ptr<ReplyMemory> memory) {
  build_replies(c.reader, new ReplyBudget(max_reply_bytes, std::move(memory)));
}

int get_reply(redisContext& context, std::unique_ptr<RedisReply>& out) {
  redisContext* c = &context;
  ReplyBudget& budget = budget_of(c);
  void* raw = nullptr;
  int rc = redisGetReplyFromReader(c, &raw);
  if (rc == REDIS_OK && raw == nullptr) {
    int done = 0;
    do {
      rc = redisBufferWrite(c, &done);
    } while (rc == REDIS_OK && done == 0);
    while (rc == REDIS_OK && raw == nullptr) {
      if (!budget.admits(*c->reader)) {
        rc = REDIS_ERR;
        break;
      }
      rc = redisBufferRead(c);
      if (rc == REDIS_OK) rc = redisGetReplyFromReader(c, &raw);
    }
  }
  out.reset(static_cast<RedisReply*>(raw));
  if (out != nullptr) finish_reply(c->reader, budget, *out);
  return rc;
}

std::optional<std::string> refusal(const redisContext& c) {
  const auto& budget = *static_cast<const ReplyBudget*>(c.reader->privdata);
  if (budget.over == ReplyBudget::Over::none) return std::nullopt;
  return budget.refusal();
}

}  // namespace kcache::server::remote
