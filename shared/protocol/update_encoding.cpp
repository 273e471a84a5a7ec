#include "shared/protocol/update_encoding.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "shared/util/assert.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::protocol {
namespace {

// Payloads are little-endian, as the float32 payloads are (docs/protocol.md); x86-64 is.
static_assert(std::endian::native == std::endian::little);

template <typename T>
void put(std::vector<std::byte>& out, T value) {
  const auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

template <typename T>
T get(std::span<const std::byte> in, std::size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

error bad(UpdateEncoding encoding, const std::string& why) {
  return error{errc::invalid_argument,
               "update encoding " + std::string(encoding_name(encoding)) + ": " + why};
}

std::size_t int8_blocks(std::size_t n, std::size_t block) {
  return (n + block - 1) / block;
}

// Frames carry payloads of 4-byte words (shared/net/outbox.hpp): an encoding's bytes are
// followed by zero bytes up to the next multiple of 4.
std::size_t padded(std::size_t bytes) {
  return (bytes + 3) / 4 * 4;
}

void pad(std::vector<std::byte>& out) {
  out.resize(padded(out.size()), std::byte{0});
}

// Whether `in` is `expected` bytes plus only the zero padding.
bool fits(std::span<const std::byte> in, std::size_t expected) {
  if (in.size() != padded(expected)) {
    return false;
  }
  return std::all_of(in.begin() + static_cast<std::ptrdiff_t>(expected), in.end(),
                     [](std::byte b) { return b == std::byte{0}; });
}

std::vector<std::byte> encode_f16(std::span<const float> step) {
  std::vector<std::byte> out;
  out.reserve(step.size() * 2);
  for (float v : step) {
    put(out, float_to_half(v));
  }
  pad(out);
  return out;
}

std::vector<std::byte> encode_int8(std::span<const float> step, std::uint32_t block, Rng& rng) {
  // Written in place into a buffer of the final size: at 10M parameters this runs once per
  // site and round, and a push_back per byte was most of its time.
  std::vector<std::byte> out(encoded_size(step.size(), {UpdateEncoding::int8, block, 0}),
                             std::byte{0});
  std::memcpy(out.data(), &block, sizeof block);
  std::size_t at = sizeof block;
  for (std::size_t start = 0; start < step.size(); start += block) {
    const auto values = step.subspan(start, std::min<std::size_t>(block, step.size() - start));
    float largest = 0;
    for (float v : values) {
      largest = std::max(largest, std::abs(v));
    }
    const float scale = largest / 127.0f;
    std::memcpy(out.data() + at, &scale, sizeof scale);
    at += sizeof scale;
    if (!(scale > 0)) {
      at += values.size();  // an all-zero block: every q is 0 whatever the rounding draws
      continue;
    }
    const double inverse = 1.0 / scale;
    auto* q_out = reinterpret_cast<std::int8_t*>(out.data() + at);
    for (std::size_t i = 0; i < values.size(); ++i) {
      // Stochastic rounding: floor(x + u) with u uniform in [0, 1) is x's floor or ceiling
      // with the probabilities that make its expectation x, so the rounding of many sites
      // averages out instead of biasing every coordinate the same way.
      const double x = static_cast<double>(values[i]) * inverse;
      q_out[i] =
          static_cast<std::int8_t>(std::clamp(std::floor(x + rng.uniform_double()), -127.0, 127.0));
    }
    at += values.size();
  }
  return out;
}

std::vector<std::byte> encode_topk(std::span<const float> step, double fraction,
                                   std::vector<float>* residual) {
  const auto k = topk_count(step.size(), fraction);
  std::vector<std::uint32_t> order(step.size());
  std::iota(order.begin(), order.end(), 0u);
  // The k largest magnitudes; ties go to the lower index, so a step encodes one way.
  const auto larger = [&](std::uint32_t a, std::uint32_t b) {
    const float x = std::abs(step[a]), y = std::abs(step[b]);
    return x > y || (x == y && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                   larger);
  order.resize(k);
  std::sort(order.begin(), order.end());
  std::vector<std::byte> out;
  out.reserve(4 + 8 * k);
  put(out, static_cast<std::uint32_t>(k));
  for (auto i : order) {
    put(out, i);
  }
  for (auto i : order) {
    put(out, step[i]);
  }
  if (residual != nullptr) {
    residual->assign(step.begin(), step.end());
    for (auto i : order) {
      (*residual)[i] = 0.0f;
    }
  }
  return out;
}

// The structural checks of each encoding, done once when a payload is opened: after them,
// every range of the payload decodes to finite values without another check.
result<void> check_f16(std::span<const std::byte> in, std::size_t n) {
  if (!fits(in, 2 * n)) {
    return bad(UpdateEncoding::f16, std::to_string(in.size()) + " bytes for " + std::to_string(n) +
                                        " parameters; expected " + std::to_string(padded(2 * n)));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(half_to_float(get<std::uint16_t>(in, 2 * i)))) {
      return bad(UpdateEncoding::f16, "a non-finite step at parameter " + std::to_string(i));
    }
  }
  return {};
}

result<std::uint32_t> check_int8(std::span<const std::byte> in, std::size_t n) {
  if (in.size() < 4) {
    return bad(UpdateEncoding::int8, "no block size");
  }
  const auto block = get<std::uint32_t>(in, 0);
  if (block < kMinInt8Block || block > kMaxInt8Block) {
    return bad(UpdateEncoding::int8, "block size " + std::to_string(block) + " outside [" +
                                         std::to_string(kMinInt8Block) + ", " +
                                         std::to_string(kMaxInt8Block) + "]");
  }
  const auto blocks = int8_blocks(n, block);
  const auto expected = 4 + 4 * blocks + n;
  if (!fits(in, expected)) {
    return bad(UpdateEncoding::int8, std::to_string(in.size()) + " bytes for " + std::to_string(n) +
                                         " parameters in blocks of " + std::to_string(block) +
                                         "; expected " + std::to_string(padded(expected)));
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = get<float>(in, 4 + (block + 4) * b);
    if (!std::isfinite(scale) || scale < 0) {
      return bad(UpdateEncoding::int8,
                 "block " + std::to_string(b) + " has a negative or non-finite scale");
    }
  }
  return block;
}

result<std::size_t> check_topk(std::span<const std::byte> in, std::size_t n) {
  if (in.size() < 4) {
    return bad(UpdateEncoding::topk, "no entry count");
  }
  const std::size_t k = get<std::uint32_t>(in, 0);
  if (k == 0 || k > n || in.size() != 4 + 8 * k) {
    return bad(UpdateEncoding::topk, std::to_string(in.size()) + " bytes announcing " +
                                         std::to_string(k) + " entries of " + std::to_string(n) +
                                         " parameters; expected 1 to n entries in 4 + 8k bytes");
  }
  std::int64_t previous = -1;
  for (std::size_t j = 0; j < k; ++j) {
    const auto index = get<std::uint32_t>(in, 4 + 4 * j);
    if (index >= n || static_cast<std::int64_t>(index) <= previous) {
      return bad(UpdateEncoding::topk, "index " + std::to_string(index) + " (entry " +
                                           std::to_string(j) +
                                           ") is out of range or not above the one before");
    }
    if (!std::isfinite(get<float>(in, 4 + 4 * k + 4 * j))) {
      return bad(UpdateEncoding::topk, "a non-finite value at parameter " + std::to_string(index));
    }
    previous = index;
  }
  return k;
}

}  // namespace

std::string_view encoding_name(UpdateEncoding encoding) noexcept {
  switch (encoding) {
    case UpdateEncoding::f32:
      return "f32";
    case UpdateEncoding::f16:
      return "f16";
    case UpdateEncoding::int8:
      return "int8";
    case UpdateEncoding::topk:
      return "topk";
  }
  return "f32";
}

std::optional<UpdateEncoding> encoding_from_name(std::string_view name) noexcept {
  for (auto e :
       {UpdateEncoding::f32, UpdateEncoding::f16, UpdateEncoding::int8, UpdateEncoding::topk}) {
    if (encoding_name(e) == name) {
      return e;
    }
  }
  return std::nullopt;
}

std::size_t topk_count(std::size_t n, double fraction) noexcept {
  const auto k = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n)));
  return std::clamp<std::size_t>(k, 1, std::max<std::size_t>(n, 1));
}

std::uint16_t float_to_half(float value) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN (kept quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  if (magnitude >= 0x477ff000u) {  // 65520 and above round to infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    // Multiples of 2^-24; the scaling is exact and nearbyint rounds to nearest even.
    const float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10, to nearest
  // even (adding 0xfff plus the lowest kept bit carries into the exponent when needed).
  const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float half_to_float(std::uint16_t half) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::size_t encoded_size(std::size_t n, const CompressionTerms& terms) noexcept {
  switch (terms.up) {
    case UpdateEncoding::f32:
      return 4 * n;
    case UpdateEncoding::f16:
      return padded(2 * n);
    case UpdateEncoding::int8:
      return padded(4 + 4 * int8_blocks(n, std::max<std::uint32_t>(terms.block, 1)) + n);
    case UpdateEncoding::topk:
      return 4 + 8 * topk_count(n, terms.topk_fraction);
  }
  return 4 * n;
}

std::vector<std::byte> encode_step(std::span<const float> step, const CompressionTerms& terms,
                                   Rng& rng, std::vector<float>* residual) {
  FEDCORE_ASSERT(terms.up != UpdateEncoding::f32, "encode_step: f32 sends the parameters");
  switch (terms.up) {
    case UpdateEncoding::f16:
      return encode_f16(step);
    case UpdateEncoding::int8:
      return encode_int8(step, terms.block, rng);
    case UpdateEncoding::topk:
      return encode_topk(step, terms.topk_fraction, residual);
    case UpdateEncoding::f32:
      break;
  }
  return {};
}

std::vector<float> encode_model_f16(std::span<const float> model) {
  auto bytes = encode_f16(model);
  std::vector<float> words(bytes.size() / sizeof(float));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

result<std::vector<float>> decode_model_f16(std::span<const std::byte> payload,
                                            std::size_t parameters) {
  // The same checks as an f16 step; the values are the step itself (a zero model).
  if (auto ok = check_f16(payload, parameters); !ok) {
    return ok.error();
  }
  std::vector<float> out(parameters);
  for (std::size_t i = 0; i < parameters; ++i) {
    out[i] = half_to_float(get<std::uint16_t>(payload, 2 * i));
  }
  return out;
}

result<StepDecoder> StepDecoder::open(UpdateEncoding encoding, std::span<const std::byte> payload,
                                      std::size_t parameters) {
  StepDecoder d;
  d.encoding_ = encoding;
  d.payload_ = payload;
  d.size_ = parameters;
  switch (encoding) {
    case UpdateEncoding::f16:
      if (auto ok = check_f16(payload, parameters); !ok) {
        return ok.error();
      }
      return d;
    case UpdateEncoding::int8: {
      auto block = check_int8(payload, parameters);
      if (!block) {
        return block.error();
      }
      d.block_ = *block;
      return d;
    }
    case UpdateEncoding::topk: {
      auto k = check_topk(payload, parameters);
      if (!k) {
        return k.error();
      }
      d.entries_ = *k;
      return d;
    }
    case UpdateEncoding::f32:
      break;
  }
  return fail(errc::invalid_argument, "StepDecoder: f32 payloads are the parameters themselves");
}

void StepDecoder::decode_range(std::size_t begin, std::span<const float> global,
                               std::span<float> out) const {
  FEDCORE_ASSERT(global.size() == out.size() && begin + out.size() <= size_,
                 "StepDecoder::decode_range: range outside the model");
  const auto in = payload_;
  const std::size_t count = out.size();
  switch (encoding_) {
    case UpdateEncoding::f16:
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = global[i] + half_to_float(get<std::uint16_t>(in, 2 * (begin + i)));
      }
      return;
    case UpdateEncoding::int8: {
      // Block b holds a scale at 4 + (block + 4) * b, then its int8 values.
      const std::size_t block = block_;
      for (std::size_t i = 0; i < count;) {
        const std::size_t at = begin + i;
        const std::size_t b = at / block;
        const std::size_t base = 4 + (block + 4) * b;
        const float scale = get<float>(in, base);
        const std::size_t end = std::min(count, (b + 1) * block - begin);
        for (; i < end; ++i) {
          const auto q = get<std::int8_t>(in, base + 4 + (begin + i - b * block));
          out[i] = global[i] + scale * static_cast<float>(q);
        }
      }
      return;
    }
    case UpdateEncoding::topk: {
      std::copy(global.begin(), global.end(), out.begin());
      // The first entry at or after `begin`: the indices ascend (checked in open()).
      std::size_t lo = 0, hi = entries_;
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (get<std::uint32_t>(in, 4 + 4 * mid) < begin) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      for (std::size_t j = lo; j < entries_; ++j) {
        const std::size_t index = get<std::uint32_t>(in, 4 + 4 * j);
        if (index >= begin + count) {
          break;
        }
        out[index - begin] = global[index - begin] + get<float>(in, 4 + 4 * entries_ + 4 * j);
      }
      return;
    }
    case UpdateEncoding::f32:
      break;
  }
  FEDCORE_ASSERT(false, "StepDecoder::decode_range: f32 has no decoder");
}

result<void> decode_step(UpdateEncoding encoding, std::span<const std::byte> payload,
                         std::span<const float> global, std::vector<float>& params) {
  auto decoder = StepDecoder::open(encoding, payload, global.size());
  if (!decoder) {
    return decoder.error();
  }
  params.resize(global.size());
  decoder->decode_range(0, global, params);
  return {};
}

}  // namespace fedcore::protocol
