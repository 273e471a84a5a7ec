// SteppedMean: the base of the strategies that compute FedAvg's exact mean of a round and
// then step from it (the server optimizers, server_optimizer.hpp; SCAFFOLD, scaffold.hpp).
// Every update goes to the mean exactly as FedAvg takes it — folded, measured, streamed
// from an encoded payload or taken back — and the round's global model is kept for the step
// the subclass takes in finish_round.
//
// Thread safety: none, as Strategy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "server/federation/aggregate.hpp"

namespace fedcore::federation {

class SteppedMean : public Strategy {
 public:
  void begin_round(std::span<const float> global, std::uint64_t max_total_weight) override {
    global_ = global;
    mean_->begin_round(global, max_total_weight);
  }
  void add_update(std::span<const float> update, std::uint64_t samples) override {
    mean_->add_update(update, samples);
  }
  std::optional<double> add_update_measured(std::span<const float> update,
                                            std::uint64_t samples) override {
    return mean_->add_update_measured(update, samples);
  }
  void remove_update(std::span<const float> update, std::uint64_t samples) override {
    mean_->remove_update(update, samples);
  }
  std::optional<double> add_update_measured(const UpdateChunks& update,
                                            std::uint64_t samples) override {
    return mean_->add_update_measured(update, samples);
  }
  void remove_update(const UpdateChunks& update, std::uint64_t samples) override {
    mean_->remove_update(update, samples);
  }
  void use_workers(WorkerPool* workers) noexcept override { mean_->use_workers(workers); }
  std::size_t updates() const noexcept override { return mean_->updates(); }

 protected:
  // `mean`: FedAvg's strategy (make_strategy("fedavg", n)).
  explicit SteppedMean(std::unique_ptr<Strategy> mean) : mean_(std::move(mean)) {}
  // The round's mean, moved out of the FedAvg strategy. REQUIRES: updates() > 0.
  std::vector<float> finish_mean() { return mean_->finish_round(); }
  // The global model the round began from (begin_round's).
  std::span<const float> round_global() const noexcept { return global_; }

 private:
  std::unique_ptr<Strategy> mean_;
  std::span<const float> global_;
};

}  // namespace fedcore::federation
