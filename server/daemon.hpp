// The running daemon: owns the store, the compiler, the worker pool, the service and the gRPC
// server, and takes them down in the right order.
#pragma once

#include <memory>
#include <string>

#include "config.hpp"
#include "kcache/expected.hpp"

namespace grpc {
class Server;
}

namespace kcache::server {

class Store;
class Compiler;
class JobQueue;
class KCacheService;
class Cache;
class CallTracker;
class Authenticator;
class Metrics;
class HttpListener;
class StatusPage;
namespace remote {
class RemoteTier;
}
namespace net {
class FdBudget;
class GrpcGate;
}
namespace worker {
class WorkerSet;
}

class Daemon {
 public:
  // Opens the store, detects the toolchain and starts serving; port 0 in the listen address
  // becomes the bound port (port()).
  static Expected<std::unique_ptr<Daemon>> start(const Config& config);
  ~Daemon();

  int port() const { return m_port; }

  // Stops accepting, lets in-flight calls finish (up to a grace period), drains the worker
  // pool and flushes the store. Idempotent.
  void shutdown();

 private:
  Daemon() = default;

  std::unique_ptr<Store> m_store;
  // Before m_pool and m_service: compiles finishing on pool threads queue writes to it.
  std::unique_ptr<remote::RemoteTier> m_remote;  // --remote; null without
  std::unique_ptr<Compiler> m_compiler;
  std::unique_ptr<worker::WorkerSet> m_workers;
  std::unique_ptr<JobQueue> m_pool;  // after m_workers: its threads use them until it is gone
  std::unique_ptr<Authenticator> m_auth;
  std::unique_ptr<net::FdBudget> m_fds;  // before the listeners, which count against it
  std::unique_ptr<net::GrpcGate> m_gate;  // the gRPC port; gRPC serves it on a Unix socket
  std::unique_ptr<Metrics> m_metrics;
  std::unique_ptr<Cache> m_cache;  // the core every front end asks
  std::unique_ptr<CallTracker> m_calls;  // both front ends' calls in progress, for the drain
  // --http-listen's page; samples m_service's counters, so shutdown() stops it before m_service goes.
  std::unique_ptr<StatusPage> m_status;
  std::unique_ptr<HttpListener> m_metrics_server;  // --metrics-listen
  std::unique_ptr<HttpListener> m_http;            // --http-listen
  std::unique_ptr<KCacheService> m_service;
  std::unique_ptr<grpc::Server> m_server;
  int m_port = 0;
  bool m_stopped = false;
};

}  // namespace kcache::server
