#include "redis_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kcache::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int k_slots = 16384;
constexpr int k_bus_port_offset = 10000;  // Redis Cluster's default bus port: PORT + 10000
constexpr auto k_start_timeout = 20s;
constexpr auto k_poll = 10ms;

// `name` on $PATH, else in /usr/bin; empty when neither has it.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  std::stringstream dirs(path + ":/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::filesystem::path candidate = std::filesystem::absolute(std::filesystem::path(dir) / name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

const std::string& redis_server_path() {
  static const std::string path = find_program("redis-server");
  return path;
}

const std::string& redis_cli_path() {
  static const std::string path = find_program("redis-cli");
  return path;
}

// Whether a listener could bind 127.0.0.1:`port` now (with SO_REUSEADDR, as redis-server binds).
bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// A port whose bus port (+10000) is free too. Redis cannot pick its own port, so one is picked
// here, at random below the kernel's ephemeral range (32768 up) so that neither port is one an
// outgoing connection may hold; the caller retries when another process took it meanwhile.
int pick_port() {
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> ports(10000, 32767 - k_bus_port_offset);
  for (int tries = 0; tries < 1000; ++tries) {
    int port = ports(random);
    if (port_free(port) && port_free(port + k_bus_port_offset)) return port;
  }
  throw std::runtime_error("no free pair of loopback ports PORT and PORT+10000 for redis-server");
}

// A blocking connection to 127.0.0.1:`port` whose connect, sends and receives each wait at most
// `seconds`; -1 when it cannot be made.
int connect_patiently(int port, long seconds) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval patience{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &patience, sizeof patience);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  close(fd);
  return -1;
}

// Whether redis-server on `port` answers PING (NOAUTH counts: it is up, it wants AUTH first).
bool answers_ping(int port) {
  int fd = connect_patiently(port, 1);
  if (fd < 0) return false;
  std::string reply;
  if (send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
    char buf[128];
    while (reply.find('\n') == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  return reply.starts_with("+PONG") || reply.starts_with("-NOAUTH");
}

std::string tail(const std::string& text, std::size_t n = 3000) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::stringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The value of `field` in INFO's "field:value" lines; empty if absent.
std::string info_field(const std::string& info, const std::string& field) {
  for (const std::string& line : lines_of(info)) {
    if (line.starts_with(field + ":")) return line.substr(field.size() + 1);
  }
  return "";
}

}  // namespace

// ---- RedisServer ------------------------------------------------------------------------------

std::optional<std::string> RedisServer::unavailable() {
  if (redis_server_path().empty()) {
    return "redis-server is not installed (not on PATH nor in /usr/bin; Debian: apt-get install redis-server)";
  }
  if (redis_cli_path().empty()) return "redis-cli is not installed (Debian: apt-get install redis-tools)";
  return std::nullopt;
}

std::unique_ptr<RedisServer> RedisServer::start(const std::filesystem::path& dir, RedisServerOptions options) {
  if (auto reason = unavailable()) throw std::runtime_error(*reason);
  std::filesystem::create_directories(dir);
  auto server = std::unique_ptr<RedisServer>(new RedisServer(dir, std::move(options)));
  for (int attempt = 0; attempt < 10; ++attempt) {
    server->m_port = pick_port();
    std::filesystem::remove(dir / "nodes.conf");  // a node that lost a port race starts afresh
    if (server->launch()) return server;
  }
  throw std::runtime_error("redis-server lost the race for a free port 10 times; log in " + dir.string());
}

RedisServer::~RedisServer() {
  if (running()) kill9();
}

bool RedisServer::launch() {
  const std::string port = std::to_string(m_port);
  std::vector<std::string> args = {redis_server_path(), "--bind", "127.0.0.1", "--port", port, "--dir", m_dir.string(),
                                   "--save", "", "--appendonly", "no", "--daemonize", "no",
                                   // a replica's first sync at once, not 5 s later
                                   "--repl-diskless-sync-delay", "0"};
  if (m_options.cluster) {
    args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", (m_dir / "nodes.conf").string(),
                             "--cluster-node-timeout", std::to_string(m_options.cluster_node_timeout.count()),
                             // a replica may take over however long its link was down
                             "--cluster-replica-validity-factor", "0"});
  }
  if (m_options.debug_command) args.insert(args.end(), {"--enable-debug-command", "yes"});
  if (!m_options.user.empty()) {
    args.insert(args.end(), {"--user", "default", "off", "--user", m_options.user, "on", ">" + m_options.password, "~*",
                             "&*", "+@all"});
  } else if (!m_options.password.empty()) {
    args.insert(args.end(), {"--requirepass", m_options.password});
  }
  args.insert(args.end(), m_options.extra_args.begin(), m_options.extra_args.end());
  const std::filesystem::path log = m_dir / "redis.log";
  m_pid = spawn_child(args, log);
  for (auto deadline = Clock::now() + k_start_timeout; Clock::now() < deadline; std::this_thread::sleep_for(k_poll)) {
    int status = 0;
    if (waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      std::string text = read_file(log);
      if (text.find("Address already in use") != std::string::npos) return false;
      throw std::runtime_error("redis-server exited at start; its log:\n" + tail(text));
    }
    if (answers_ping(m_port)) return true;
  }
  kill9();
  throw std::runtime_error("redis-server did not answer PING within 20 s; its log:\n" + tail(read_file(log)));
}

void RedisServer::stop() {
  if (!running()) return;
  kill(m_pid, SIGTERM);
  wait_status(m_pid);
  m_pid = -1;
}

void RedisServer::kill9() {
  if (!running()) return;
  kill(m_pid, SIGKILL);
  wait_status(m_pid);
  m_pid = -1;
}

void RedisServer::restart() {
  if (running()) throw std::runtime_error("redis-server on port " + std::to_string(m_port) + " is still running");
  if (!launch()) throw std::runtime_error("port " + std::to_string(m_port) + " was taken while redis-server was down");
}

namespace {

// One connection's replies, read as redis-cli prints them off a terminal: a simple or bulk
// string's text, an integer's digits, an array's elements a line each (nested ones flattened),
// nil as nothing. An error reply throws, as redis-cli -e exits 1 on it.
class RespReplies {
 public:
  RespReplies(int fd, std::string what) : m_fd(fd), m_what(std::move(what)) {}

  std::string next() {
    std::string head = line();
    std::string rest = head.substr(1);
    switch (head.empty() ? '\0' : head[0]) {
      case '+':
      case ':':
        return rest;
      case '-':
        throw std::runtime_error(m_what + " failed: " + rest);
      case '$': {
        long long n = std::atoll(rest.c_str());
        if (n < 0) return "";
        std::string body = take(static_cast<std::size_t>(n) + 2);
        return body.substr(0, body.size() - 2);
      }
      case '*': {
        std::string all;
        for (long long i = 0, n = std::atoll(rest.c_str()); i < n; ++i) all += next() + "\n";
        if (!all.empty()) all.pop_back();
        return all;
      }
      default:
        throw std::runtime_error(m_what + ": a reply not understood: " + head);
    }
  }

 private:
  std::string line() {
    std::size_t end;
    while ((end = m_buf.find("\r\n", m_at)) == std::string::npos) fill();
    std::string l = m_buf.substr(m_at, end - m_at);
    m_at = end + 2;
    return l;
  }
  std::string take(std::size_t n) {
    while (m_buf.size() - m_at < n) fill();
    std::string b = m_buf.substr(m_at, n);
    m_at += n;
    return b;
  }
  void fill() {
    char chunk[16384];
    ssize_t n = recv(m_fd, chunk, sizeof chunk, 0);
    if (n <= 0) throw std::runtime_error(m_what + ": the connection ended before the reply did");
    m_buf.erase(0, m_at);
    m_at = 0;
    m_buf.append(chunk, static_cast<std::size_t>(n));
  }

  int m_fd;
  std::string m_what;
  std::string m_buf;
  std::size_t m_at = 0;
};

std::string resp_command(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

}  // namespace

std::string RedisServer::query(const std::vector<std::string>& args) const {
  std::string what = "redis -p " + std::to_string(m_port);
  for (const std::string& a : args) what += " " + a;
  int fd = connect_patiently(m_port, 20);
  if (fd < 0) throw std::runtime_error(what + ": cannot connect");
  std::string request;
  if (!m_options.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!m_options.user.empty()) auth.push_back(m_options.user);
    auth.push_back(m_options.password);
    request = resp_command(auth);
  }
  request += resp_command(args);
  try {
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
      throw std::runtime_error(what + ": cannot send");
    }
    RespReplies replies(fd, what);
    if (!m_options.password.empty()) replies.next();  // +OK, or the refusal thrown
    std::string reply = replies.next();
    close(fd);
    return reply;
  } catch (...) {
    close(fd);
    throw;
  }
}

std::string RedisServer::hset_streamed(const std::string& key, const std::string& field, std::size_t bytes,
                                       char fill) const {
  int fd = connect_patiently(m_port, 60);
  if (fd < 0) throw std::runtime_error("hset_streamed: cannot connect to redis-server on port " + std::to_string(m_port));
  auto bulk_header = [](std::size_t n) { return "$" + std::to_string(n) + "\r\n"; };
  std::string head = "*4\r\n" + bulk_header(4) + "HSET\r\n" + bulk_header(key.size()) + key + "\r\n" +
                     bulk_header(field.size()) + field + "\r\n" + bulk_header(bytes);
  const std::string piece(std::size_t{1} << 20, fill);
  auto send_all = [fd](const char* data, std::size_t size) {
    while (size > 0) {
      ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  };
  bool sent = send_all(head.data(), head.size());
  for (std::size_t left = bytes; sent && left > 0;) {
    std::size_t n = std::min(left, piece.size());
    sent = send_all(piece.data(), n);
    left -= n;
  }
  sent = sent && send_all("\r\n", 2);
  std::string reply;
  char buf[256];
  while (sent && reply.find("\r\n") == std::string::npos) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  if (reply.find("\r\n") == std::string::npos) {
    throw std::runtime_error("hset_streamed: no reply from redis-server on port " + std::to_string(m_port));
  }
  return reply.substr(0, reply.find("\r\n"));
}

// ---- RedisCluster -----------------------------------------------------------------------------

std::unique_ptr<RedisCluster> RedisCluster::start(const std::filesystem::path& dir,
                                                  std::chrono::milliseconds node_timeout,
                                                  std::vector<std::string> extra_args) {
  auto cluster = std::unique_ptr<RedisCluster>(new RedisCluster());
  RedisServerOptions options;
  options.cluster = true;
  options.cluster_node_timeout = node_timeout;
  options.extra_args = std::move(extra_args);
  for (int i = 0; i < 6; ++i) cluster->m_nodes.push_back(RedisServer::start(dir / ("node" + std::to_string(i)), options));
  // What redis-cli --cluster create does, without the whole seconds it sleeps while the nodes meet:
  // each node its own config epoch, the slots split over the first three, and once all know all,
  // the other three made replicas of the first three. Each node meets every other itself (0.2 s)
  // rather than learning of most by gossip (1.1 s). A primary then says cluster_state:ok no
  // sooner than 2 s after its start (Redis's CLUSTER_WRITABLE_DELAY), which wait_until_ok awaits.
  const auto& nodes = cluster->m_nodes;
  for (int i = 0; i < 6; ++i) nodes[i]->query({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
  for (int i = 0; i < 3; ++i) {
    nodes[i]->query({"CLUSTER", "ADDSLOTSRANGE", std::to_string(k_slots * i / 3), std::to_string(k_slots * (i + 1) / 3 - 1)});
  }
  for (int i = 1; i < 6; ++i) {
    for (int j = 0; j < i; ++j) nodes[i]->query({"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes[j]->port())});
  }
  auto all_met = [&] {
    for (const auto& n : nodes) {
      auto known = lines_of(n->query({"CLUSTER", "NODES"}));
      if (known.size() != nodes.size()) return false;
      for (const std::string& line : known) {
        if (line.find("handshake") != std::string::npos || line.find("noaddr") != std::string::npos) return false;
      }
    }
    return true;
  };
  auto deadline = Clock::now() + k_start_timeout;
  while (!all_met()) {
    if (Clock::now() > deadline) throw std::runtime_error("the cluster's nodes did not all meet within 20 s");
    std::this_thread::sleep_for(k_poll);
  }
  for (int i = 3; i < 6; ++i) nodes[i]->query({"CLUSTER", "REPLICATE", nodes[i - 3]->query({"CLUSTER", "MYID"})});
  cluster->wait_until_ok();
  return cluster;
}

std::string RedisCluster::seeds(std::size_t count) const {
  std::string url = "redis-cluster://";
  for (std::size_t i = 0; i < count && i < m_nodes.size(); ++i) url += (i == 0 ? "" : ",") + m_nodes[i]->address();
  return url;
}

RedisServer& RedisCluster::node(int port) const {
  for (const auto& n : m_nodes) {
    if (n->port() == port) return *n;
  }
  throw std::runtime_error("no cluster node on port " + std::to_string(port));
}

RedisCluster::View RedisCluster::view_from(const RedisServer& node) const {
  // <id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
  View view;
  view.slot_owner.assign(k_slots, -1);
  for (const std::string& line : lines_of(node.query({"CLUSTER", "NODES"}))) {
    auto w = words_of(line);
    if (w.size() < 8) throw std::runtime_error("CLUSTER NODES line not understood: " + line);
    auto colon = w[1].find(':');
    int port = std::atoi(w[1].c_str() + colon + 1);
    bool failed = w[2].find("fail") != std::string::npos;  // fail, or fail? (suspected)
    bool primary = w[2].find("master") != std::string::npos && !failed;
    view.ids[port] = w[0];
    view.primary[port] = primary;
    for (std::size_t i = 8; i < w.size(); ++i) {
      if (w[i].front() == '[') continue;  // a slot being imported or migrated
      auto dash = w[i].find('-');
      int first = std::atoi(w[i].c_str());
      int last = dash == std::string::npos ? first : std::atoi(w[i].c_str() + dash + 1);
      for (int s = first; s <= last && s < k_slots; ++s) view.slot_owner[s] = primary ? port : -1;
    }
  }
  return view;
}

RedisCluster::View RedisCluster::view() const {
  for (const auto& n : m_nodes) {
    if (n->running()) return view_from(*n);
  }
  throw std::runtime_error("no cluster node is running");
}

std::string RedisCluster::id_of(int port) const { return node(port).query({"CLUSTER", "MYID"}); }

std::vector<int> RedisCluster::slot_owners() const { return view().slot_owner; }

int RedisCluster::primary_of(std::uint16_t slot) const {
  int port = view().slot_owner.at(slot);
  if (port < 0) throw std::runtime_error("no running primary serves slot " + std::to_string(slot));
  return port;
}

std::vector<int> RedisCluster::primaries() const {
  std::vector<int> ports;
  for (const auto& [port, primary] : view().primary) {
    if (primary && node(port).running()) ports.push_back(port);
  }
  return ports;
}

int RedisCluster::kill9_primary_of(std::uint16_t slot) {
  int port = primary_of(slot);
  node(port).kill9();
  return port;
}

void RedisCluster::wait_until_ok(std::chrono::milliseconds timeout) const {
  std::string why;
  for (auto deadline = Clock::now() + timeout; Clock::now() < deadline; std::this_thread::sleep_for(50ms)) {
    why.clear();
    std::optional<std::vector<int>> agreed;
    std::map<int, bool> role_of;  // what each running node says it is
    for (const auto& n : m_nodes) {
      if (!n->running()) continue;
      role_of[n->port()] = info_field(n->query({"INFO", "replication"}), "role") == "master";
    }
    for (const auto& n : m_nodes) {
      if (!n->running()) continue;
      std::string state = info_field(n->query({"CLUSTER", "INFO"}), "cluster_state");
      if (state != "ok") {
        why = n->address() + " says cluster_state:" + state;
        break;
      }
      std::string replication = n->query({"INFO", "replication"});
      if (info_field(replication, "role") == "slave" && info_field(replication, "master_link_status") != "up") {
        why = "replica " + n->address() + "'s link to its primary is not up";
        break;
      }
      View v = view_from(*n);
      if (std::count(v.slot_owner.begin(), v.slot_owner.end(), -1) != 0) {
        why = n->address() + " knows no running primary for some slots";
        break;
      }
      if (agreed && *agreed != v.slot_owner) {
        why = n->address() + " does not agree with the others on who serves which slot";
        break;
      }
      // Gossip tells the others that a node became a replica some time after it did: until every
      // view agrees with each node's own role, primaries() may still count a replica.
      for (const auto& [port, primary] : role_of) {
        if (v.primary.count(port) && v.primary[port] != primary) {
          why = n->address() + " still takes 127.0.0.1:" + std::to_string(port) + " for a " +
                (primary ? "replica" : "primary");
          break;
        }
      }
      if (!why.empty()) break;
      agreed = std::move(v.slot_owner);
    }
    if (why.empty()) return;
  }
  throw std::runtime_error("the Redis Cluster is not ok after " + std::to_string(timeout.count()) + " ms: " + why);
}

void RedisCluster::reshard(int count, int from_port, int to_port) const {
  CommandResult r = run_program({redis_cli_path(), "--cluster", "reshard", node(from_port).address(), "--cluster-from",
                                 id_of(from_port), "--cluster-to", id_of(to_port), "--cluster-slots",
                                 std::to_string(count), "--cluster-yes"});
  if (r.exit_code != 0) {
    throw std::runtime_error("redis-cli --cluster reshard failed (" + std::to_string(r.exit_code) +
                             "): " + tail(r.out) + tail(r.err));
  }
}

void RedisCluster::begin_migration(std::uint16_t slot, int from_port, int to_port) const {
  const std::string s = std::to_string(slot);
  node(to_port).query({"CLUSTER", "SETSLOT", s, "IMPORTING", id_of(from_port)});
  node(from_port).query({"CLUSTER", "SETSLOT", s, "MIGRATING", id_of(to_port)});
}

void RedisCluster::move_keys(std::uint16_t slot, int from_port, int to_port) const {
  const RedisServer& from = node(from_port);
  while (true) {
    auto keys = lines_of(from.query({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"}));
    if (keys.empty()) return;
    std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(to_port), "", "0", "5000", "KEYS"};
    migrate.insert(migrate.end(), keys.begin(), keys.end());
    from.query(migrate);
  }
}

void RedisCluster::finish_migration(std::uint16_t slot, int from_port, int to_port) const {
  const std::string s = std::to_string(slot);
  const std::string target = id_of(to_port);
  node(to_port).query({"CLUSTER", "SETSLOT", s, "NODE", target});
  node(from_port).query({"CLUSTER", "SETSLOT", s, "NODE", target});
  for (int port : primaries()) {
    if (port != from_port && port != to_port) node(port).query({"CLUSTER", "SETSLOT", s, "NODE", target});
  }
}

long long RedisCluster::keys_in_slot(int port, std::uint16_t slot) const {
  return std::atoll(node(port).query({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).c_str());
}

}  // namespace kcache::test
