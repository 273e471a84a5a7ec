// A run controller for the storage-fault tests: a ManualClock, two fake clients that answer
// every TRAIN at once, a real SQLite history and checkpoint folder wherever the test puts
// them (a temp folder, a tmpfs of a few MiB, a read-only mount), and the Disks the test
// injects. No sockets, no threads, no sleeps.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/federation/run_controller.hpp"
#include "shared/model/param_io.hpp"

namespace fedcore::federation::testing {

// Two clients, "a" and "b", online with the data schema of the run below.
class TwoClients final : public SessionDirectory {
 public:
  std::vector<Candidate> online() const override {
    return {{"a", {4}, 2, 50, false}, {"b", {4}, 2, 50, false}};
  }
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global,
                  std::function<void()> /*written*/) override {
    auto request = protocol::parse_train_request(metadata);
    ASSERT_TRUE(request) << request.error().message;
    pending[client_id] = {*request, std::move(global)};
  }
  void send(const std::string&, protocol::MessageType, std::string,
            std::shared_ptr<const std::vector<float>>) override {}

  struct Train {
    protocol::TrainRequest request;
    std::shared_ptr<const std::vector<float>> global;
  };
  std::map<std::string, Train> pending;  // the TRAIN each client has not answered yet
};

class Counting final : public Entropy {
 public:
  std::string nonce() override {
    auto digits = std::to_string(++count_);
    return std::string(32 - digits.size(), '0') + digits;
  }

 private:
  std::uint64_t count_ = 0;
};

class EventLog final : public EventSink {
 public:
  void record(std::string_view kind, std::optional<std::int64_t>, std::optional<std::int64_t>,
              std::string_view, std::string detail_json) override {
    events.push_back({std::string(kind), std::move(detail_json)});
  }
  std::size_t count(std::string_view kind) const {
    std::size_t n = 0;
    for (const auto& e : events) {
      n += e.first == kind ? 1 : 0;
    }
    return n;
  }
  // The detail of the latest event of `kind` ("" if none).
  std::string last(std::string_view kind) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (it->first == kind) {
        return it->second;
      }
    }
    return "";
  }
  std::vector<std::pair<std::string, std::string>> events;  // kind, detail
};

// `rounds` rounds of logistic regression on 4 features, both clients in every round, no
// federated evaluation and no feature scaling (so a round is TRAIN, two updates, commit).
inline RunConfig storage_test_run(int rounds) {
  auto parsed = parse_run_config(
      R"({"name":"storage","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
      R"("rounds":)" +
      std::to_string(rounds) +
      R"(,"clients_per_round":2,"min_clients":2,"round_timeout_s":10,)"
      R"("wait_for_clients_s":5,"federated_evaluation":false,"feature_scaling":"none"})");
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

class StorageRig {
 public:
  // Opens (or reopens) the history at `db_path`; checkpoints go to `checkpoint_dir`;
  // `background`, if any, takes the checkpoint writes that may overlap the next round.
  // `sink`, if given, receives the events instead of `events`; with `second_connection`
  // the background's jobs commit the rounds they write through a second connection
  // (RunEnvironment::background_store), as the server does. `keep_checkpoints` is the
  // server's checkpoint retention (0: every round's file).
  StorageRig(std::string db_path, std::string checkpoint_dir, Disks* disks = nullptr,
             StorageRetry retry = {}, BackgroundWork* background = nullptr,
             bool second_connection = false, EventSink* sink = nullptr,
             std::int64_t keep_checkpoints = 0)
      : db_path_(std::move(db_path)), checkpoint_dir_(std::move(checkpoint_dir)) {
    std::filesystem::create_directories(checkpoint_dir_);
    auto opened = store::HistoryStore::open(db_path_);
    EXPECT_TRUE(opened) << opened.error().message;
    store.emplace(std::move(*opened));
    if (second_connection) {
      auto second = store::HistoryStore::open_second_connection(*store);
      EXPECT_TRUE(second) << second.error().message;
      commit_store.emplace(std::move(*second));
    }
    for (const char* id : {"a", "b"}) {
      store::ClientRecord record;
      record.id = id;
      record.online = true;
      EXPECT_TRUE(store->upsert_client(record));
    }
    ServerHooks hooks;
    hooks.round_committed = [this](std::int64_t, const store::RoundRecord& r) {
      committed.push_back(r.round);
    };
    RunEnvironment env{*store, clients,         clock, entropy, sink != nullptr ? *sink : events,
                       hooks,  checkpoint_dir_, disks, retry};
    env.background = background;
    env.background_store = commit_store ? &*commit_store : nullptr;
    env.keep_checkpoints = keep_checkpoints;
    controller = std::make_unique<RunController>(std::move(env));
  }

  // Both clients answer their TRAIN (the global model shifted by `delta`); the controller
  // then commits the round (or fails to) and starts the next one in the same poll.
  void answer_round(float delta = 0.25f) {
    ASSERT_EQ(clients.pending.size(), 2u) << "no round is waiting for both clients";
    auto pending = std::move(clients.pending);
    clients.pending.clear();
    for (const auto& [id, train] : pending) {
      answer(id, train, delta);
    }
    controller->poll();
  }

  // One client answers its TRAIN; the controller is not polled.
  void answer_one(const std::string& id, float delta = 0.25f) {
    auto it = clients.pending.find(id);
    ASSERT_NE(it, clients.pending.end()) << id << " has no TRAIN to answer";
    auto train = std::move(it->second);
    clients.pending.erase(it);
    answer(id, train, delta);
  }

  // `id` sends the update for `train` (the global model shifted by `delta`).
  void answer(const std::string& id, const TwoClients::Train& train, float delta) {
    protocol::UpdateReport report;
    report.run_id = train.request.run_id;
    report.round = train.request.round;
    report.nonce = train.request.nonce;
    report.layout_fingerprint = train.request.layout_fingerprint;
    report.samples = 50;
    report.loss = 0.5;
    report.accuracy = 0.75;
    std::vector<float> params(*train.global);
    for (auto& p : params) {
      p += delta;
    }
    controller->on_update(id, report, params, 100);
  }

  void advance(std::chrono::milliseconds by) {
    clock.advance(by);
    controller->poll();
  }

  store::RunRecord run(std::int64_t id) {
    auto r = store->get_run(id);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : store::RunRecord{};
  }

  // Every committed round's number, in order, from the history.
  std::vector<std::int64_t> committed_rounds(std::int64_t run_id) {
    std::vector<std::int64_t> out;
    auto rounds = store->list_rounds(run_id);
    EXPECT_TRUE(rounds) << rounds.error().message;
    for (const auto& r : rounds ? *rounds : std::vector<store::RoundRecord>{}) {
      if (r.state == store::RoundState::committed) {
        out.push_back(r.round);
      }
    }
    return out;
  }

  // Every referenced checkpoint is a complete file that decodes (CRC and layout checked)
  // and whose size and CRC are the ones recorded; returns how many there are.
  std::size_t verify_checkpoints(std::int64_t run_id) {
    auto checkpoints = store->list_checkpoints(run_id);
    EXPECT_TRUE(checkpoints) << checkpoints.error().message;
    std::size_t ok = 0;
    for (const auto& c : checkpoints ? *checkpoints : std::vector<store::CheckpointRecord>{}) {
      auto bundle = model::load_params(c.ref.path);
      EXPECT_TRUE(bundle) << c.ref.path << ": " << bundle.error().message;
      std::error_code ec;
      EXPECT_EQ(std::filesystem::file_size(c.ref.path, ec), std::uint64_t(c.ref.size_bytes));
      ok += bundle ? 1 : 0;
    }
    return ok;
  }

  // Files in the run's checkpoint folder whose name ends in ".tmp" (a write that failed
  // half-way must leave none).
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (std::filesystem::recursive_directory_iterator it(checkpoint_dir_, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".tmp") {
        out.push_back(it->path().string());
      }
    }
    return out;
  }

  ManualClock clock;
  TwoClients clients;
  Counting entropy;
  EventLog events;
  std::optional<store::HistoryStore> store;
  std::optional<store::HistoryStore> commit_store;  // the background's connection
  std::unique_ptr<RunController> controller;
  std::vector<std::int64_t> committed;  // from the round_committed hook

 private:
  std::string db_path_;
  std::string checkpoint_dir_;
};

// Disks whose file writes and probes refuse on demand, like a disk that fills up and is
// emptied again; otherwise the real file system.
class SwitchableDisks final : public Disks {
 public:
  result<void> write_file(const std::string& path,
                          std::span<const std::span<const std::byte>> parts) override {
    ++writes;
    if (refuse_writes) {
      return fail(errc::io_error, "cannot write '" + path + ".tmp': " + refuse_writes->message);
    }
    return real_.write_file(path, parts);
  }
  result<void> probe(const std::string& dir, std::uint64_t bytes) override {
    ++probes;
    probed_bytes = bytes;
    if (refuse_probes) {
      return fail(refuse_probes->code, "cannot allocate " + std::to_string(bytes) + " bytes in '" +
                                           dir + "': " + refuse_probes->message);
    }
    return real_.probe(dir, bytes);
  }
  // The whole disk refuses (both), or takes writes again (nullopt).
  void refuse(std::optional<error> why) {
    refuse_writes = why;
    refuse_probes = why;
  }

  // What the disk says while refusing: the code a probe gets and the system's words.
  std::optional<error> refuse_writes;
  std::optional<error> refuse_probes;
  int writes = 0;
  int probes = 0;
  std::uint64_t probed_bytes = 0;

 private:
  RealDisks real_;
};

inline const error kDiskFull{errc::resource_exhausted, "No space left on device"};
inline const error kReadOnly{errc::permission_denied, "Read-only file system"};

}  // namespace fedcore::federation::testing
