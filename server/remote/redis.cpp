#include "remote/redis.hpp"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "remote/redis_reader.hpp"

namespace kcache::server::remote {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Argv = std::vector<std::string_view>;

constexpr std::uint16_t k_no_owner = 0xffff;
// Idle connections kept per node; callers beyond it connect for one call and close after.
constexpr std::size_t k_max_idle_per_node = 16;
// Waits before sending again after TRYAGAIN, CLUSTERDOWN or a node that could not be reached.
constexpr auto k_first_backoff = 20ms;
constexpr auto k_max_backoff = 320ms;

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

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
    std::unique_ptr<RedisReply> reply;
    errno = 0;
    int rc = get_reply(*c, reply);
    int saved_errno = errno;
    if (std::optional<std::string> why = refusal(*c)) {
      // Answered, but with more than any entry holds or the budget has room for: an error reply
      // for it and for what was pipelined after it, which stays unread on a connection that is
      // then closed (giving back what the reply took).
      spdlog::warn("Redis {}: {} refused", node->name(), *why);
      ++m_refused;
      RedisReply refused{RedisReply::Type::error, "kcache: " + *why + ", refused unread", 0, {}, true, {}};
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
  cap_replies(*c, m_options.max_reply_bytes, m_reply_memory);
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
  std::unique_ptr<RedisReply> reply;
  errno = 0;
  int rc = redisAppendCommandArgv(c.get(), static_cast<int>(args.size()), args.data(), lengths.data());
  if (rc == REDIS_OK) rc = get_reply(*c, reply);
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
