#include "remote/redis.hpp"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>  // sdsalloc: the size of a reader's buffer
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <thread>

namespace kcache::server::remote {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Argv = std::vector<std::string_view>;

constexpr int k_slot_count = 16384;
constexpr std::uint16_t k_no_owner = 0xffff;
// Idle connections kept per node; callers beyond it connect for one call and close after.
constexpr std::size_t k_max_idle_per_node = 16;
// Waits before sending again after TRYAGAIN, CLUSTERDOWN or a node that could not be reached.
constexpr auto k_first_backoff = 20ms;
constexpr auto k_max_backoff = 320ms;

// ---- URLs and addresses -----------------------------------------------------------------------

Error bad_url(const std::string& what) { return make_error(ErrorCode::k_invalid_argument, "Redis URL: " + what); }

// `text` for a message: quoted, at most 64 characters, anything unprintable as '?'.
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 64) out += "...";
  return out + "'";
}

// A host name or IPv4 address: letters, digits, '.', '-', '_'.
bool is_host_name(std::string_view host) {
  return !host.empty() && host.size() <= 253 && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

bool is_ipv6_address(std::string_view host) {
  if (host.empty() || host.size() > INET6_ADDRSTRLEN) return false;
  in6_addr address{};
  return inet_pton(AF_INET6, std::string(host).c_str(), &address) == 1;
}

// 1..65535 written in decimal digits alone; nullopt otherwise.
std::optional<int> parse_port_number(std::string_view text) {
  int port = 0;
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  std::from_chars(text.data(), text.data() + text.size(), port);
  if (port < 1 || port > 65535) return std::nullopt;
  return port;
}

// HOST:PORT or [V6ADDR]:PORT, one seed of a URL.
Expected<RedisEndpoint> parse_url_endpoint(std::string_view piece) {
  if (piece.empty()) return bad_url("an empty HOST:PORT (nothing after '://', or a stray ',')");
  std::string_view host;
  std::string_view port;
  if (piece.front() == '[') {
    auto close = piece.find(']');
    if (close == std::string_view::npos) return bad_url("'[' without ']' in " + quoted(piece));
    host = piece.substr(1, close - 1);
    std::string_view rest = piece.substr(close + 1);
    if (rest.empty()) return bad_url("no :PORT after " + quoted(piece));
    if (rest.front() != ':') return bad_url("junk after ']' in " + quoted(piece));
    port = rest.substr(1);
    if (!is_ipv6_address(host)) return bad_url(quoted(host) + " in brackets is not an IPv6 address");
  } else {
    auto colon = piece.rfind(':');
    if (colon == std::string_view::npos) return bad_url("no :PORT in " + quoted(piece));
    host = piece.substr(0, colon);
    port = piece.substr(colon + 1);
    if (host.empty()) return bad_url("an empty host in " + quoted(piece));
    if (host.find(':') != std::string_view::npos) {
      return bad_url("an IPv6 address needs brackets ([ADDR]:PORT): " + quoted(piece));
    }
    if (!is_host_name(host)) return bad_url("host " + quoted(host) + " is not a host name or address");
  }
  if (port.empty()) return bad_url("an empty port in " + quoted(piece));
  if (port.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad_url("port " + quoted(port) + " is not a number");
  }
  auto number = parse_port_number(port);
  if (!number) return bad_url("port " + quoted(port) + " is out of range (1-65535)");
  return RedisEndpoint{std::string(host), *number};
}

std::string endpoint_name(const RedisEndpoint& endpoint) {
  std::string port = std::to_string(endpoint.port);
  if (endpoint.host.find(':') != std::string::npos) return "[" + endpoint.host + "]:" + port;
  return endpoint.host + ":" + port;
}

// ---- what cluster nodes say -------------------------------------------------------------------

constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    unsigned crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<std::uint16_t>(crc);
  }
  return table;
}
constexpr auto k_crc16_table = make_crc16_table();

// CRC16-XMODEM (polynomial 0x1021, initial 0), as Redis Cluster's crc16.c.
std::uint16_t crc16(std::string_view data) {
  unsigned crc = 0;
  for (unsigned char c : data) crc = ((crc << 8) ^ k_crc16_table[((crc >> 8) ^ c) & 0xff]) & 0xffff;
  return static_cast<std::uint16_t>(crc);
}

Error malformed_slots(const RedisEndpoint& from, const std::string& what) {
  return make_error(ErrorCode::k_unavailable,
                    "Redis " + endpoint_name(from) + ": malformed CLUSTER SLOTS reply: " + what);
}

// A node's host as a node sent it: empty or "?" is the answering node's own.
std::optional<std::string> sent_host(std::string_view host, const RedisEndpoint& answered_by) {
  if (host.empty() || host == "?") return answered_by.host;
  if (!is_host_name(host) && !is_ipv6_address(host)) return std::nullopt;
  return std::string(host);
}

// [host, port, id?, extras?] from CLUSTER SLOTS.
Expected<RedisEndpoint> slots_node(const RedisReply& node, const RedisEndpoint& answered_by, std::size_t range) {
  std::string where = "range " + std::to_string(range) + ": ";
  if (node.type != RedisReply::Type::array || node.elements.size() < 2 ||
      node.elements[0].type != RedisReply::Type::string || node.elements[1].type != RedisReply::Type::integer) {
    return malformed_slots(answered_by, where + "a node is not [host, port, ...]");
  }
  auto host = sent_host(node.elements[0].str, answered_by);
  if (!host) return malformed_slots(answered_by, where + "host " + quoted(node.elements[0].str));
  long long port = node.elements[1].integer;
  if (port < 1 || port > 65535) return malformed_slots(answered_by, where + "port " + std::to_string(port));
  return RedisEndpoint{*host, static_cast<int>(port)};
}

bool is_slot(const RedisReply& r) {
  return r.type == RedisReply::Type::integer && r.integer >= 0 && r.integer < k_slot_count;
}

// ---- hiredis ----------------------------------------------------------------------------------

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

// ---- replies: hiredis's reader builds RedisReply itself ----------------------------------------
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

// hiredis's redisGetReply (write what is buffered, then read until a reply is whole), with the
// reply held to the budget before every read: what it built, what waits in the buffer, and a bulk
// string at its announced length, so that a value over a cap is refused before its bytes are read.
int get_reply(redisContext* c, ReplyBudget& budget, ReplyPtr& out) {
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

// A connection, with its reader's budget (kcache's, set up in connect()).
struct ContextFree {
  void operator()(redisContext* c) const {
    auto* budget = c->reader != nullptr ? static_cast<ReplyBudget*>(c->reader->privdata) : nullptr;
    redisFree(c);
    delete budget;
  }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

// hiredis writes with write(2): a peer that has gone would raise SIGPIPE, which ends a process
// that does not ignore it. Held off in this thread while it talks to Redis, and any SIGPIPE that
// arrived meanwhile is taken away before the mask is put back.
class SigpipeHold {
 public:
  SigpipeHold() {
    sigemptyset(&m_pipe);
    sigaddset(&m_pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    m_was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &m_pipe, &m_old);
  }
  ~SigpipeHold() {
    int saved = errno;
    sigset_t pending;
    if (!m_was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      timespec now{};
      while (sigtimedwait(&m_pipe, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &m_old, nullptr);
    errno = saved;
  }
  SigpipeHold(const SigpipeHold&) = delete;
  SigpipeHold& operator=(const SigpipeHold&) = delete;

 private:
  sigset_t m_pipe{};
  sigset_t m_old{};
  bool m_was_pending = false;
};

// Whether an idle connection is still open and quiet: the peer has not closed it (a restarted
// server, an idle timeout) and has sent nothing unasked. Checked before reuse, so that a dead
// pooled connection is never given a command that then fails without knowing if it ran.
bool idle_connection_usable(const redisContext& c) {
  char byte = 0;
  ssize_t n = ::recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// One node and its idle connections.
class Node {
 public:
  explicit Node(RedisEndpoint endpoint) : m_endpoint(std::move(endpoint)), m_name(endpoint_name(m_endpoint)) {}

  const RedisEndpoint& endpoint() const { return m_endpoint; }
  const std::string& name() const { return m_name; }

  struct Taken {
    Context context;  // null: none idle, the caller connects
    std::uint64_t generation = 0;
  };
  Taken take() {
    std::vector<Context> dead;  // closed outside the lock
    std::lock_guard lock(m_idle_mutex);
    while (!m_idle.empty()) {
      Context c = std::move(m_idle.back());
      m_idle.pop_back();
      if (idle_connection_usable(*c)) return {std::move(c), m_generation};
      dead.push_back(std::move(c));
    }
    return {nullptr, m_generation};
  }

  // Keeps a connection that answered everything asked of it, unless the pool is full or was
  // emptied since the connection was taken.
  void give_back(Context context, std::uint64_t generation) {
    std::lock_guard lock(m_idle_mutex);
    if (generation == m_generation && m_idle.size() < k_max_idle_per_node) m_idle.push_back(std::move(context));
  }

  // Closes the idle connections, and those in use as they come back.
  void drop_idle() {
    std::vector<Context> closing;
    std::lock_guard lock(m_idle_mutex);
    ++m_generation;
    closing.swap(m_idle);
  }

  void note_failure() { m_failed_at.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  void note_success() {
    if (m_failed_at.load(std::memory_order_relaxed) != 0) m_failed_at.store(0, std::memory_order_relaxed);
  }
  // When a call to it last failed (0: it answered since).
  Clock::rep failed_at() const { return m_failed_at.load(std::memory_order_relaxed); }

 private:
  const RedisEndpoint m_endpoint;
  const std::string m_name;
  std::mutex m_idle_mutex;  // guards m_idle and m_generation
  std::vector<Context> m_idle;
  std::uint64_t m_generation = 0;
  std::atomic<Clock::rep> m_failed_at{0};
};

// What one exchange with a node gave.
struct Exchange {
  std::vector<RedisReply> replies;
  std::optional<Error> error;
  bool unsent = false;  // it failed before the commands were written: none of them can have run
};

}  // namespace

// ---- public parsers ---------------------------------------------------------------------------

Expected<RedisOptions> parse_redis_url(std::string_view url) {
  auto separator = url.find("://");
  if (url.empty()) return bad_url("empty");
  if (separator == std::string_view::npos) {
    return bad_url("no scheme: expected redis://HOST:PORT or redis-cluster://HOST:PORT[,HOST:PORT...]");
  }
  std::string_view scheme = url.substr(0, separator);
  RedisOptions options;
  if (scheme == "redis-cluster") {
    options.cluster = true;
  } else if (scheme == "rediss" || scheme == "rediss-cluster") {
    return bad_url("TLS (" + std::string(scheme) + "://) is not supported: hiredis 0.14 has no TLS");
  } else if (scheme != "redis") {
    return bad_url("unknown scheme " + quoted(scheme) + " (expected redis:// or redis-cluster://)");
  }
  std::string_view rest = url.substr(separator + 3);
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    std::string_view user = rest.substr(0, at);
    // Neither the user nor anything before '@' is repeated: it may be a password typed there.
    if (user.find(':') != std::string_view::npos) {
      return bad_url("a password in the URL is refused (it would show in ps and in logs): give it in a file");
    }
    if (user.empty()) return bad_url("an empty user name before '@'");
    if (!std::all_of(user.begin(), user.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
        })) {
      return bad_url("the user name has characters other than letters, digits, '.', '-' and '_'");
    }
    options.user = user;
    rest = rest.substr(at + 1);
  }
  if (auto junk = rest.find_first_of("/?#@"); junk != std::string_view::npos) {
    const char* what = rest[junk] == '/'   ? "a path (database number) is not supported"
                       : rest[junk] == '?' ? "query parameters are not supported"
                       : rest[junk] == '#' ? "a fragment is not supported"
                                           : "more than one '@'";
    return bad_url(std::string(what) + ": " + quoted(rest.substr(junk)));
  }
  std::size_t start = 0;
  while (true) {
    auto comma = rest.find(',', start);
    auto endpoint = parse_url_endpoint(rest.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (!endpoint) return endpoint.error();
    for (const RedisEndpoint& seen : options.seeds) {
      if (seen.host == endpoint->host && seen.port == endpoint->port) {
        return bad_url("seed " + endpoint_name(seen) + " is listed twice");
      }
    }
    options.seeds.push_back(std::move(*endpoint));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (!options.cluster && options.seeds.size() > 1) {
    return bad_url("redis:// takes one HOST:PORT; for several seeds use redis-cluster://");
  }
  return options;
}

std::uint16_t key_slot(std::string_view key) {
  if (auto open = key.find('{'); open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & (k_slot_count - 1);
}

Expected<std::vector<RedisSlotRange>> parse_cluster_slots(const RedisReply& reply, const RedisEndpoint& answered_by) {
  if (reply.type != RedisReply::Type::array) return malformed_slots(answered_by, "not an array");
  std::vector<bool> seen(k_slot_count, false);
  std::vector<RedisSlotRange> ranges;
  ranges.reserve(reply.elements.size());
  for (std::size_t i = 0; i < reply.elements.size(); ++i) {
    const RedisReply& entry = reply.elements[i];
    std::string where = "range " + std::to_string(i) + ": ";
    if (entry.type != RedisReply::Type::array || entry.elements.size() < 3) {
      return malformed_slots(answered_by, where + "not [first, last, primary, replicas...]");
    }
    if (!is_slot(entry.elements[0]) || !is_slot(entry.elements[1]) ||
        entry.elements[0].integer > entry.elements[1].integer) {
      return malformed_slots(answered_by, where + "slots are not first <= last within 0..16383");
    }
    RedisSlotRange range;
    range.first = static_cast<std::uint16_t>(entry.elements[0].integer);
    range.last = static_cast<std::uint16_t>(entry.elements[1].integer);
    for (int slot = range.first; slot <= range.last; ++slot) {
      if (seen[slot]) return malformed_slots(answered_by, where + "slot " + std::to_string(slot) + " listed twice");
      seen[slot] = true;
    }
    for (std::size_t n = 2; n < entry.elements.size(); ++n) {
      auto node = slots_node(entry.elements[n], answered_by, i);
      if (!node) return node.error();
      range.nodes.push_back(std::move(*node));
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

Expected<std::optional<RedisRedirect>> parse_redirect(std::string_view error, const RedisEndpoint& answered_by) {
  std::string_view word = error.substr(0, error.find(' '));
  RedisRedirect redirect;
  if (word == "TRYAGAIN" || word == "CLUSTERDOWN") {
    redirect.kind = word == "TRYAGAIN" ? RedisRedirect::Kind::try_again : RedisRedirect::Kind::cluster_down;
    return std::optional<RedisRedirect>(redirect);
  }
  if (word != "MOVED" && word != "ASK") return std::optional<RedisRedirect>();
  redirect.kind = word == "MOVED" ? RedisRedirect::Kind::moved : RedisRedirect::Kind::ask;
  auto malformed = [&] {
    return make_error(ErrorCode::k_unavailable,
                      "Redis " + endpoint_name(answered_by) + ": malformed redirect " + quoted(error));
  };
  // "MOVED <slot> <host>:<port>", the host without brackets even for IPv6.
  std::string_view rest = error.substr(word.size());
  if (rest.size() < 2 || rest.front() != ' ') return malformed();
  rest.remove_prefix(1);
  auto space = rest.find(' ');
  if (space == std::string_view::npos) return malformed();
  std::string_view slot_text = rest.substr(0, space);
  std::string_view address = rest.substr(space + 1);
  int slot = -1;
  if (slot_text.empty() || slot_text.size() > 5 ||
      slot_text.find_first_not_of("0123456789") != std::string_view::npos) {
    return malformed();
  }
  std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
  auto colon = address.rfind(':');
  if (slot < 0 || slot >= k_slot_count || colon == std::string_view::npos) return malformed();
  auto host = sent_host(address.substr(0, colon), answered_by);
  auto port = parse_port_number(address.substr(colon + 1));
  if (!host || !port) return malformed();
  redirect.slot = static_cast<std::uint16_t>(slot);
  redirect.target = RedisEndpoint{std::move(*host), *port};
  return std::optional<RedisRedirect>(std::move(redirect));
}

// ---- the client -------------------------------------------------------------------------------

struct Redis::State {
  explicit State(const RedisOptions& options)
      : m_reply_memory(
            std::make_shared<ReplyMemory>(options.max_held_reply_bytes > 0 ? options.max_held_reply_bytes : SIZE_MAX)),
        m_options(options) {
    forget_nodes();
  }

  Expected<std::vector<RedisReply>> run(std::string_view routing_key, const std::vector<const Argv*>& commands);
  void reset();

  const std::shared_ptr<ReplyMemory> m_reply_memory;  // what all replies hold (max_held_reply_bytes)
  std::atomic<std::uint64_t> m_refused{0};            // replies refused unread

 private:
  struct Route {
    std::shared_ptr<Node> node;  // null: the slot's primary, as the slot table has it
    bool asking = false;
    bool operator==(const Route&) const = default;
  };

  // Sends `commands` to `slot`'s primary, following redirects command by command.
  Expected<std::vector<RedisReply>> run_cluster(std::uint16_t slot, const std::vector<const Argv*>& commands);
  // Writes `commands` (each after ASKING when `asking`) on a connection to `node` in one go and
  // reads their replies; the connection goes back to the pool only when all came.
  Exchange exchange(const std::shared_ptr<Node>& node, const std::vector<const Argv*>& commands, bool asking);
  // A new connection to `node`: connected, its timeouts set, authenticated.
  Expected<Context> connect(const Node& node);
  // DEADLINE_EXCEEDED when hiredis gave up waiting (SO_RCVTIMEO/SO_SNDTIMEO), else UNAVAILABLE.
  Error transport_error(const redisContext& c, int saved_errno, const Node& node, std::string_view doing) const;

  // The one Node of an address, made on first use.
  std::shared_ptr<Node> node_for(const RedisEndpoint& endpoint);
  // The nodes that may answer CLUSTER SLOTS: every node known, those that failed last at the end.
  std::vector<std::shared_ptr<Node>> nodes_for_topology();
  // Back to the seeds alone, closing every pooled connection.
  void forget_nodes();

  // `slot`'s primary, fetching the topology first when there is none or it is stale.
  Expected<std::shared_ptr<Node>> owner_of(std::uint16_t slot);
  bool topology_known() {
    std::shared_lock lock(m_topology_mutex);
    return m_topology_known;
  }
  // CLUSTER SLOTS from the first node that answers it; callers that wait while another thread
  // fetches take its outcome.
  Expected<void> refresh_topology();
  Expected<std::vector<RedisSlotRange>> fetch_slots(const std::shared_ptr<Node>& node);
  void install_topology(const std::vector<RedisSlotRange>& ranges, const Node& source);
  // What a MOVED said, until the next fetch.
  void learn_owner(std::uint16_t slot, const std::shared_ptr<Node>& node);

  const RedisOptions& m_options;

  std::mutex m_nodes_mutex;                              // guards m_nodes and m_seeds
  std::map<std::string, std::shared_ptr<Node>> m_nodes;  // by HOST:PORT: seeds, and nodes learnt since
  std::vector<std::shared_ptr<Node>> m_seeds;

  std::shared_mutex m_topology_mutex;  // guards m_slot_owner, m_owners and m_topology_known
  std::vector<std::uint16_t> m_slot_owner = std::vector<std::uint16_t>(k_slot_count, k_no_owner);  // index in m_owners
  std::vector<std::shared_ptr<Node>> m_owners;
  bool m_topology_known = false;
  std::atomic<bool> m_topology_stale{false};  // a MOVED or a failure: fetch CLUSTER SLOTS before routing

  std::mutex m_refresh_mutex;  // one topology fetch at a time; guards m_last_refresh_error
  std::atomic<std::uint64_t> m_refresh_count{0};
  std::optional<Error> m_last_refresh_error;
};

Redis::Redis(RedisOptions options) : m_options(std::move(options)), m_state(std::make_unique<State>(m_options)) {}

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

Redis::~Redis() = default;

Expected<RedisReply> Redis::command(std::string_view routing_key, const std::vector<std::string_view>& argv) {
  auto replies = m_state->run(routing_key, {&argv});
  if (!replies) return replies.error();
  return std::move(replies->front());
}

Expected<std::vector<RedisReply>> Redis::pipeline(std::string_view routing_key,
                                                  const std::vector<std::vector<std::string_view>>& commands) {
  std::vector<const Argv*> argvs;
  argvs.reserve(commands.size());
  for (const Argv& argv : commands) argvs.push_back(&argv);
  return m_state->run(routing_key, argvs);
}

void Redis::reset() { m_state->reset(); }

std::size_t Redis::held_reply_bytes() const { return m_state->m_reply_memory->held(); }

std::uint64_t Redis::refused_replies() const { return m_state->m_refused.load(); }

Expected<std::vector<RedisReply>> Redis::State::run(std::string_view routing_key,
                                                    const std::vector<const Argv*>& commands) {
  for (const Argv* argv : commands) {
    if (argv->empty()) return make_error(ErrorCode::k_invalid_argument, "Redis: an empty command");
  }
  if (commands.empty()) return std::vector<RedisReply>();
  std::shared_ptr<Node> single;
  {
    std::lock_guard lock(m_nodes_mutex);
    if (m_seeds.empty()) return make_error(ErrorCode::k_failed_precondition, "Redis: no node configured");
    if (!m_options.cluster) single = m_seeds.front();
  }
  SigpipeHold sigpipe;
  if (m_options.cluster) return run_cluster(key_slot(routing_key), commands);
  Exchange done = exchange(single, commands, false);
  if (done.error) return std::move(*done.error);
  return std::move(done.replies);
}

Expected<std::vector<RedisReply>> Redis::State::run_cluster(std::uint16_t slot,
                                                            const std::vector<const Argv*>& commands) {
  std::vector<RedisReply> replies(commands.size());
  std::vector<Route> routes(commands.size());
  std::vector<std::size_t> pending(commands.size());
  std::iota(pending.begin(), pending.end(), 0);
  const int max_retries = std::max(0, m_options.max_redirects);
  int retries = 0;
  std::string last;  // why the last try left commands unanswered
  auto backoff = k_first_backoff;
  auto wait = [&] {
    if (retries > max_retries) return;  // giving up: no point in waiting first
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, k_max_backoff);
  };
  while (!pending.empty()) {
    if (retries > max_retries) {
      return make_error(ErrorCode::k_unavailable, "Redis Cluster: slot " + std::to_string(slot) + " unanswered after " +
                                                      std::to_string(retries - 1) + " retries; last: " + last);
    }
    // This round sends the pending commands that go the way of the first one.
    const Route route = routes[pending.front()];
    std::shared_ptr<Node> node = route.node;
    if (!node) {
      auto owner = owner_of(slot);
      if (!owner) {
        if (!topology_known()) return owner.error();  // no node told its slots: waiting would not help
        last = owner.error().message;
        ++retries;
        wait();
        continue;
      }
      node = std::move(*owner);
    }
    std::vector<std::size_t> batch;
    std::vector<std::size_t> later;
    for (std::size_t i : pending) (routes[i] == route ? batch : later).push_back(i);
    std::vector<const Argv*> sent;
    for (std::size_t i : batch) sent.push_back(commands[i]);
    Exchange done = exchange(node, sent, route.asking);
    if (done.error) {
      if (done.error->code == ErrorCode::k_unavailable) m_topology_stale = true;
      if (!done.unsent || done.error->code != ErrorCode::k_unavailable) return std::move(*done.error);
      // Never written, so safe to send again: to the slot's primary as a fresh topology says.
      last = done.error->message;
      for (std::size_t i : batch) routes[i] = Route{};
      ++retries;
      wait();
      continue;
    }
    bool redirected = false;
    bool back_off = false;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      std::size_t i = batch[k];
      RedisReply& reply = done.replies[k];
      if (reply.is_error()) {
        auto redirect = parse_redirect(reply.str, node->endpoint());
        if (!redirect) return redirect.error();
        if (*redirect) {
          const RedisRedirect& r = **redirect;
          redirected = true;
          last = node->name() + " answered " + quoted(reply.str);
          if (r.kind == RedisRedirect::Kind::moved) {
            routes[i] = Route{node_for(r.target), false};
            learn_owner(r.slot, routes[i].node);
          } else if (r.kind == RedisRedirect::Kind::ask) {
            routes[i] = Route{node_for(r.target), true};
          } else {
            routes[i] = Route{};
            back_off = true;
            if (r.kind == RedisRedirect::Kind::cluster_down) m_topology_stale = true;
          }
          later.push_back(i);
          continue;
        }
      }
      replies[i] = std::move(reply);
    }
    if (redirected) ++retries;
    if (back_off) wait();
    std::sort(later.begin(), later.end());
    pending = std::move(later);
  }
  return replies;
}

Exchange Redis::State::exchange(const std::shared_ptr<Node>& node, const std::vector<const Argv*>& commands,
                                bool asking) {
  Node::Taken taken = node->take();
  if (!taken.context) {
    auto connected = connect(*node);
    if (!connected) {
      node->note_failure();
      return Exchange{{}, connected.error(), true};
    }
    taken.context = std::move(*connected);
  }
  redisContext* c = taken.context.get();
  ReplyBudget& budget = budget_of(c);
  const char* asking_argv[] = {"ASKING"};
  const std::size_t asking_length[] = {6};
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (const Argv* argv : commands) {
    args.clear();
    lengths.clear();
    for (std::string_view a : *argv) {
      args.push_back(a.empty() ? "" : a.data());
      lengths.push_back(a.size());
    }
    if ((asking && redisAppendCommandArgv(c, 1, asking_argv, asking_length) != REDIS_OK) ||
        redisAppendCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data()) != REDIS_OK) {
      return Exchange{{},
                      make_error(ErrorCode::k_resource_exhausted,
                                 "Redis " + node->name() + ": cannot buffer a command: " + c->errstr),
                      true};
    }
  }
  std::size_t expected = commands.size() * (asking ? 2 : 1);
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < expected; ++i) {
    ReplyPtr reply;
    errno = 0;
    int rc = get_reply(c, budget, reply);
    int saved_errno = errno;
    if (budget.over != ReplyBudget::Over::none) {
      // Answered, but with more than any entry holds or the budget has room for: an error reply
      // for it and for what was pipelined after it, which stays unread on a connection that is
      // then closed (giving back what the reply took).
      spdlog::warn("Redis {}: {} refused", node->name(), budget.refusal());
      ++m_refused;
      RedisReply refused{RedisReply::Type::error, "kcache: " + budget.refusal() + ", refused unread", 0, {}, true, {}};
      replies.resize(commands.size(), refused);
      node->note_success();
      return Exchange{std::move(replies), std::nullopt, false};
    }
    if (rc != REDIS_OK || reply == nullptr) {
      Error error = transport_error(*c, saved_errno, *node, "reading a reply");
      if (error.code == ErrorCode::k_unavailable) {
        node->note_failure();
        node->drop_idle();  // the node went away or was restarted: its other connections with it
      }
      return Exchange{{}, std::move(error), false};
    }
    if (asking && i % 2 == 0) continue;  // ASKING's +OK; the command after it says what happened
    replies.push_back(std::move(*reply));
  }
  node->note_success();
  node->give_back(std::move(taken.context), taken.generation);
  return Exchange{std::move(replies), std::nullopt, false};
}

Expected<Context> Redis::State::connect(const Node& node) {
  const RedisEndpoint& e = node.endpoint();
  Context c(m_options.connect_timeout.count() > 0
                ? redisConnectWithTimeout(e.host.c_str(), e.port, to_timeval(m_options.connect_timeout))
                : redisConnect(e.host.c_str(), e.port));
  if (c == nullptr) return make_error(ErrorCode::k_resource_exhausted, "Redis " + node.name() + ": out of memory");
  if (c->err != 0) {
    return make_error(ErrorCode::k_unavailable, "Redis " + node.name() + ": cannot connect: " + c->errstr);
  }
  build_replies(c->reader, new ReplyBudget(m_options.max_reply_bytes, m_reply_memory));
  if (m_options.operation_timeout.count() > 0 &&
      redisSetTimeout(c.get(), to_timeval(m_options.operation_timeout)) != REDIS_OK) {
    return make_error(ErrorCode::k_unavailable, "Redis " + node.name() + ": cannot set the timeout: " + c->errstr);
  }
  if (m_options.password.empty()) return c;
  std::vector<const char*> args = {"AUTH"};
  std::vector<std::size_t> lengths = {4};
  if (!m_options.user.empty()) {
    args.push_back(m_options.user.data());
    lengths.push_back(m_options.user.size());
  }
  args.push_back(m_options.password.data());
  lengths.push_back(m_options.password.size());
  ReplyPtr reply;
  errno = 0;
  int rc = redisAppendCommandArgv(c.get(), static_cast<int>(args.size()), args.data(), lengths.data());
  if (rc == REDIS_OK) rc = get_reply(c.get(), budget_of(c.get()), reply);
  int saved_errno = errno;
  if (rc != REDIS_OK || reply == nullptr) return transport_error(*c, saved_errno, node, "authenticating");
  if (reply->is_error()) {
    std::string as = m_options.user.empty() ? "" : " as user " + quoted(m_options.user);
    return make_error(ErrorCode::k_unauthenticated,
                      "Redis " + node.name() + " refused AUTH" + as + ": " + quoted(reply->str));
  }
  return c;
}

Error Redis::State::transport_error(const redisContext& c, int saved_errno, const Node& node,
                                    std::string_view doing) const {
  if (c.err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
    return make_error(ErrorCode::k_deadline_exceeded, "Redis " + node.name() + ": no answer within " +
                                                          std::to_string(m_options.operation_timeout.count()) + " ms " +
                                                          std::string(doing));
  }
  std::string why = c.err != 0 ? std::string(c.errstr) : "no reply";
  return make_error(ErrorCode::k_unavailable, "Redis " + node.name() + ": " + std::string(doing) + ": " + why);
}

std::shared_ptr<Node> Redis::State::node_for(const RedisEndpoint& endpoint) {
  std::string name = endpoint_name(endpoint);
  std::lock_guard lock(m_nodes_mutex);
  auto [it, added] = m_nodes.try_emplace(name);
  if (added) it->second = std::make_shared<Node>(endpoint);
  return it->second;
}

std::vector<std::shared_ptr<Node>> Redis::State::nodes_for_topology() {
  // Sorted on a snapshot of when each failed: other threads may note failures meanwhile.
  std::vector<std::pair<Clock::rep, std::shared_ptr<Node>>> by_failure;
  {
    std::lock_guard lock(m_nodes_mutex);
    for (const auto& [name, node] : m_nodes) by_failure.emplace_back(node->failed_at(), node);
  }
  std::sort(by_failure.begin(), by_failure.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->name() < b.second->name();
  });
  std::vector<std::shared_ptr<Node>> nodes;
  for (auto& [failed_at, node] : by_failure) nodes.push_back(std::move(node));
  return nodes;
}

void Redis::State::forget_nodes() {
  std::vector<std::shared_ptr<Node>> dropped;
  {
    std::lock_guard lock(m_nodes_mutex);
    for (auto& [name, node] : m_nodes) dropped.push_back(node);
    m_nodes.clear();
    m_seeds.clear();
    for (const RedisEndpoint& seed : m_options.seeds) {
      auto node = std::make_shared<Node>(seed);
      m_seeds.push_back(node);
      m_nodes.emplace(node->name(), node);
    }
  }
  for (const auto& node : dropped) node->drop_idle();
}

void Redis::State::reset() {
  {
    std::unique_lock lock(m_topology_mutex);
    std::fill(m_slot_owner.begin(), m_slot_owner.end(), k_no_owner);
    m_owners.clear();
    m_topology_known = false;
  }
  forget_nodes();
}

Expected<std::shared_ptr<Node>> Redis::State::owner_of(std::uint16_t slot) {
  bool known = false;
  {
    std::shared_lock lock(m_topology_mutex);
    known = m_topology_known;
    if (known && !m_topology_stale && m_slot_owner[slot] != k_no_owner) return m_owners[m_slot_owner[slot]];
  }
  auto refreshed = refresh_topology();
  std::shared_lock lock(m_topology_mutex);
  if (!m_topology_known)
    return refreshed ? make_error(ErrorCode::k_unavailable, "Redis Cluster: no topology") : refreshed.error();
  if (m_slot_owner[slot] != k_no_owner) return m_owners[m_slot_owner[slot]];  // a failed refresh keeps the last table
  m_topology_stale = true;
  return make_error(ErrorCode::k_unavailable, "Redis Cluster: no node serves slot " + std::to_string(slot) +
                                                  (refreshed ? "" : " (" + refreshed.error().message + ")"));
}

Expected<void> Redis::State::refresh_topology() {
  const std::uint64_t seen = m_refresh_count.load();
  std::lock_guard lock(m_refresh_mutex);
  if (m_refresh_count.load() != seen) {
    // Another thread fetched it while this one waited: its answer will do.
    if (m_last_refresh_error) return *m_last_refresh_error;
    return {};
  }
  m_topology_stale = false;  // what goes wrong from here on asks for the next fetch
  std::optional<Error> error;
  std::optional<std::vector<RedisSlotRange>> empty_answer;
  std::shared_ptr<Node> empty_source;
  bool installed = false;
  for (const std::shared_ptr<Node>& node : nodes_for_topology()) {
    auto ranges = fetch_slots(node);
    if (!ranges) {
      error = ranges.error();
      continue;
    }
    if (ranges->empty()) {  // a node that knows no slots (new, or reset) may be the odd one out
      empty_answer = std::move(*ranges);
      empty_source = node;
      continue;
    }
    install_topology(*ranges, *node);
    installed = true;
    break;
  }
  if (!installed && empty_answer) {
    install_topology(*empty_answer, *empty_source);
    installed = true;
  }
  if (installed) {
    m_last_refresh_error.reset();
  } else {
    m_last_refresh_error = make_error(ErrorCode::k_unavailable, "Redis Cluster: no node told its slots; last: " +
                                                                    (error ? error->message : "no node known"));
    m_topology_stale = true;
  }
  ++m_refresh_count;
  if (m_last_refresh_error) return *m_last_refresh_error;
  return {};
}

Expected<std::vector<RedisSlotRange>> Redis::State::fetch_slots(const std::shared_ptr<Node>& node) {
  static const Argv k_cluster_slots = {"CLUSTER", "SLOTS"};
  Exchange done = exchange(node, {&k_cluster_slots}, false);
  if (done.error) return std::move(*done.error);
  const RedisReply& reply = done.replies.front();
  if (reply.is_error()) {
    return make_error(ErrorCode::k_unavailable,
                      "Redis " + node->name() + " answered CLUSTER SLOTS with " + quoted(reply.str));
  }
  return parse_cluster_slots(reply, node->endpoint());
}

void Redis::State::install_topology(const std::vector<RedisSlotRange>& ranges, const Node& source) {
  std::vector<std::uint16_t> slot_owner(k_slot_count, k_no_owner);
  std::vector<std::shared_ptr<Node>> owners;
  for (const RedisSlotRange& range : ranges) {
    for (std::size_t n = 1; n < range.nodes.size(); ++n) node_for(range.nodes[n]);  // replicas may answer CLUSTER SLOTS
    std::shared_ptr<Node> primary = node_for(range.nodes.front());
    auto it = std::find(owners.begin(), owners.end(), primary);
    auto index = static_cast<std::uint16_t>(it - owners.begin());
    if (it == owners.end()) owners.push_back(primary);
    std::fill(slot_owner.begin() + range.first, slot_owner.begin() + range.last + 1, index);
  }
  spdlog::debug("Redis Cluster: {} slot ranges on {} primaries, as {} tells", ranges.size(), owners.size(),
                source.name());
  std::unique_lock lock(m_topology_mutex);
  m_slot_owner = std::move(slot_owner);
  m_owners = std::move(owners);
  m_topology_known = true;
}

void Redis::State::learn_owner(std::uint16_t slot, const std::shared_ptr<Node>& node) {
  {
    std::unique_lock lock(m_topology_mutex);
    auto it = std::find(m_owners.begin(), m_owners.end(), node);
    if (it == m_owners.end()) it = m_owners.insert(m_owners.end(), node);
    m_slot_owner[slot] = static_cast<std::uint16_t>(it - m_owners.begin());
  }
  m_topology_stale = true;  // one slot moved: others may have too
}

}  // namespace kcache::server::remote
