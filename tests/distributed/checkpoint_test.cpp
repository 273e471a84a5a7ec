// distributed/checkpoint: the file format (round trip, corruption, truncation, old files) and
// exact resume of the data-parallel job with optimizer state (SGD with momentum, Adam),
// plus refusal of checkpoints whose optimizer state does not fit.
#include "distributed/checkpoint.hpp"

#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "distributed/data_parallel.hpp"
#include "shared/collective/inproc_transport.hpp"
#include "shared/util/checksum.hpp"
#include "tests/distributed/distributed_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::distributed {
namespace {

using namespace std::chrono_literals;
using test_support::run_ranks;
using test_support::small_options;
using test_support::synthetic;

model::ParamLayout two_tensors() {
  model::ParamLayout layout;
  layout.append("w", {2, 3});
  layout.append("b", {3});
  return layout;
}

model::OptimizerState adam_state(std::size_t n) {
  model::OptimizerState s;
  s.kind = model::OptimizerKind::adam;
  s.steps = 42;
  s.buffers = {{"m", std::vector<float>(n, 0.25f)}, {"s", std::vector<float>(n, 0.5f)}};
  return s;
}

TEST(CheckpointFormat, RoundTripsParamsStepAndOptimizerState) {
  const auto layout = two_tensors();
  std::vector<float> params(layout.total());
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i] = 0.1f * static_cast<float>(i);
  const auto bytes = encode_checkpoint(layout, params, adam_state(params.size()), 17, 3);
  auto decoded = decode_checkpoint(bytes, "memory");
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(decoded->step, 17u);
  EXPECT_EQ(decoded->model.layout, layout);
  EXPECT_EQ(decoded->model.params, params);
  EXPECT_EQ(decoded->optimizer.kind, model::OptimizerKind::adam);
  EXPECT_EQ(decoded->optimizer.steps, 42);
  ASSERT_EQ(decoded->optimizer.buffers.size(), 2u);
  EXPECT_EQ(decoded->optimizer.buffers[1].name, "s");
  EXPECT_EQ(decoded->optimizer.buffers[1].values, std::vector<float>(params.size(), 0.5f));
  // Plain SGD: no buffers at all.
  model::OptimizerState plain;
  auto sgd = decode_checkpoint(encode_checkpoint(layout, params, plain, 1, 1), "memory");
  ASSERT_TRUE(sgd) << sgd.error().to_string();
  EXPECT_TRUE(sgd->optimizer.buffers.empty());
}

TEST(CheckpointFormat, RoundTripsTheModelsState) {
  const auto layout = two_tensors();
  const std::vector<float> params(layout.total(), 1.0f);
  model::ParamLayout state_layout;
  state_layout.append("bn.running_mean", {3});
  state_layout.append("bn.running_var", {3});
  const std::vector<float> state{0.1f, 0.2f, 0.3f, 1.5f, 2.5f, 3.5f};
  auto decoded = decode_checkpoint(
      encode_checkpoint(layout, params, adam_state(params.size()), 4, 2, state_layout, state),
      "memory");
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(decoded->state.layout, state_layout);
  EXPECT_EQ(decoded->state.params, state);
}

// Version 1 (two sections, no state) as earlier builds wrote it: still read, with no state.
TEST(CheckpointFormat, ReadsVersionOneFilesWithoutState) {
  const auto layout = two_tensors();
  const std::vector<float> params(layout.total(), 3.0f);
  const auto v2 = encode_checkpoint(layout, params, adam_state(params.size()), 8, 1);
  // Header (16 bytes), then the model and optimizer sections with their u64 lengths.
  auto section_end = [&](std::size_t at) {
    std::uint64_t length = 0;
    std::memcpy(&length, v2.data() + at, 8);
    return at + 8 + length;
  };
  const std::size_t two_sections = section_end(section_end(16));
  std::vector<std::byte> v1(v2.begin(), v2.begin() + static_cast<std::ptrdiff_t>(two_sections));
  v1[8] = std::byte{1};
  const std::uint32_t crc = crc32(v1);
  const auto* crc_bytes = reinterpret_cast<const std::byte*>(&crc);
  v1.insert(v1.end(), crc_bytes, crc_bytes + 4);
  auto decoded = decode_checkpoint(v1, "v1");
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(decoded->step, 8u);
  EXPECT_EQ(decoded->model.params, params);
  EXPECT_EQ(decoded->state.layout.total(), 0u);
}

TEST(CheckpointFormat, RejectsCorruptTruncatedForeignAndOldFiles) {
  const auto layout = two_tensors();
  const std::vector<float> params(layout.total(), 1.0f);
  const auto good = encode_checkpoint(layout, params, adam_state(params.size()), 5, 2);

  auto flipped = good;
  flipped[good.size() / 2] ^= std::byte{0x40};
  auto r = decode_checkpoint(flipped, "flipped");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::data_loss);
  EXPECT_NE(r.error().message.find("checksum"), std::string::npos) << r.error().message;

  r = decode_checkpoint(std::span(good).first(good.size() - 9), "short");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::out_of_range);

  auto future = good;
  future[8] = std::byte{3};
  r = decode_checkpoint(future, "future");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unimplemented);

  // A bare parameter file, as fedcore-dist wrote before optimizer state was saved.
  const auto bare = model::encode_params(layout, params, R"({"step":5})");
  r = decode_checkpoint(bare, "old.fcp");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::failed_precondition);
  EXPECT_NE(r.error().message.find("without optimizer state"), std::string::npos);
}

TEST(CheckpointFormat, SaveIsAtomicAndLoadReadsItBack) {
  testing::TempDir dir;
  const auto layout = two_tensors();
  const std::vector<float> params(layout.total(), 2.0f);
  const std::string path = checkpoint_path(dir.path());
  ASSERT_TRUE(save_checkpoint(path, layout, params, adam_state(params.size()), 9, 2));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto loaded = load_checkpoint(path);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(loaded->step, 9u);
  auto missing = load_checkpoint(dir.path("nothing.fcp"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
}

// The job trained N steps in one go equals K steps, a checkpoint, and a fresh group
// (new communicators, new optimizers) resumed to N: bit for bit, because the optimizer
// state travels with the parameters.
void expect_exact_resume(const model::OptimizerConfig& optimizer) {
  const auto data = synthetic(160);
  testing::TempDir dir;
  auto options = small_options();
  options.optimizer = optimizer;
  options.evaluate = false;
  auto straight = options;
  straight.max_steps = 12;
  const auto reference = run_ranks(2, data, straight);

  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 5;
  options.max_steps = 7;  // stops after step 7; the checkpoint holds step 5
  const auto first = run_ranks(2, data, options);
  ASSERT_EQ(first[0].steps, 7u);
  options.max_steps = 12;
  const auto resumed = run_ranks(2, data, options);
  ASSERT_EQ(resumed[0].start_step, 5u);
  EXPECT_EQ(resumed[0].params, reference[0].params);
  EXPECT_EQ(resumed[1].params, reference[1].params);
  // The run really trained past the checkpoint (it is not the checkpoint itself).
  auto at_checkpoint = load_checkpoint(checkpoint_path(dir.path()));
  ASSERT_TRUE(at_checkpoint);
  EXPECT_EQ(at_checkpoint->step, 10u);  // the resumed run checkpointed again at 10
  EXPECT_NE(at_checkpoint->model.params, resumed[0].params);
}

TEST(DataParallelCheckpoint, ResumeIsBitExactWithSgdMomentum) {
  expect_exact_resume({.learning_rate = 0.05f, .momentum = 0.9f});
}

TEST(DataParallelCheckpoint, ResumeIsBitExactWithAdam) {
  expect_exact_resume({.kind = model::OptimizerKind::adam, .learning_rate = 0.005f});
}

// Without the optimizer state (a fresh momentum buffer), the resumed run differs: the
// test above could not pass by accident.
TEST(DataParallelCheckpoint, DroppingTheOptimizerStateChangesTheResult) {
  const auto data = synthetic(160);
  testing::TempDir dir;
  auto options = small_options();
  options.optimizer = {.learning_rate = 0.05f, .momentum = 0.9f};
  options.evaluate = false;
  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 5;
  options.max_steps = 5;
  const auto first = run_ranks(1, data, options);
  // Rewrite the checkpoint with a zeroed, restarted momentum buffer.
  auto ck = load_checkpoint(checkpoint_path(dir.path()));
  ASSERT_TRUE(ck);
  auto state = ck->optimizer;
  state.steps = 0;
  std::fill(state.buffers[0].values.begin(), state.buffers[0].values.end(), 0.0f);
  ASSERT_TRUE(save_checkpoint(checkpoint_path(dir.path()), ck->model.layout, ck->model.params,
                              state, ck->step, 1));
  options.max_steps = 8;
  options.checkpoint_every = 0;
  const auto resumed = run_ranks(1, data, options);
  auto straight = options;
  straight.checkpoint_dir.clear();
  const auto reference = run_ranks(1, data, straight);
  EXPECT_NE(resumed[0].params, reference[0].params);
}

// Runs the job on `world` ranks expecting every rank to fail; returns their errors.
std::vector<error> run_failing(int world, const data::TrainTest& data,
                               const TrainOptions& options) {
  collective::InProcessGroup group(world);
  std::vector<error> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      collective::Communicator comm(group.transport(r), "ckpt-test", 20s);
      auto result = train_data_parallel(comm, data, options);
      ASSERT_FALSE(result) << "rank " << r << " did not fail";
      errors[r] = result.error();
    });
  }
  for (auto& t : threads)
    t.join();
  return errors;
}

TEST(DataParallelCheckpoint, RefusesOptimizerStateOfAnotherKind) {
  const auto data = synthetic(160);
  testing::TempDir dir;
  auto options = small_options();
  options.optimizer = {.learning_rate = 0.05f, .momentum = 0.9f};
  options.evaluate = false;
  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 2;
  options.max_steps = 2;
  (void)run_ranks(2, data, options);
  options.optimizer = {.kind = model::OptimizerKind::adam, .learning_rate = 0.01f};
  options.max_steps = 4;
  const auto errors = run_failing(2, data, options);
  EXPECT_EQ(errors[0].code, errc::failed_precondition);
  EXPECT_NE(errors[0].message.find("optimizer state is for sgd, but this optimizer is adam"),
            std::string::npos)
      << errors[0].message;
  EXPECT_NE(errors[0].message.find(checkpoint_path(dir.path())), std::string::npos);
  EXPECT_EQ(errors[1].code, errc::failed_precondition);
  EXPECT_NE(errors[1].message.find("rank 0 could not load"), std::string::npos)
      << errors[1].message;
}

// A hand-made file in the documented format whose optimizer buffer is one value short.
TEST(DataParallelCheckpoint, RefusesOptimizerStateOfTheWrongSize) {
  const auto data = synthetic(160);
  testing::TempDir dir;
  auto options = small_options();
  options.optimizer = {.learning_rate = 0.05f, .momentum = 0.9f};
  options.evaluate = false;
  auto built = model::build_model(options.spec);
  ASSERT_TRUE(built);
  built->initialize(options.seed);
  const std::size_t n = built->param_count();
  const auto model_section =
      model::encode_params(built->layout(), built->params(), R"({"step":3,"world":2})");
  model::ParamLayout short_layout;
  short_layout.append("velocity", {static_cast<std::int64_t>(n - 1)});
  const std::vector<float> velocity(n - 1, 0.0f);
  const auto optimizer_section =
      model::encode_params(short_layout, velocity, R"({"kind":"sgd","steps":3})");
  std::vector<std::byte> file;
  auto put = [&](const void* p, std::size_t size) {
    const auto* b = static_cast<const std::byte*>(p);
    file.insert(file.end(), b, b + size);
  };
  const std::uint32_t version = 1, reserved = 0;
  put("FCDISTCK", 8);
  put(&version, 4);
  put(&reserved, 4);
  const std::uint64_t model_length = model_section.size(), opt_length = optimizer_section.size();
  put(&model_length, 8);
  put(model_section.data(), model_section.size());
  put(&opt_length, 8);
  put(optimizer_section.data(), optimizer_section.size());
  const std::uint32_t crc = crc32(file);
  put(&crc, 4);
  ASSERT_TRUE(model::write_file_atomically(checkpoint_path(dir.path()), file));

  options.checkpoint_dir = dir.path();
  options.max_steps = 6;
  const auto errors = run_failing(2, data, options);
  EXPECT_EQ(errors[0].code, errc::failed_precondition);
  EXPECT_NE(errors[0].message.find("buffer 'velocity' has " + std::to_string(n - 1) +
                                   " values, the parameters " + std::to_string(n)),
            std::string::npos)
      << errors[0].message;
}

}  // namespace
}  // namespace fedcore::distributed
