// The in-flight protocol compiles and build steps share (Cache::run_once, cache.hpp): one run per
// (side, key, images) in this daemon through the table, across the fleet through the lease; the
// run in parts on the pool; the store and the fleet's write from there; the caller's deadline.
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "cache/cache.hpp"
#include "remote/entry.hpp"

namespace kcache::server {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

template <class Result>
Expected<Result> Cache::run_once(InFlight<Result>& table, Side side, const Key& key,
                                 const std::vector<ImageRequest>& wanted, Answer& answer, Work<Result> work) {
  const std::string flight = remote::flight_of(side, key, wanted);
  const std::string what = work.what;
  // Owned by the queued parts, which may outlive this request.
  struct Pending {
    Work<Result> work;
    std::mutex mutex;  // guards outputs, left and started
    std::vector<Expected<Result>> outputs;
    std::size_t left = 0;
    Clock::time_point started = Clock::time_point::max();
    std::optional<remote::RemoteTier::Lease> lease;  // the fleet's, held while it runs
    std::promise<Expected<Result>> done;
  };
  std::shared_future<Expected<Result>> result;
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard lock(table.mutex);
    if (auto it = table.flights.find(flight); it != table.flights.end()) {
      result = it->second;
    } else if (all_stored(side, key, wanted)) {
      // The run this request missed finished between the caller's listing and now (it stores
      // before it leaves the table): nothing to run, the images are read as stored.
      answer = Answer::coalesced;
      return Result{};
    } else {
      pending = std::make_shared<Pending>();
      result = pending->done.get_future().share();
      table.flights.emplace(flight, result);
    }
  }
  answer = pending == nullptr ? Answer::coalesced : Answer::compiled;
  auto leave_table = [&table, flight] {
    std::lock_guard lock(table.mutex);
    table.flights.erase(flight);
  };
  if (pending && m_remote != nullptr) {
    // Another daemon may have run it, or be running it now.
    remote::RemoteTier::Turn turn = m_remote->await_turn(side, key, flight, Clock::now() + m_limits.job_timeout,
                                                         [&] { return pull(side, key, &wanted); });
    if (turn.pulled) {
      answer = Answer::remote;
      leave_table();
      pending->done.set_value(Result{});  // stored: read as stored
      return Result{};
    }
    pending->lease = std::move(turn.lease);
  }
  if (pending) {
    pending->work = std::move(work);
    pending->outputs.resize(pending->work.parts, make_error(ErrorCode::k_internal, "not run"));
    pending->left = pending->work.parts;
    // The last part to end stores the whole result, then releases its waiters.
    auto part_done = [this, pending, key, side, leave_table](std::size_t index, Expected<Result> output) {
      Clock::time_point started;
      {
        std::lock_guard lock(pending->mutex);
        pending->outputs[index] = std::move(output);
        if (--pending->left > 0) return;
        started = pending->started;
      }
      Work<Result>& w = pending->work;
      Expected<Result> merged = w.merge(std::move(pending->outputs));
      double seconds = 0;
      if (started != Clock::time_point::max()) {
        seconds = std::chrono::duration<double>(Clock::now() - started).count();
        m_metrics.observe_compile(seconds);
        m_metrics.observe_tier(Metrics::Tier::compile, seconds);
      }
      auto entry = merged ? w.entry(*merged) : std::nullopt;
      if (entry) {
        w.ran(*merged, entry->second, seconds);
        if (auto put = m_store.put(side, key, entry->first, entry->second); !put) {
          // Too large for the whole cache: the caller still gets it, and no daemon keeps it.
          if (put.error().code == ErrorCode::k_resource_exhausted) w.too_large(*merged, put.error());
          else merged = put.error();
        } else if (m_remote != nullptr) {
          // To the fleet in the background; the lease goes once the entry is written.
          m_remote->write(side, key, entry->first, std::move(entry->second), std::move(pending->lease));
        }
      }
      if (pending->lease) m_remote->release(std::move(*pending->lease));
      leave_table();  // stored (or failed) before it leaves the table: a request arriving now sees a hit
      pending->done.set_value(std::move(merged));
    };
    for (std::size_t i = 0; i < pending->work.parts; ++i) {
      auto queued = m_pool.submit([this, pending, part_done, i] {
        {
          std::lock_guard lock(pending->mutex);
          pending->started = std::min(pending->started, Clock::now());
        }
        // Its own core and, while no job waits in the queue, up to its budget of cores no other
        // job holds: a split never takes a core a queued job needs.
        CpuSlots::Lease cpus = m_pool.cpus().take(m_pool.queue_depth() == 0 ? pending->work.cpus_when_idle : 1);
        part_done(i, pending->work.run(i, cpus.cpus()));
      });
      if (!queued) part_done(i, queued.error());
    }
  }
  // The worker is killed at the job's deadline and the run fails with DEADLINE_EXCEEDED; this
  // wait only guards against a run that never reaches a worker (a queue stuck behind others).
  if (result.wait_for(m_limits.job_timeout + k_deadline_slack) == std::future_status::timeout) {
    return make_error(ErrorCode::k_deadline_exceeded, "the " + what + " of key " +
                                                          key.hex() + " did not finish within the job time limit (" +
                                                          std::to_string(m_limits.job_timeout.count()) +
                                                          " s, --job-timeout)");
  }
  return result.get();
}

template Expected<CompileOutput> Cache::run_once(InFlight<CompileOutput>&, Side, const Key&,
                                                 const std::vector<ImageRequest>&, Answer&, Work<CompileOutput>);
template Expected<StepRun> Cache::run_once(InFlight<StepRun>&, Side, const Key&, const std::vector<ImageRequest>&,
                                           Answer&, Work<StepRun>);

}  // namespace kcache::server
