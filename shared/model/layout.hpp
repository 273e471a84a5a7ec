// ParamLayout: where each named parameter tensor lives inside a model's flat buffer.
//
// Every model keeps all its parameters in one contiguous float32 buffer (and its
// gradients in a second one of the same size). The layout records, in order, each
// tensor's name ("conv1.weight"), its shape and its offset. Two parties that hold the
// same layout can exchange, average or checkpoint parameters as plain spans.
//
// Shapes are row-major (C order), so a tensor exported to NumPy needs no transpose:
// Dense weights are {in, out}, Conv2d weights {kh, kw, in_channels, out_channels}
// (TensorFlow's HWIO), biases {out}.
//
// `fingerprint()` is a 64-bit FNV-1a hash over names, shapes and offsets. It is stable
// across processes, platforms and versions of this code (its input is spelled out in
// docs/formats.md), so a server can reject an update whose layout differs from the
// global model's without shipping the whole layout.
//
// Thread safety: immutable after construction; safe to share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"

namespace fedcore::model {

using Shape = std::vector<std::int64_t>;

// Number of elements of a shape (1 for a scalar shape {}).
std::size_t element_count(const Shape& shape) noexcept;
// "[28, 28, 1]"
std::string shape_to_string(const Shape& shape);

struct ParamEntry {
  std::string name;
  Shape shape;
  std::size_t offset = 0;  // in floats, from the start of the flat buffer
  std::size_t size = 0;    // element_count(shape)

  friend bool operator==(const ParamEntry&, const ParamEntry&) = default;
};

class ParamLayout {
 public:
  ParamLayout() = default;

  // Appends a tensor after the last one. REQUIRES: name unique, all dimensions > 0.
  void append(std::string name, Shape shape);

  const std::vector<ParamEntry>& entries() const noexcept { return entries_; }
  std::size_t total() const noexcept { return total_; }
  std::uint64_t fingerprint() const noexcept;
  // Hex form of the fingerprint, 16 lowercase digits.
  std::string fingerprint_hex() const;

  // Entry by name, or nullptr.
  const ParamEntry* find(std::string_view name) const noexcept;

  friend bool operator==(const ParamLayout&, const ParamLayout&) = default;

 private:
  std::vector<ParamEntry> entries_;
  std::size_t total_ = 0;
};

// JSON form: {"total": N, "fingerprint": "hex", "tensors": [{"name","shape","offset"}...]}
void to_json(nlohmann::json& j, const ParamLayout& layout);
// Validates names, shapes, offsets (contiguous, in order) and the fingerprint if present.
result<ParamLayout> layout_from_json(const nlohmann::json& j);

}  // namespace fedcore::model
