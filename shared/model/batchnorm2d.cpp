#include <algorithm>
#include <cmath>

#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

namespace {

// Columns of the C x M view per chunk of a per-channel sum. Fixed, so the order of the
// additions (float within a chunk, double across chunks in chunk order) does not depend on
// the thread count.
constexpr Eigen::Index kSumChunk = 256;

// out[c] = sum over columns j of term(c, j), for the C x M view; `term` reads columns.
template <class Term>
void per_channel_sum(Eigen::Index channels, Eigen::Index columns, std::vector<double>& out,
                     Term&& term) {
  const Eigen::Index chunks = (columns + kSumChunk - 1) / kSumChunk;
  std::vector<float> partial(static_cast<std::size_t>(chunks * channels), 0.0f);
#pragma omp parallel for schedule(static) if (columns * channels > (1 << 16))
  for (Eigen::Index k = 0; k < chunks; ++k) {
    float* acc = partial.data() + k * channels;
    const Eigen::Index end = std::min(columns, (k + 1) * kSumChunk);
    for (Eigen::Index j = k * kSumChunk; j < end; ++j) {
      term(acc, j);
    }
  }
  out.assign(static_cast<std::size_t>(channels), 0.0);
  for (Eigen::Index k = 0; k < chunks; ++k) {
    for (Eigen::Index c = 0; c < channels; ++c) {
      out[static_cast<std::size_t>(c)] += partial[static_cast<std::size_t>(k * channels + c)];
    }
  }
}

}  // namespace

BatchNorm2d::BatchNorm2d(const Shape& input_shape)
    : Layer(input_shape, input_shape), channels_(input_shape.empty() ? 0 : input_shape.back()) {
  FEDCORE_ASSERT(channels_ >= 1, "BatchNorm2d needs a channel dimension");
}

BatchNorm2d::BatchNorm2d(const BatchNorm2d& other)
    : Layer(other), channels_(other.channels_), track_(other.track_) {}

std::unique_ptr<Layer> BatchNorm2d::clone() const {
  return std::unique_ptr<Layer>(new BatchNorm2d(*this));
}

std::vector<ParamShape> BatchNorm2d::param_shapes() const {
  return {{"weight", {channels_}, true}, {"bias", {channels_}, true}};
}

std::vector<ParamShape> BatchNorm2d::state_shapes() const {
  return {{"running_mean", {channels_}}, {"running_var", {channels_}}};
}

void BatchNorm2d::bind(std::span<float> params, std::span<float> grads) {
  const auto c = static_cast<std::size_t>(channels_);
  FEDCORE_ASSERT(params.size() == 2 * c && grads.size() == 2 * c,
                 "BatchNorm2d::bind: slice size mismatch");
  gamma_ = params.first(c);
  beta_ = params.subspan(c);
  gamma_grad_ = grads.first(c);
  beta_grad_ = grads.subspan(c);
}

void BatchNorm2d::bind_state(std::span<float> state) {
  const auto c = static_cast<std::size_t>(channels_);
  FEDCORE_ASSERT(state.size() == 2 * c, "BatchNorm2d::bind_state: slice size mismatch");
  running_mean_ = state.first(c);
  running_var_ = state.subspan(c);
}

void BatchNorm2d::initialize(Rng&) {
  std::fill(gamma_.begin(), gamma_.end(), 1.0f);
  std::fill(beta_.begin(), beta_.end(), 0.0f);
  std::fill(running_mean_.begin(), running_mean_.end(), 0.0f);
  std::fill(running_var_.begin(), running_var_.end(), 1.0f);
}

void BatchNorm2d::forward(const Matrix& input, Matrix& output, Phase phase) {
  const Eigen::Index c = channels_;
  const Eigen::Index m = input.size() / c;
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "BatchNorm2d::forward: input rows differ from the layer's input size");
  output.resize(input.rows(), input.cols());
  phase_ = phase;
  sums_for_ = nullptr;
  const float* x = input.data();
  float* y = output.data();
  const float* g = gamma_.data();
  const float* b = beta_.data();
  if (phase == Phase::eval) {
    std::vector<float> scale(static_cast<std::size_t>(c)), shift(static_cast<std::size_t>(c));
    for (Eigen::Index k = 0; k < c; ++k) {
      const float inv = 1.0f / std::sqrt(running_var_[k] + kEpsilon);
      scale[k] = g[k] * inv;
      shift[k] = b[k] - running_mean_[k] * scale[k];
    }
#pragma omp parallel for schedule(static) if (input.size() > (1 << 16))
    for (Eigen::Index j = 0; j < m; ++j) {
      for (Eigen::Index k = 0; k < c; ++k) {
        y[j * c + k] = x[j * c + k] * scale[k] + shift[k];
      }
    }
    return;
  }
  // Two passes (mean, then the mean of squared deviations): one-pass E[x^2] - E[x]^2
  // cancels badly in float when a channel's mean is large against its spread.
  std::vector<double> sum;
  per_channel_sum(c, m, sum, [&](float* acc, Eigen::Index j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      acc[k] += x[j * c + k];
    }
  });
  std::vector<float> mean(static_cast<std::size_t>(c));
  for (Eigen::Index k = 0; k < c; ++k) {
    mean[k] = static_cast<float>(sum[k] / double(m));
  }
  std::vector<double> squares;
  per_channel_sum(c, m, squares, [&](float* acc, Eigen::Index j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      const float d = x[j * c + k] - mean[k];
      acc[k] += d * d;
    }
  });
  inv_std_.resize(static_cast<std::size_t>(c));
  for (Eigen::Index k = 0; k < c; ++k) {
    const double variance = squares[k] / double(m);
    inv_std_[k] = static_cast<float>(1.0 / std::sqrt(variance + double(kEpsilon)));
    if (track_) {
      const double unbiased = m > 1 ? squares[k] / double(m - 1) : variance;
      running_mean_[k] = (1.0f - kMomentum) * running_mean_[k] + kMomentum * mean[k];
      running_var_[k] =
          (1.0f - kMomentum) * running_var_[k] + kMomentum * static_cast<float>(unbiased);
    }
  }
  normalized_.resize(input.rows(), input.cols());
  float* n = normalized_.data();
  const float* inv = inv_std_.data();
#pragma omp parallel for schedule(static) if (input.size() > (1 << 16))
  for (Eigen::Index j = 0; j < m; ++j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      const float v = (x[j * c + k] - mean[k]) * inv[k];
      n[j * c + k] = v;
      y[j * c + k] = g[k] * v + b[k];
    }
  }
}

// Training phase: with x_hat the normalised input and M the values per channel,
//   d gamma = sum(dy x_hat), d beta = sum(dy),
//   dx = gamma / sigma (dy - mean(dy) - x_hat mean(dy x_hat))
// because the batch mean and variance depend on every x. Evaluation phase: the statistics
// are constants, so dx = gamma / sigma_running dy.
void BatchNorm2d::backward(const Matrix& input, const Matrix&, const Matrix& grad_output,
                           Matrix& grad_input) {
  const Eigen::Index c = channels_;
  const Eigen::Index m = grad_output.size() / c;
  grad_input.resize(grad_output.rows(), grad_output.cols());
  const float* dy = grad_output.data();
  float* dx = grad_input.data();
  const float* g = gamma_.data();
  if (phase_ == Phase::eval) {
    std::vector<float> scale(static_cast<std::size_t>(c));
    for (Eigen::Index k = 0; k < c; ++k) {
      scale[k] = g[k] / std::sqrt(running_var_[k] + kEpsilon);
    }
#pragma omp parallel for schedule(static) if (input.size() > (1 << 16))
    for (Eigen::Index j = 0; j < m; ++j) {
      for (Eigen::Index k = 0; k < c; ++k) {
        dx[j * c + k] = dy[j * c + k] * scale[k];
      }
    }
    return;
  }
  const float* n = normalized_.data();
  // The same two sums as the parameter gradient's: Model calls gradient() first with this
  // grad_output, so take them from there instead of two more passes.
  if (sums_for_ != dy) {
    training_sums(grad_output);
  }
  sums_for_ = nullptr;
  const std::vector<double>& sum_dy = sum_dy_;
  const std::vector<double>& sum_dy_n = sum_dy_n_;
  std::vector<float> scale(static_cast<std::size_t>(c)), mean_dy(static_cast<std::size_t>(c)),
      mean_dy_n(static_cast<std::size_t>(c));
  for (Eigen::Index k = 0; k < c; ++k) {
    scale[k] = g[k] * inv_std_[k];
    mean_dy[k] = static_cast<float>(sum_dy[k] / double(m));
    mean_dy_n[k] = static_cast<float>(sum_dy_n[k] / double(m));
  }
#pragma omp parallel for schedule(static) if (input.size() > (1 << 16))
  for (Eigen::Index j = 0; j < m; ++j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      const Eigen::Index i = j * c + k;
      dx[i] = scale[k] * (dy[i] - mean_dy[k] - n[i] * mean_dy_n[k]);
    }
  }
}

void BatchNorm2d::training_sums(const Matrix& grad_output) {
  const Eigen::Index c = channels_;
  const Eigen::Index m = grad_output.size() / c;
  const float* dy = grad_output.data();
  const float* n = normalized_.data();
  per_channel_sum(c, m, sum_dy_, [&](float* acc, Eigen::Index j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      acc[k] += dy[j * c + k];
    }
  });
  per_channel_sum(c, m, sum_dy_n_, [&](float* acc, Eigen::Index j) {
    for (Eigen::Index k = 0; k < c; ++k) {
      acc[k] += dy[j * c + k] * n[j * c + k];
    }
  });
  sums_for_ = grad_output.data();
}

void BatchNorm2d::gradient(const Matrix& input, const Matrix& grad_output) {
  const Eigen::Index c = channels_;
  const Eigen::Index m = grad_output.size() / c;
  if (phase_ == Phase::train) {
    training_sums(grad_output);
  } else {
    // Evaluation keeps no normalised copy: rebuild it from the input and running statistics.
    const float* dy = grad_output.data();
    per_channel_sum(c, m, sum_dy_, [&](float* acc, Eigen::Index j) {
      for (Eigen::Index k = 0; k < c; ++k) {
        acc[k] += dy[j * c + k];
      }
    });
    std::vector<float> inv(static_cast<std::size_t>(c));
    for (Eigen::Index k = 0; k < c; ++k) {
      inv[k] = 1.0f / std::sqrt(running_var_[k] + kEpsilon);
    }
    const float* x = input.data();
    const float* mean = running_mean_.data();
    per_channel_sum(c, m, sum_dy_n_, [&](float* acc, Eigen::Index j) {
      for (Eigen::Index k = 0; k < c; ++k) {
        acc[k] += dy[j * c + k] * (x[j * c + k] - mean[k]) * inv[k];
      }
    });
  }
  for (Eigen::Index k = 0; k < c; ++k) {
    gamma_grad_[k] = static_cast<float>(sum_dy_n_[k]);
    beta_grad_[k] = static_cast<float>(sum_dy_[k]);
  }
}

}  // namespace fedcore::model
