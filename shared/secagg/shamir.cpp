#include "shared/secagg/shamir.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include <openssl/bn.h>

#include "shared/util/assert.hpp"

namespace fedcore::secagg {
namespace {

struct BnFree {
  void operator()(BIGNUM* b) const noexcept { BN_clear_free(b); }
};
using Bn = std::unique_ptr<BIGNUM, BnFree>;

struct CtxFree {
  void operator()(BN_CTX* c) const noexcept { BN_CTX_free(c); }
};

Bn make_bn() {
  Bn b(BN_new());
  FEDCORE_ASSERT(b != nullptr, "out of memory for a BIGNUM");
  return b;
}

Bn from_u64(std::uint64_t v) {
  Bn b = make_bn();
  FEDCORE_ASSERT(BN_set_word(b.get(), v) == 1, "BN_set_word failed");
  return b;
}

// The Mersenne prime 2^521 - 1: large enough for a 64-byte secret, and a prime no one
// needs to take on trust.
const BIGNUM* prime() {
  static const Bn p = [] {
    Bn b = make_bn();
    FEDCORE_ASSERT(BN_set_bit(b.get(), 521) == 1 && BN_sub_word(b.get(), 1) == 1,
                   "cannot build 2^521 - 1");
    return b;
  }();
  return p.get();
}

Bytes to_field_bytes(const BIGNUM* v) {
  Bytes out(kShareValueSize);
  FEDCORE_ASSERT(
      BN_bn2binpad(v, out.data(), static_cast<int>(out.size())) == static_cast<int>(out.size()),
      "a field element does not fit its share");
  return out;
}

result<Bn> field_value(const Share& share) {
  if (share.x == 0 || share.y.size() != kShareValueSize) {
    return fail(errc::invalid_argument, "a malformed Shamir share (x = " + std::to_string(share.x) +
                                            ", " + std::to_string(share.y.size()) + " bytes)");
  }
  Bn y = make_bn();
  BN_bin2bn(share.y.data(), static_cast<int>(share.y.size()), y.get());
  if (BN_cmp(y.get(), prime()) >= 0) {
    return fail(errc::invalid_argument, "a Shamir share's value is outside the field");
  }
  return y;
}

// sum_j y_j * prod_{m != j} (x - x_m) / (x_j - x_m)  over the given points, mod p.
Bn interpolate_at(const std::vector<std::pair<std::uint32_t, Bn>>& points, std::uint32_t x) {
  std::unique_ptr<BN_CTX, CtxFree> ctx(BN_CTX_new());
  FEDCORE_ASSERT(ctx != nullptr, "out of memory for a BN_CTX");
  const BIGNUM* p = prime();
  Bn total = from_u64(0);
  for (std::size_t j = 0; j < points.size(); ++j) {
    Bn numerator = from_u64(1);
    Bn denominator = from_u64(1);
    for (std::size_t m = 0; m < points.size(); ++m) {
      if (m == j) {
        continue;
      }
      // (x - x_m) and (x_j - x_m) as field elements.
      Bn a = make_bn();
      Bn b = make_bn();
      Bn xm = from_u64(points[m].first);
      FEDCORE_ASSERT(
          BN_mod_sub(a.get(), from_u64(x).get(), xm.get(), p, ctx.get()) == 1 &&
              BN_mod_sub(b.get(), from_u64(points[j].first).get(), xm.get(), p, ctx.get()) == 1 &&
              BN_mod_mul(numerator.get(), numerator.get(), a.get(), p, ctx.get()) == 1 &&
              BN_mod_mul(denominator.get(), denominator.get(), b.get(), p, ctx.get()) == 1,
          "BIGNUM arithmetic failed");
    }
    Bn inverse(BN_mod_inverse(nullptr, denominator.get(), p, ctx.get()));
    FEDCORE_ASSERT(inverse != nullptr, "distinct points have an invertible difference");
    Bn term = make_bn();
    FEDCORE_ASSERT(
        BN_mod_mul(term.get(), points[j].second.get(), numerator.get(), p, ctx.get()) == 1 &&
            BN_mod_mul(term.get(), term.get(), inverse.get(), p, ctx.get()) == 1 &&
            BN_mod_add(total.get(), total.get(), term.get(), p, ctx.get()) == 1,
        "BIGNUM arithmetic failed");
  }
  return total;
}

result<std::vector<std::pair<std::uint32_t, Bn>>> distinct_points(std::span<const Share> shares,
                                                                  std::size_t wanted) {
  std::vector<std::pair<std::uint32_t, Bn>> points;
  std::set<std::uint32_t> seen;
  for (const auto& share : shares) {
    if (points.size() == wanted) {
      break;
    }
    auto y = field_value(share);
    if (!y) {
      return y.error();
    }
    if (seen.insert(share.x).second) {
      points.emplace_back(share.x, std::move(*y));
    }
  }
  if (points.size() < wanted) {
    return fail(errc::failed_precondition, "need " + std::to_string(wanted) +
                                               " distinct shares, have " +
                                               std::to_string(points.size()));
  }
  return points;
}

}  // namespace

result<std::vector<Share>> shamir_split(std::span<const std::uint8_t> secret,
                                        std::uint32_t threshold, std::uint32_t count) {
  if (threshold < 1 || threshold > count || count > 65535) {
    return fail(errc::invalid_argument, "Shamir needs 1 <= threshold (" +
                                            std::to_string(threshold) + ") <= count (" +
                                            std::to_string(count) + ") <= 65535");
  }
  if (secret.size() > kMaxSecretSize) {
    return fail(errc::invalid_argument, "a Shamir secret is at most 64 bytes");
  }
  std::unique_ptr<BN_CTX, CtxFree> ctx(BN_CTX_new());
  FEDCORE_ASSERT(ctx != nullptr, "out of memory for a BN_CTX");
  const BIGNUM* p = prime();
  std::vector<Bn> coefficients;
  coefficients.push_back(make_bn());
  BN_bin2bn(secret.data(), static_cast<int>(secret.size()), coefficients.back().get());
  for (std::uint32_t i = 1; i < threshold; ++i) {
    coefficients.push_back(make_bn());
    FEDCORE_ASSERT(BN_priv_rand_range(coefficients.back().get(), p) == 1,
                   "OpenSSL could not draw a random field element");
  }
  std::vector<Share> shares;
  shares.reserve(count);
  for (std::uint32_t x = 1; x <= count; ++x) {
    // Horner: ((c_{t-1} x + c_{t-2}) x + ...) x + c_0.
    Bn y = make_bn();
    Bn bx = from_u64(x);
    FEDCORE_ASSERT(BN_copy(y.get(), coefficients.back().get()) != nullptr, "BN_copy failed");
    for (std::size_t i = coefficients.size() - 1; i-- > 0;) {
      FEDCORE_ASSERT(BN_mod_mul(y.get(), y.get(), bx.get(), p, ctx.get()) == 1 &&
                         BN_mod_add(y.get(), y.get(), coefficients[i].get(), p, ctx.get()) == 1,
                     "BIGNUM arithmetic failed");
    }
    shares.push_back(Share{x, to_field_bytes(y.get())});
  }
  return shares;
}

result<Bytes> shamir_combine(std::span<const Share> shares, std::uint32_t threshold,
                             std::size_t secret_size) {
  if (threshold < 1 || secret_size > kMaxSecretSize) {
    return fail(errc::invalid_argument, "Shamir: threshold >= 1 and a secret of at most 64 bytes");
  }
  auto points = distinct_points(shares, threshold);
  if (!points) {
    return points.error();
  }
  Bn secret = interpolate_at(*points, 0);
  if (static_cast<std::size_t>(BN_num_bytes(secret.get())) > secret_size) {
    return fail(errc::invalid_argument, "the shares do not combine into a " +
                                            std::to_string(secret_size) +
                                            "-byte secret (mixed or corrupted shares)");
  }
  Bytes out(secret_size);
  BN_bn2binpad(secret.get(), out.data(), static_cast<int>(out.size()));
  return out;
}

result<Share> share_consistent_with(std::span<const Share> shares,
                                    std::span<const std::uint8_t> candidate, std::uint32_t x) {
  auto points = distinct_points(shares, shares.size());
  if (!points) {
    return points.error();
  }
  Bn c = make_bn();
  BN_bin2bn(candidate.data(), static_cast<int>(candidate.size()), c.get());
  points->emplace_back(0, std::move(c));  // the polynomial through the shares and (0, c)
  return Share{x, to_field_bytes(interpolate_at(*points, x).get())};
}

}  // namespace fedcore::secagg
