// Compressed updates (issue 18, "Update compression"): how a site's UPDATE payload may
// carry its step (its trained parameters minus the round's global model) in fewer bytes
// than float32 parameters. The run chooses the encoding (run config "compression"), TRAIN
// carries it ("compression" in the metadata), and UPDATE says which one its payload holds
// ("encoding"); docs/protocol.md gives the byte layouts.
//
//   f32   the trained parameters as float32, as always (no "encoding" key)      4n bytes
//   f16   the step as IEEE 754 binary16, round to nearest even                  2n bytes
//   int8  the step in blocks of `block` values: a float32 scale (max |x| / 127)
//         then one int8 per value, x / scale stochastically rounded (unbiased:
//         E[q * scale] = x), so averaging many sites' rounding cancels out      n + 4n/block
//   topk  the k = ceil(fraction * n) largest-magnitude entries of the step: u32 k,
//         k ascending u32 indices, k float32 values; the site keeps what it did not
//         send and adds it to its next step (error feedback, Stich et al. 2018)  8k + 4
//
// Every payload is padded with zero bytes to a multiple of 4 (frames carry 4-byte words).
// Decoding rebuilds parameters = global + step and refuses a payload that does not match
// its encoding exactly (length, block count, indices out of range or not ascending,
// non-finite scales or values), naming what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::protocol {

enum class UpdateEncoding { f32, f16, int8, topk };

// "f32", "f16", "int8", "topk".
std::string_view encoding_name(UpdateEncoding encoding) noexcept;
std::optional<UpdateEncoding> encoding_from_name(std::string_view name) noexcept;

// What a run asks its sites to send, and how its TRAIN payload comes down.
struct CompressionTerms {
  UpdateEncoding up = UpdateEncoding::f32;
  std::uint32_t block = 256;    // int8: values per scale, 16..65536
  double topk_fraction = 0.01;  // topk: share of the entries sent, (0, 1]
  // The global model in TRAIN: f32, or f16 (binary16, padded to 4 bytes), which needs a
  // compressed upload: the site's step is then taken against the model it received and
  // added by the server to the model it holds.
  UpdateEncoding down = UpdateEncoding::f32;
  std::uint64_t parameters = 0;  // with down = f16: the model's size (the payload is padded)
  friend bool operator==(const CompressionTerms&, const CompressionTerms&) = default;
};

inline constexpr std::uint32_t kMinInt8Block = 16;
inline constexpr std::uint32_t kMaxInt8Block = 65536;

// The number of entries topk sends for n parameters: ceil(fraction * n), at least 1.
std::size_t topk_count(std::size_t n, double fraction) noexcept;

// IEEE 754 binary16 <-> binary32, round to nearest even; overflow goes to infinity.
std::uint16_t float_to_half(float value) noexcept;
float half_to_float(std::uint16_t half) noexcept;

// Encodes `step` (the trained parameters minus the global model) as `terms.up` says.
// int8 draws its rounding from `rng`. REQUIRES: terms.up != f32 (f32 sends the parameters
// themselves), step finite, step.size() < 2^32.
// topk: `step` is the step plus the site's carried residual; `residual` (resized to the
// step's size) receives what was not sent.
std::vector<std::byte> encode_step(std::span<const float> step, const CompressionTerms& terms,
                                   Rng& rng, std::vector<float>* residual = nullptr);

// The payload's size for `n` parameters under `terms` (for limits and reports).
std::size_t encoded_size(std::size_t n, const CompressionTerms& terms) noexcept;

// The global model as f16 words for TRAIN (down = f16): 2n bytes padded to a multiple of 4.
std::vector<float> encode_model_f16(std::span<const float> model);
// Decodes a TRAIN payload of `parameters` f16 values. Errors: invalid_argument for a payload
// of another length, non-zero padding, or a non-finite value.
result<std::vector<float>> decode_model_f16(std::span<const std::byte> payload,
                                            std::size_t parameters);

// A compressed step, checked once and then decoded any range at a time, so that the server
// folds an encoded update into its sum chunk by chunk without building the whole parameter
// vector first (server/federation/fixed_point_mean.hpp, the chunked add_measured).
class StepDecoder {
 public:
  // Checks everything about `payload` as a step of `parameters` values (length, padding,
  // block size, every int8 scale, topk's count, index order and values, every f16 value):
  // after it, every range decodes to finite values. Errors: invalid_argument naming the
  // problem, as decode_step. REQUIRES: encoding != f32; `payload` outlives the decoder.
  static result<StepDecoder> open(UpdateEncoding encoding, std::span<const std::byte> payload,
                                  std::size_t parameters);
  std::size_t size() const noexcept { return size_; }
  // Writes global + step for parameters [begin, begin + out.size()) into `out`; `global`
  // is that range of the global model. Any range, in any order, from any thread.
  // REQUIRES: global.size() == out.size(), begin + out.size() <= size().
  void decode_range(std::size_t begin, std::span<const float> global, std::span<float> out) const;

 private:
  StepDecoder() = default;
  UpdateEncoding encoding_ = UpdateEncoding::f16;
  std::span<const std::byte> payload_;
  std::size_t size_ = 0;
  std::size_t block_ = 0;    // int8
  std::size_t entries_ = 0;  // topk: k
};

// Writes global + decoded step into `params` (resized to global's size). Errors:
// invalid_argument naming the problem (a payload of the wrong length, an index out of
// range or out of order, a non-finite scale or value). REQUIRES: encoding != f32.
result<void> decode_step(UpdateEncoding encoding, std::span<const std::byte> payload,
                         std::span<const float> global, std::vector<float>& params);

}  // namespace fedcore::protocol
