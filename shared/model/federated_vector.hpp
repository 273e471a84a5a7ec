// The vector a federated round carries for a model Fedcore builds: its parameters, then its
// non-trainable state (BatchNorm's running statistics, Model::state()), under one layout
// whose entries are the parameters' followed by the state's ("bn1.weight", ...,
// "bn1.running_mean", ...). A model without state carries its parameters alone under its own
// layout, so runs of such models keep their fingerprints and checkpoints. An external model
// is one vector already (its layout names PyTorch's running statistics like any tensor).
//
// FedBN (Li et al. 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
// Normalization") keeps part of that vector at each site: every normalisation layer's weight
// and bias (ParamShape::normalization) and the whole state. `site_ranges` says where those
// values are; the server then aggregates the rest, and each site trains and evaluates with
// its own (client/site_batchnorm.hpp, server/federation/run_model.hpp).
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "shared/model/layout.hpp"

namespace fedcore::model {

class Model;

// A run of values in a flat vector.
struct ValueRange {
  std::size_t offset = 0;
  std::size_t size = 0;

  friend bool operator==(const ValueRange&, const ValueRange&) = default;
};

// The layout of the federated vector: layout() then state_layout(), offsets continued.
ParamLayout federated_layout(const Model& model);
// param_count() + state().size().
std::size_t federated_size(const Model& model) noexcept;
// The model's parameters then its state.
std::vector<float> federated_values(const Model& model);
// Loads a federated vector into the model's parameters and state.
// REQUIRES: values.size() == federated_size(model).
void load_federated(Model& model, std::span<const float> values);

// The entries `indices` (ascending) of `layout` as ranges of its flat buffer, adjacent ones
// merged. REQUIRES: every index < layout.entries().size().
std::vector<ValueRange> entry_ranges(const ParamLayout& layout,
                                     std::span<const std::size_t> indices);
// Where FedBN's site-local values sit in the federated vector: in order, disjoint, adjacent
// runs merged. Empty for a model without normalisation layers.
std::vector<ValueRange> site_ranges(const Model& model);
// Total size of `ranges`.
std::size_t total_size(std::span<const ValueRange> ranges) noexcept;
// The values of `ranges`, packed in order. REQUIRES: every range inside `values`.
std::vector<float> gather_ranges(std::span<const float> values, std::span<const ValueRange> ranges);
// Writes `packed` (as gather_ranges made it) back into `ranges` of `values`.
// REQUIRES: packed.size() == total_size(ranges), every range inside `values`.
void scatter_ranges(std::span<const float> packed, std::span<float> values,
                    std::span<const ValueRange> ranges);

}  // namespace fedcore::model
