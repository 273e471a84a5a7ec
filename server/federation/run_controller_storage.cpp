// RunController, storage faults: the run whose checkpoint or commit the disk refused is
// paused and held until a probe finds the storage writable again (storage_fault.hpp).
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/detail/active_run.hpp"
#include "server/federation/run_controller.hpp"
#include "server/store/disk_probe.hpp"

namespace fedcore::federation {
namespace {

using json = nlohmann::json;

// Probes never come closer together than this, whatever StorageRetry says: a hold must
// not turn into a loop of failing writes.
constexpr std::chrono::milliseconds kMinProbeInterval{100};

double seconds(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

// " [checkpoints '/data/ckpt': 0 of 2097152 bytes free, read-only]": the figures an
// operator needs next to the error.
std::string space_of(std::string_view label, const std::string& dir) {
  auto space = store::disk_space(dir);
  if (!space) {
    return " [" + std::string(label) + ": " + space.error().message + "]";
  }
  return " [" + std::string(label) + " '" + dir + "': " + std::to_string(space->available_bytes) +
         " of " + std::to_string(space->total_bytes) + " bytes free" +
         (space->read_only ? ", read-only" : "") + "]";
}

std::string directory_of(const std::string& file) {
  auto dir = std::filesystem::path(file).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

}  // namespace

void RunController::pause_for_failed_write(const error& failure, FailedWrite what,
                                           std::int64_t round) {
  if (what == FailedWrite::round_commit && !is_storage_failure(failure)) {
    end_run(store::RunState::paused,
            "cannot commit round " + std::to_string(round) + ": " + failure.message);
    return;
  }
  hold_for_storage(failure, what, round);
}

// Nothing of the round is stored (the file, if written, is referenced by no row); the run
// is recorded as paused when the database still takes that small write, and held either
// way.
void RunController::hold_for_storage(const error& failure, FailedWrite what,
                                     std::int64_t failed_round) {
  const auto& run = *active_;
  const auto run_id = run.record.id;
  const auto round = failed_round > 0 ? failed_round
                     : run.round      ? run.round->number
                                      : run.record.last_round + 1;
  const auto& retry = env_.storage_retry;
  // A probe must find room for one more checkpoint file and the history's growth.
  std::uint64_t reserve = retry.margin_bytes;
  if (run.model && run.model->global) {
    reserve += run.model->global->size() * sizeof(float);
  }
  // What the disk says now is more specific than the failed call's code (SQLite reports a
  // read-only file system as an I/O error).
  auto kind = storage_fault_kind(failure.code);
  if (auto probe = probe_storage(reserve); !probe) {
    kind = storage_fault_kind(probe.error().code);
  }
  std::string reason = std::string(storage_fault_text(kind)) + ": ";
  if (what == FailedWrite::round_commit) {
    reason += "database '" + env_.store.path() + "': ";
  }
  reason += failure.message;

  StorageHold hold;
  hold.run_id = run_id;
  hold.after_round = run.record.last_round;
  hold.kind = kind;
  hold.reason = reason;
  hold.since_ms = env_.clock.wall_ms();
  hold.reserve_bytes = reserve;
  hold.interval = std::max(retry.first_probe, kMinProbeInterval);
  hold.next_probe = env_.clock.steady() + hold.interval;

  std::string space = space_of("checkpoints", env_.checkpoint_dir);
  if (!env_.store.in_memory()) {
    space += space_of("database", directory_of(env_.store.path()));
  }
  spdlog::error(
      "run {} round {}: {}; nothing of the round is recorded; the run is paused and "
      "continues after round {} once the storage takes writes again (next probe in "
      "{:.1f} s){}",
      run_id, round, reason, hold.after_round, seconds(hold.interval), space);
  event("storage_fault", run_id, round, "",
        json{{"kind", storage_fault_code(kind)},
             {"reason", reason},
             {"next_probe_s", seconds(hold.interval)}}
            .dump());
  hold_ = std::move(hold);
  end_run(store::RunState::paused, reason);
  // end_run only logs a state it could not store; the hold shows either way.
  if (hold_ && hold_->run_id == run_id) {
    auto stored = env_.store.get_run(run_id);
    hold_->recorded = stored && stored->state == store::RunState::paused;
  }
}

result<void> RunController::probe_storage(std::uint64_t bytes) {
  std::vector<std::string> dirs{env_.checkpoint_dir};
  if (!env_.store.in_memory()) {
    const auto db_dir = directory_of(env_.store.path());
    if (db_dir != env_.checkpoint_dir) {
      dirs.push_back(db_dir);
    }
  }
  for (const auto& dir : dirs) {
    if (auto ok = disks().probe(dir, bytes); !ok) {
      return ok.error();
    }
  }
  return {};
}

// The probe's turn came: resume, or wait twice as long (up to max_interval).
void RunController::retry_held_run() {
  auto resumed = resume_held_run("storage_probe");
  if (resumed || !hold_) {
    return;
  }
  auto& hold = *hold_;
  ++hold.probes;
  hold.last_probe_error = resumed.error().message;
  hold.interval = std::clamp(hold.interval * 2, kMinProbeInterval,
                             std::max(env_.storage_retry.max_interval, kMinProbeInterval));
  hold.next_probe = env_.clock.steady() + hold.interval;
  spdlog::warn("run {}: the storage still refuses writes (probe {}): {}; next probe in {:.1f} s",
               hold.run_id, hold.probes, hold.last_probe_error, seconds(hold.interval));
}

// Probes both directories, then records the run as running: that write is the database's
// probe. On success the run is active again after its last committed round.
result<void> RunController::resume_held_run(std::string_view by) {
  const auto hold = *hold_;
  const auto name = "run " + std::to_string(hold.run_id);
  auto run = env_.store.get_run(hold.run_id);
  if (!run) {
    return run.error();
  }
  if (run->state != store::RunState::paused && run->state != store::RunState::running) {
    // Ended behind the controller's back (another process on the same file): nothing to
    // resume.
    hold_.reset();
    return fail(errc::failed_precondition,
                name + " is " + std::string(store::to_string(run->state)) + ", not paused");
  }
  auto config = parse_run_config(run->config_json);
  if (!config) {
    hold_.reset();
    return fail(errc::data_loss, name + ": stored config unreadable: " + config.error().message);
  }
  if (auto probed = probe_storage(hold.reserve_bytes); !probed) {
    return probed.error();
  }
  const auto now = env_.clock.wall_ms();
  if (auto saved = env_.store.set_run_state(hold.run_id, store::RunState::running, "", now);
      !saved) {
    return fail(saved.error().code,
                "database '" + env_.store.path() + "': " + saved.error().message);
  }
  const double paused_s = double(now - hold.since_ms) / 1000.0;
  spdlog::info(
      "run {} resumed ({}) after round {}: the storage takes writes again ({} failed probe(s), "
      "paused {:.1f} s)",
      hold.run_id, by, run->last_round, hold.probes, paused_s);
  event("run_resumed", hold.run_id, std::nullopt, "",
        json{{"after_round", run->last_round},
             {"by", by},
             {"paused_s", paused_s},
             {"failed_probes", hold.probes}}
            .dump());
  hold_.reset();
  activate(*run, std::move(*config));
  return {};
}

// After a restart (resume_runs): the newest run paused for its storage is held again,
// with a probe at the first poll, unless another run is active.
void RunController::hold_paused_for_storage(const std::vector<store::RunRecord>& runs) {
  for (const auto& run : runs) {
    if (active_ || stopping_ || hold_) {
      return;
    }
    const auto kind = storage_fault_of_reason(run.error);
    if (!kind || run.state != store::RunState::paused) {
      continue;
    }
    hold_.emplace();
    hold_->run_id = run.id;
    hold_->after_round = run.last_round;
    hold_->kind = *kind;
    hold_->reason = run.error;
    hold_->since_ms = run.updated_ms;
    hold_->recorded = true;
    hold_->reserve_bytes = env_.storage_retry.margin_bytes;
    hold_->interval = std::max(env_.storage_retry.first_probe, kMinProbeInterval);
    hold_->next_probe = env_.clock.steady();
    spdlog::info("run {} was paused for its storage ({}); it resumes once a probe passes", run.id,
                 run.error);
  }
}

}  // namespace fedcore::federation
