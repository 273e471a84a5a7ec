#include "shared/model/update_kernels.hpp"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/util/rng.hpp"

// The dispatched update kernels against the formulas written out one element at a time.
// Whatever clone this CPU gets (baseline, x86-64-v3 or x86-64-v4 in a portable build),
// the values must be identical, bit for bit: the clones may only differ in speed.
namespace fedcore::model {
namespace {

// An odd length and an offset start, so vector bodies, remainders and the chunk bounds
// of the callers are all exercised; the elements outside [begin, end) must not move.
constexpr std::size_t kSize = 1037;
constexpr std::size_t kBegin = 3;
constexpr std::size_t kEnd = 1030;

std::vector<float> random_values(std::uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> out(kSize);
  for (auto& v : out) {
    v = scale * (rng.uniform_float() - 0.5f);
  }
  return out;
}

TEST(UpdateKernels, SgdMatchesTheFormulaBitForBitOnlyInsideTheRange) {
  const auto g = random_values(1, 2.0f);
  auto p = random_values(2, 1.0f);
  auto expected = p;
  for (std::size_t i = kBegin; i < kEnd; ++i) {
    expected[i] -= 0.05f * (g[i] + 0.01f * expected[i]);
  }
  kernels::sgd(p.data(), g.data(), kBegin, kEnd, 0.05f, 0.01f);
  EXPECT_EQ(p, expected) << "dispatched level: " << kernels::dispatched_level();
}

TEST(UpdateKernels, MomentumAndNesterovMatchTheFormulaBitForBit) {
  for (const bool nesterov : {false, true}) {
    const auto g = random_values(3, 2.0f);
    auto p = random_values(4, 1.0f);
    auto v = random_values(5, 0.5f);
    auto p_expected = p;
    auto v_expected = v;
    for (std::size_t i = kBegin; i < kEnd; ++i) {
      const float d = g[i] + 0.01f * p_expected[i];
      v_expected[i] = 1.0f * 0.9f * v_expected[i] + d;
      p_expected[i] -= 0.05f * (nesterov ? d + 0.9f * v_expected[i] : v_expected[i]);
    }
    kernels::sgd_momentum(p.data(), g.data(), v.data(), kBegin, kEnd, 0.05f, 0.01f, 0.9f, 1.0f,
                          nesterov);
    EXPECT_EQ(p, p_expected) << "nesterov " << nesterov;
    EXPECT_EQ(v, v_expected) << "nesterov " << nesterov;
  }
}

TEST(UpdateKernels, AdamMatchesTheFormulaBitForBit) {
  const auto g = random_values(6, 2.0f);
  auto p = random_values(7, 1.0f);
  auto m = random_values(8, 0.1f);
  auto s = random_values(9, 0.1f);
  for (auto& x : s) {
    x = std::abs(x);
  }
  auto p_expected = p, m_expected = m, s_expected = s;
  const float b1 = 0.9f, b2 = 0.999f, step = 0.001f / 0.1f, bias2_sqrt = 0.0447f, eps = 1e-8f;
  for (std::size_t i = kBegin; i < kEnd; ++i) {
    const float d = g[i] + 0.0f * p_expected[i];
    m_expected[i] = b1 * m_expected[i] + (1.0f - b1) * d;
    s_expected[i] = b2 * s_expected[i] + (1.0f - b2) * d * d;
    p_expected[i] -= step * m_expected[i] / (std::sqrt(s_expected[i]) / bias2_sqrt + eps);
  }
  kernels::adam(p.data(), g.data(), m.data(), s.data(), kBegin, kEnd, step, 0.0f, b1, b2,
                bias2_sqrt, eps);
  EXPECT_EQ(m, m_expected);
  EXPECT_EQ(s, s_expected);
  EXPECT_EQ(p, p_expected);
}

TEST(UpdateKernels, DispatchedLevelIsOneOfTheBuiltClones) {
  const std::string level = kernels::dispatched_level();
  EXPECT_TRUE(level == "baseline" || level == "x86-64-v3" || level == "x86-64-v4") << level;
  // scripts/run_cpu_levels.sh runs this suite on emulated CPUs and says which clone each
  // must get (Nehalem: baseline, Haswell: x86-64-v3).
  if (const char* expected = std::getenv("FEDCORE_EXPECT_DISPATCH"); expected != nullptr) {
    EXPECT_EQ(level, expected);
  }
}

}  // namespace
}  // namespace fedcore::model
