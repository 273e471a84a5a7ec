// PythonSite: the daemon's ExternalTrainer (client/external_trainer.hpp) for a user's Python
// object with fit(parameters, config) and evaluate(parameters, config), the shape a Flower
// user knows.
//
// Parameters go to Python without a copy: a list of read-only NumPy arrays, one per tensor
// of the run's layout, each a view of the received global buffer with the tensor's shape
// (valid during the call only: keep a copy, np.array(p), to hold one longer). What `fit`
// returns is read through the buffer protocol straight into the update: a list of arrays
// in the layout's order and shapes (any float dtype: converted), or one flat array.
//
//   fit(parameters, config)      -> (parameters, num_examples, metrics)
//   evaluate(parameters, config) -> (loss, num_examples, metrics)
//
// `config`: {"run_id", "round", "epochs", "batch_size", "optimizer" (a dict), "lr" (when
// the optimizer has one), "proximal_mu", "seed"}. From `metrics`, "loss" and "accuracy"
// (numbers) travel in the update's report, "accuracy" in an evaluation; other keys stay
// at the site.
//
// A Python exception in either call becomes the request's error: its type and message go
// to the server (which records the site as dropped for the round), its traceback to the
// daemon's log; the daemon carries on.
//
// Thread safety: fit and evaluate run on the daemon's worker thread and take the GIL for
// the call; the daemon's io thread never runs Python.
#pragma once

#include <optional>
#include <pybind11/pybind11.h>

#include "client/external_trainer.hpp"

namespace fedcore::python {

class PythonSite final : public client::ExternalTrainer {
 public:
  // `user`: the Python client object. REQUIRES: the GIL is held (for the reference).
  PythonSite(pybind11::object user, client::SiteDataShape shape,
             std::optional<model::ParamLayout> layout);
  ~PythonSite() override;

  client::SiteDataShape shape() const override { return shape_; }
  std::optional<model::ParamLayout> layout() const override { return layout_; }
  result<client::ExternalFit> fit(const protocol::TrainRequest& request,
                                  const model::ParamLayout& layout,
                                  std::span<const float> global) override;
  result<protocol::LocalEvaluation> evaluate(std::int64_t run_id, std::int64_t round,
                                             const model::ParamLayout& layout,
                                             std::span<const float> params) override;

  // Rounds whose fit returned an update.
  std::uint64_t fits() const noexcept { return fits_; }

 private:
  pybind11::object user_;
  client::SiteDataShape shape_;
  std::optional<model::ParamLayout> layout_;
  std::uint64_t fits_ = 0;
};

}  // namespace fedcore::python
