#include "shared/privacy/gaussian.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace fedcore::privacy {

result<ClipResult> clip_l2(std::span<float> values, double clip_norm) {
  if (!(clip_norm > 0) || !std::isfinite(clip_norm)) {
    return fail(errc::invalid_argument,
                "clip norm " + std::to_string(clip_norm) + " is not positive and finite");
  }
  // Accumulate in double: a float sum of squares of a large model loses the small terms.
  double sum_sq = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) {
      return fail(errc::invalid_argument, "value " + std::to_string(i) + " is not finite");
    }
    sum_sq += v * v;
  }
  const double norm = std::sqrt(sum_sq);
  if (norm <= clip_norm) {
    return ClipResult{norm, false};
  }
  // Scale by C/norm; float rounding can leave the result a hair above C, so shrink the
  // factor by a few float ulps to keep the bound the accountant relies on.
  const double scale = clip_norm / norm * (1.0 - 4.0 * 0x1.0p-24);
  for (float& v : values) {
    v = static_cast<float>(v * scale);
  }
  return ClipResult{norm, true};
}

result<void> add_gaussian_noise(std::span<float> values, double noise_multiplier, double clip_norm,
                                NoiseSource& noise) {
  if (!(noise_multiplier >= 0) || !std::isfinite(noise_multiplier)) {
    return fail(errc::invalid_argument, "noise multiplier " + std::to_string(noise_multiplier) +
                                            " is negative or not finite");
  }
  if (!(clip_norm > 0) || !std::isfinite(clip_norm)) {
    return fail(errc::invalid_argument,
                "clip norm " + std::to_string(clip_norm) + " is not positive and finite");
  }
  const double stddev = noise_multiplier * clip_norm;
  std::array<double, 1024> chunk;
  for (std::size_t start = 0; start < values.size(); start += chunk.size()) {
    const std::size_t n = std::min(chunk.size(), values.size() - start);
    if (auto ok = noise.fill_standard_normal(std::span<double>(chunk.data(), n)); !ok) {
      return ok.error();
    }
    for (std::size_t i = 0; i < n; ++i) {
      values[start + i] = static_cast<float>(values[start + i] + stddev * chunk[i]);
    }
  }
  return {};
}

}  // namespace fedcore::privacy
