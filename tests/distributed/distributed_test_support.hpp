// Helpers shared by the in-process fedcore-dist tests: a small synthetic, learnable data
// set (4 classes of 8x8 "images"), a small cnn job on it, and running ranks as threads.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "distributed/data_parallel.hpp"
#include "distributed/pipeline.hpp"
#include "shared/collective/inproc_transport.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::distributed::test_support {

// Class c lights up every fourth pixel starting at c by `signal` over uniform [0, 1)
// noise: linearly separable in expectation; a smaller signal makes it harder.
inline data::TrainTest synthetic(std::size_t n, std::size_t test_n = 64, float signal = 0.5f) {
  data::TrainTest tt;
  Rng rng(42);
  auto make = [&](std::size_t count) {
    data::Dataset d;
    d.features.resize(64, static_cast<Eigen::Index>(count));
    d.labels.resize(count);
    for (std::size_t j = 0; j < count; ++j) {
      const int label = static_cast<int>(rng.below(4));
      d.labels[j] = label;
      for (int i = 0; i < 64; ++i) {
        d.features(i, static_cast<Eigen::Index>(j)) =
            rng.uniform_float() + (i % 4 == label ? signal : 0.0f);
      }
    }
    d.sample_shape = {8, 8, 1};
    d.num_classes = 4;
    return d;
  };
  tt.train = make(n);
  tt.test = make(test_n);
  return tt;
}

inline TrainOptions small_options() {
  TrainOptions o;
  auto spec = model::parse_model_spec(
      std::string_view(R"({"type":"cnn","channels":[4,8],"kernel":3,"dense":16})"));
  EXPECT_TRUE(spec) << spec.error().to_string();
  auto done = model::complete_spec(*spec, {8, 8, 1}, 4);
  EXPECT_TRUE(done) << done.error().to_string();
  o.spec = *done;
  o.optimizer.learning_rate = 0.1f;
  o.epochs = 2;
  o.batch_size = 8;
  o.seed = 7;
  o.reducer.bucket_bytes = 512;  // several buckets for this small model
  return o;
}

// Runs `job(comm)` on `world` ranks as threads (one compute thread each, as fedcore-dist
// runs them); every rank must succeed. `job` returns result<R>.
template <class R, class Job>
std::vector<R> on_ranks(int world, const std::string& name, Job&& job) {
  using namespace std::chrono_literals;
  collective::InProcessGroup group(world);
  std::vector<R> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      set_compute_threads(1);
      collective::Communicator comm(group.transport(r), name, 20s);
      auto result = job(comm);
      ASSERT_TRUE(result) << "rank " << r << ": " << result.error().to_string();
      results[r] = std::move(*result);
    });
  }
  for (auto& t : threads)
    t.join();
  return results;
}

// train_data_parallel on `world` ranks as threads.
inline std::vector<TrainResult> run_ranks(int world, const data::TrainTest& data,
                                          const TrainOptions& options) {
  return on_ranks<TrainResult>(world, "ddp-test", [&](collective::Communicator& comm) {
    return train_data_parallel(comm, data, options);
  });
}

// train_pipeline on `world` ranks as threads.
inline std::vector<PipelineResult> run_pipeline_ranks(int world, const data::TrainTest& data,
                                                      const PipelineOptions& options) {
  return on_ranks<PipelineResult>(world, "pipe-test", [&](collective::Communicator& comm) {
    return train_pipeline(comm, data, options);
  });
}

}  // namespace fedcore::distributed::test_support
