#include "shared/model/federated_vector.hpp"

#include <algorithm>

#include "shared/model/model.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

ParamLayout federated_layout(const Model& model) {
  ParamLayout layout = model.layout();
  for (const auto& entry : model.state_layout().entries()) {
    layout.append(entry.name, entry.shape);
  }
  return layout;
}

std::size_t federated_size(const Model& model) noexcept {
  return model.param_count() + model.state().size();
}

std::vector<float> federated_values(const Model& model) {
  std::vector<float> values;
  values.reserve(federated_size(model));
  values.insert(values.end(), model.params().begin(), model.params().end());
  values.insert(values.end(), model.state().begin(), model.state().end());
  return values;
}

void load_federated(Model& model, std::span<const float> values) {
  FEDCORE_ASSERT(values.size() == federated_size(model),
                 "load_federated: the vector is not the model's parameters and state");
  const auto params = values.first(model.param_count());
  std::copy(params.begin(), params.end(), model.params().begin());
  const auto state = values.subspan(model.param_count());
  std::copy(state.begin(), state.end(), model.state().begin());
}

std::vector<ValueRange> entry_ranges(const ParamLayout& layout,
                                     std::span<const std::size_t> indices) {
  std::vector<ValueRange> ranges;
  const auto& entries = layout.entries();
  for (const auto i : indices) {
    FEDCORE_ASSERT(i < entries.size(), "entry_ranges: no such entry");
    const auto& e = entries[i];
    // Adjacent entries make one range (BatchNorm's weight and bias, all of the state).
    if (!ranges.empty() && ranges.back().offset + ranges.back().size == e.offset) {
      ranges.back().size += e.size;
    } else {
      ranges.push_back({e.offset, e.size});
    }
  }
  return ranges;
}

std::vector<ValueRange> site_ranges(const Model& model) {
  std::vector<std::size_t> indices;
  const auto& normalization = model.normalization_entries();
  for (std::size_t i = 0; i < normalization.size(); ++i) {
    if (normalization[i]) {
      indices.push_back(i);
    }
  }
  for (std::size_t i = 0; i < model.state_layout().entries().size(); ++i) {
    indices.push_back(normalization.size() + i);
  }
  return entry_ranges(federated_layout(model), indices);
}

std::size_t total_size(std::span<const ValueRange> ranges) noexcept {
  std::size_t total = 0;
  for (const auto& r : ranges) {
    total += r.size;
  }
  return total;
}

std::vector<float> gather_ranges(std::span<const float> values,
                                 std::span<const ValueRange> ranges) {
  std::vector<float> packed;
  packed.reserve(total_size(ranges));
  for (const auto& r : ranges) {
    FEDCORE_ASSERT(r.offset + r.size <= values.size(), "gather_ranges: range outside the vector");
    const auto run = values.subspan(r.offset, r.size);
    packed.insert(packed.end(), run.begin(), run.end());
  }
  return packed;
}

void scatter_ranges(std::span<const float> packed, std::span<float> values,
                    std::span<const ValueRange> ranges) {
  FEDCORE_ASSERT(packed.size() == total_size(ranges), "scatter_ranges: packed size differs");
  std::size_t at = 0;
  for (const auto& r : ranges) {
    FEDCORE_ASSERT(r.offset + r.size <= values.size(), "scatter_ranges: range outside the vector");
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), r.size,
                values.begin() + static_cast<std::ptrdiff_t>(r.offset));
    at += r.size;
  }
}

}  // namespace fedcore::model
