#include "config.hpp"

#include <CLI/CLI.hpp>
#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string_view>
#include <thread>
#include <vector>

#include "kcache/job.hpp"

namespace kcache::server {
namespace {

// Accepts plain bytes or a K/M/G/T suffix (powers of 1024).
std::string parse_size_option(const std::string& text, std::uint64_t& out) {
  auto value = parse_size(text);
  if (!value) return "'" + text + "' is not a size: use bytes, or a number with K, M, G or T";
  out = *value;
  return {};
}

// The --config file, checked line by line before CLI11 reads it: CLI11 lets the first of two
// same keys win silently and names an unknown key without its line. Keys are the long flag names
// (as CLI11 reads them, '_' and '-' alike); a [table] has no meaning here. Empty when it is good.
std::string config_file_problem(const CLI::App& app, const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};  // CLI11 says the file cannot be read
  std::vector<std::string> known;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) {
      if (name != "help" && name != "config" && name != "version") known.push_back(name);
    }
  }
  std::map<std::string, int> seen;  // by key: its line
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    std::string where = path + ":" + std::to_string(number) + ": ";
    std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    if (line[first] == '[') {
      return where + "'" + line.substr(first, 60) + "': kcached's configuration has no tables; write each key at the "
             "top level (keys are kcached's long flag names)";
    }
    std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;  // CLI11 says what is wrong with it
    std::string key = line.substr(first, eq - first);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.size() > 1 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front()) key = key.substr(1, key.size() - 2);
    std::replace(key.begin(), key.end(), '_', '-');
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return where + "unknown key '" + key.substr(0, 60) + "'; the keys are kcached's long flag names: " + list;
    }
    if (auto [it, fresh] = seen.emplace(key, number); !fresh) {
      return where + "'" + key + "' is given a second time (first on line " + std::to_string(it->second) +
             "); give each key once";
    }
  }
  return {};
}

}  // namespace

ParsedConfig parse_config(int argc, char** argv, const std::string& version) {
  Config c;
  CLI::App app{"kcached: the kcache compile cache daemon (gRPC, RocksDB)", "kcached"};
  app.set_version_flag("--version", version, "Print the version, the commit and the LLVM and CUDA it was built with");
  app.set_config("--config", "", "Read options from this TOML file (keys are the long flag names)");
  app.add_option("--listen", c.listen, "Address to listen on, HOST:PORT (port 0 picks a free port)")
      ->capture_default_str();
  app.add_option("--db", c.db, "Folder holding the RocksDB database")->capture_default_str();
  std::string max_size = "10G", max_module = "64M", worker_memory = "8G", hot_cache = "256M";
  app.add_option("--max-size", max_size, "Most image bytes kept (bytes, or with K/M/G/T)")->capture_default_str();
  app.add_option("--hot-cache-size", hot_cache,
                 "Memory for recently read images, served without reading the database (bytes, or with K/M/G/T; 0: "
                 "none)")
      ->capture_default_str();
  app.add_option("--workers", c.workers, "Compile threads (0: one per core)")->capture_default_str();
  app.add_option("--queue-depth", c.queue_depth, "Compile jobs waiting before RESOURCE_EXHAUSTED (0: 4 per worker)")
      ->capture_default_str();
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--max-module-size", max_module, "Largest module accepted (bytes, or with K/M/G)")
      ->capture_default_str();
  app.add_option("--max-archs", c.max_archs, "Most archs one job may name")->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--cuda-root", c.cuda_root, "CUDA toolkit for cubin (ptxas); absent: PTX only")
      ->capture_default_str();
  app.add_option("--rocm-device-libs", c.rocm_device_libs,
                 "Folder of ROCm's device libraries (ocml.bc, ockl.bc, hip.bc); default: Debian's rocm-device-libs, "
                 "else /opt/rocm/amdgcn/bitcode");
  app.add_option("--port-file", c.port_file, "Write the bound port to this file once listening");
  app.add_option("--job-timeout", c.job_timeout_s,
                 "Seconds a compile may take; past it the job fails with DEADLINE_EXCEEDED and its worker is killed "
                 "(real kernels can spend a minute in ptxas)")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str();
  app.add_option("--cubin-assembler", c.cubin_assembler,
                 "PTX to cubin: auto (nvJitLink in process where the toolkit has it, else ptxas), nvjitlink, ptxas")
      ->check(CLI::IsMember({"auto", "nvjitlink", "ptxas"}))
      ->capture_default_str();
  app.add_option("--worker-memory", worker_memory,
                 "Address-space limit of each compile worker process (bytes, or with K/M/G; 0: none)")
      ->capture_default_str();
  app.add_option("--tls-cert", c.tls_cert, "PEM certificate (chain) to serve TLS with (needs --tls-key)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", c.tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile)->needs("--tls-cert");
  app.add_option("--tls-client-ca", c.tls_client_ca,
                 "PEM CA bundle: require client certificates signed by it (mutual TLS)")
      ->check(CLI::ExistingFile)
      ->needs("--tls-cert");
  app.add_flag("--plaintext", c.plaintext,
               "Serve without TLS on a non-loopback address (loopback needs no flag); kcached warns")
      ->excludes("--tls-cert");
  app.add_option("--tokens-file", c.tokens_file,
                 "Bearer tokens, one 'NAME ROLE TOKEN' line each (roles: read, compile, admin); absent: no "
                 "authentication")
      ->check(CLI::ExistingFile);
  app.add_option("--http-listen", c.http_listen,
                 "HOST:PORT to serve cached images over HTTP/1.1 on (GET /v1/SIDE/KEY/ARCH/KIND), the path a "
                 "cached `kcache compile` takes; HTTPS with the --tls-* files, tokens as for gRPC. Default: the "
                 "--listen host with the next port (127.0.0.1:7878 -> 127.0.0.1:7879); off: none");
  app.add_flag("--reflection", c.reflection,
               "Serve gRPC server reflection (for grpcurl without .proto files); it needs no token, so it is off "
               "unless asked for");
  app.add_option("--max-connections", c.max_connections,
                 "Connections each listener (gRPC, HTTP) holds open at once; further ones are refused, or take "
                 "the place of the oldest still in its handshake")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-connections-per-peer", c.max_connections_per_peer,
                 "Connections one peer address may hold open on each listener")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--idle-timeout", c.idle_timeout_s,
                 "Seconds a gRPC connection may stay without calls before kcached closes it (GOAWAY)")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str();
  app.add_option("--metrics-listen", c.metrics_listen,
                 "HOST:PORT to serve Prometheus metrics on, over plain HTTP without authentication (GET /metrics)");
  app.add_option("--remote", c.remote,
                 "Share a cache with a fleet through Redis: redis://[USER@]HOST:PORT (one primary) or "
                 "redis-cluster://HOST:PORT[,HOST:PORT...] (seed nodes of a Redis Cluster). Looked up after the "
                 "local store, before compiling; local compiles are written to it in the background");
  app.add_option("--remote-password-file", c.remote_password_file,
                 "File holding the Redis password (the ACL user goes in the --remote URL)")
      ->check(CLI::ExistingFile)
      ->needs("--remote");
  app.add_option("--remote-secret-file", c.remote_secret_file,
                 "File holding the fleet's HMAC key (at least 32 bytes; every daemon of the fleet has the same). "
                 "Remote entries without a valid tag are never served. Required with --remote")
      ->check(CLI::ExistingFile)
      ->needs("--remote");
  app.add_option("--http-host", c.http_hosts,
                 "A name clients reach the HTTP listeners by (repeatable; .svc allows every name ending so): without "
                 "--tokens-file, a request for any other name than an address, localhost or the machine's name is "
                 "refused (DNS rebinding)");
  app.add_option("--jail", c.jail,
                 "How tools run on peers' bytes: bwrap (a jail: its own namespaces, read-only toolkit, no network, "
                 "seccomp, limits) or none")
      ->check(CLI::IsMember({"bwrap", "none"}))
      ->capture_default_str();
  app.add_flag("--allow-unjailed-steps", c.allow_unjailed_steps,
               "Run build steps (cicc, clang, ptxas for the compiler launcher) even where the jail cannot be set up: "
               "any client with the compile role may then run code as kcached's user");
  app.add_flag("--remote-read-only", c.remote_read_only,
               "Read the remote tier but never write it or take compile leases (untrusted zones)");
  app.add_option("--remote-timeout-ms", c.remote_timeout_ms, "Time limit of one Redis operation (ms)")
      ->check(CLI::Range(1u, 60000u))
      ->capture_default_str();
  app.add_option("--remote-connect-timeout-ms", c.remote_connect_timeout_ms, "Time limit of a Redis connect (ms)")
      ->check(CLI::Range(1u, 60000u))
      ->capture_default_str();
  std::string remote_queue = "256M";
  app.add_option("--remote-write-queue-size", remote_queue,
                 "Bytes of compiled images waiting to be written to the remote; a write that does not fit is "
                 "dropped and counted, never waited for; no larger entry is written or read either (bytes, or "
                 "with K/M/G)")
      ->capture_default_str();
  std::string remote_read_budget;
  app.add_option("--remote-read-budget", remote_read_budget,
                 "Bytes all Redis replies in flight may hold at once, across requests (a value counts twice while "
                 "it is read); a reply that would pass it is refused unread, counted and treated as a miss. "
                 "Default: room for one reply of the largest entry (bytes, or with K/M/G)");
  app.add_option("--remote-lease-ms", c.remote_lease_ms,
                 "Lifetime of a fleet compile lease (ms), renewed while the compile runs; a daemon that dies "
                 "holding one delays others by at most this")
      ->check(CLI::Range(100u, 3600000u))
      ->capture_default_str();
  app.add_flag("--verify", c.verify,
               "Check every entry of the database at --db (decoding, payloads, SHA-256, host image check, counters), "
               "print what is wrong and exit: 0 all good, 1 problems found. The daemon must be stopped");
  app.add_flag("--repair", c.repair, "With --verify: remove bad entries whole and rewrite the usage counters")
      ->needs("--verify");
  // A misspelt key in a config file must not be silently ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string file = arg == "--config" && i + 1 < argc ? argv[i + 1]
                       : arg.starts_with("--config=")    ? std::string(arg.substr(9))
                                                         : "";
    if (file.empty()) continue;
    if (std::string problem = config_file_problem(app, file); !problem.empty()) {
      std::fprintf(stderr, "kcached: %s\n", problem.c_str());
      return {std::nullopt, 2};
    }
  }
  try {
    app.parse(argc, argv);
    if (auto e = parse_size_option(max_size, c.max_size); !e.empty()) throw CLI::ValidationError("--max-size", e);
    if (auto e = parse_size_option(hot_cache, c.hot_cache_size); !e.empty()) {
      throw CLI::ValidationError("--hot-cache-size", e);
    }
    if (auto e = parse_size_option(max_module, c.max_module_size); !e.empty()) {
      throw CLI::ValidationError("--max-module-size", e);
    }
    if (auto e = parse_size_option(worker_memory, c.worker_memory); !e.empty()) {
      throw CLI::ValidationError("--worker-memory", e);
    }
    if (auto e = parse_size_option(remote_queue, c.remote_write_queue_size); !e.empty()) {
      throw CLI::ValidationError("--remote-write-queue-size", e);
    }
    if (!remote_read_budget.empty()) {
      if (auto e = parse_size_option(remote_read_budget, c.remote_read_budget); !e.empty()) {
        throw CLI::ValidationError("--remote-read-budget", e);
      }
      if (c.remote_read_budget == 0) throw CLI::ValidationError("--remote-read-budget", "must be more than 0");
    }
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return {std::nullopt, code == 0 ? 0 : 2};
  }
  // A listen address without its port is a usage error, said as one (not a complaint about TLS).
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--listen", &c.listen},
                                    {"--metrics-listen", &c.metrics_listen}, {"--http-listen", &c.http_listen}}) {
    if (value->empty() || *value == "off") continue;
    if (auto address = parse_listen_address(*value, flag); !address) {
      std::fprintf(stderr, "kcached: %s: give HOST:PORT (port 0 picks a free one)\n", address.error().message.c_str());
      return {std::nullopt, 2};
    }
  }
  if (!c.tls_cert.empty() && c.tls_key.empty()) {
    std::fprintf(stderr, "--tls-cert needs --tls-key\n");
    return {std::nullopt, 2};
  }
  if (!c.remote.empty() && c.remote_secret_file.empty()) {
    std::fprintf(stderr,
                 "--remote needs --remote-secret-file: the fleet's HMAC key, without which any client with access to "
                 "Redis could plant an image the daemons serve (create one with `openssl rand -hex 32 > FILE`)\n");
    return {std::nullopt, 2};
  }
  if (c.workers == 0) c.workers = std::max(1u, std::thread::hardware_concurrency());
  if (c.queue_depth == 0) c.queue_depth = 4 * c.workers;
  return {c, 0};
}

Expected<ListenAddress> parse_listen_address(const std::string& listen, const std::string& what) {
  auto bad = [&] { return make_error(ErrorCode::k_invalid_argument, what + " '" + listen + "' is not HOST:PORT"); };
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size() || listen.size() - colon - 1 > 5) return bad();
  std::string digits = listen.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return bad();
  int port = std::stoi(digits);
  if (port > 65535) return bad();
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string::npos) return bad();  // an IPv6 address needs its brackets
  return ListenAddress{host, port};
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

Expected<std::string> http_listen_address(const Config& config) {
  if (config.http_listen == "off") return std::string();
  if (!config.http_listen.empty()) return config.http_listen;
  auto grpc = parse_listen_address(config.listen, "--listen");
  if (!grpc) return grpc.error();
  if (grpc->port == 65535) {
    return make_error(ErrorCode::k_invalid_argument,
                      "--listen uses port 65535, so the HTTP image API has no next port: give --http-listen "
                      "HOST:PORT, or --http-listen off");
  }
  std::string host = grpc->host.find(':') != std::string::npos ? "[" + grpc->host + "]" : grpc->host;
  return host + ":" + std::to_string(grpc->port == 0 ? 0 : grpc->port + 1);
}

}  // namespace kcache::server
