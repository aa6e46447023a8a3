// kcached's configuration: command-line flags, optionally read from a config file (--config).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache::server {

struct Config {
  std::string listen = "127.0.0.1:7878";
  std::filesystem::path db = "var/kcache";
  std::uint64_t max_size = 10ULL << 30;  // bytes of images kept
  std::uint64_t hot_cache_size = 256ULL << 20;  // memory for recently read images; 0: none
  std::size_t workers = 0;               // 0: one per core
  std::size_t queue_depth = 0;           // 0: 4 per worker
  std::string log_level = "info";
  std::uint64_t max_module_size = k_default_max_module_bytes;  // --max-module-size ("64M" in its --help)
  std::uint32_t max_archs = 16;
  std::filesystem::path cuda_root = "/usr/local/cuda";
  std::filesystem::path rocm_device_libs;  // ocml.bc, ockl.bc, hip.bc; empty: the usual places
  std::filesystem::path port_file;       // written once listening: the bound port
  std::string cubin_assembler = "auto";  // auto (nvJitLink where present), nvjitlink, ptxas
  std::uint32_t job_timeout_s = 600;     // a compile's worker is killed after this long
  std::uint64_t worker_memory = 8ULL << 30;  // address-space limit of each compile worker; 0: none
  std::filesystem::path tls_cert;       // PEM server certificate chain; with tls_key: serve TLS
  std::filesystem::path tls_key;        // PEM private key
  std::filesystem::path tls_client_ca;  // PEM CA bundle: require and verify client certificates (mTLS)
  bool plaintext = false;               // serve without TLS on a non-loopback address (warned)
  std::filesystem::path tokens_file;    // NAME ROLE TOKEN lines; absent: no authentication
  // HOST:PORT for the HTTP image API (--tls-* apply); "off": none; empty (the default): the
  // gRPC host with the next port, since the fast cached compile needs it (http_listen_address).
  std::string http_listen;
  bool reflection = false;              // serve gRPC server reflection (it needs no token, as health)
  std::string metrics_listen;           // HOST:PORT for Prometheus text over plain HTTP; empty: off
  // Every listener's connections (net/grpc_gate.hpp, http.hpp): in all, and from one address.
  std::size_t max_connections = 1024;
  std::size_t max_connections_per_peer = 256;
  std::uint32_t idle_timeout_s = 300;   // a gRPC connection without calls this long is closed (GOAWAY)
  // The remote tier shared by a fleet (server/remote/tier.hpp); empty: none.
  std::string remote;                       // redis://[USER@]HOST:PORT or redis-cluster://HOST:PORT[,...]
  std::filesystem::path remote_password_file;  // the Redis password, one line
  std::filesystem::path remote_secret_file;    // the fleet's HMAC key (required with remote)
  bool remote_read_only = false;            // read the remote; never write it or take leases
  std::vector<std::string> http_hosts;      // names the HTTP listeners answer without tokens, besides their own
  std::string jail = "bwrap";               // bwrap: tools run on peers' bytes in a jail; none: without
  bool allow_unjailed_steps = false;        // run build steps where there is no jail (the operator accepts it)
  std::uint32_t remote_timeout_ms = 500;    // per Redis operation
  std::uint32_t remote_connect_timeout_ms = 200;
  std::uint64_t remote_write_queue_size = 256ULL << 20;  // bytes waiting to be written; more are dropped
  std::uint64_t remote_read_budget = 0;     // bytes all Redis replies may hold at once; 0: one largest entry's
  std::uint32_t remote_lease_ms = 10000;    // lease time-to-live, renewed while compiling
  bool verify = false;  // --verify: check the database and exit instead of serving
  bool repair = false;  // --repair (with --verify): remove bad entries, fix counters
};

// Parses argv. On --help or a usage error it prints to stdout/stderr and returns the exit code
// to leave with; otherwise the configuration.
struct ParsedConfig {
  std::optional<Config> config;
  int exit_code = 0;
};
// `version` is what --version prints (kcache/version.hpp, linked by the program alone).
ParsedConfig parse_config(int argc, char** argv, const std::string& version = "kcached");

// A listen address: "HOST:PORT" or "[V6ADDR]:PORT"; the host is returned without brackets.
// The one parser of listen addresses in kcached.
struct ListenAddress {
  std::string host;
  int port = 0;
};
// INVALID_ARGUMENT, naming the flag `what`, for anything else.
Expected<ListenAddress> parse_listen_address(const std::string& listen, const std::string& what);

// Whether `host` is "localhost" or an address literal in 127.0.0.0/8 or ::1 (not a name that
// merely starts with "127.").
bool is_loopback_host(const std::string& host);

// The HTTP image API's address for `config`: its http_listen, or with the default, the gRPC
// listen address with the next port ("127.0.0.1:7878" -> "127.0.0.1:7879"; port 0 stays 0).
// Empty when it is off.
Expected<std::string> http_listen_address(const Config& config);

}  // namespace kcache::server
