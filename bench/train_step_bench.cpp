// One training step (forward, loss, backward, SGD-with-momentum update) of the zoo's
// models on Fashion-MNIST-shaped batches (and the cnn on CIFAR-shaped ones, model 3), as
// samples per second.
//
//   build/release/bench/bench_train_step --benchmark_filter=cnn
//
// Names: train_step/<model>/batch:<B>/threads:<T>. Threads are the Eigen/OpenMP compute
// threads of this one process (set_compute_threads), the same knob PyTorch's
// torch.set_num_threads turns in bench/compare_torch.py.
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>

#include <benchmark/benchmark.h>

#include "shared/model/conv_wide.hpp"
#include "shared/model/gemm.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/blas_kernels.hpp"
#include "shared/util/threads.hpp"

namespace {

using namespace fedcore::model;

const char* const kSpecs[] = {
    R"({"type":"logreg","input_shape":[28,28,1],"num_classes":10})",
    R"({"type":"mlp","hidden":[256,128],"input_shape":[28,28,1],"num_classes":10})",
    R"({"type":"cnn","input_shape":[28,28,1],"num_classes":10})",
    R"({"type":"cnn","input_shape":[32,32,3],"num_classes":10})",
};

// The same number bench/compare_torch.py runs before it times PyTorch.
constexpr int kWarmUpSteps = 5;

void train_step(benchmark::State& state) {
  const auto& spec_json = kSpecs[state.range(0)];
  const auto batch = static_cast<Eigen::Index>(state.range(1));
  fedcore::set_compute_threads(static_cast<int>(state.range(2)));
  auto model = build_model(*parse_model_spec(std::string_view(spec_json)));
  model->initialize(1);
  auto sgd = make_optimizer({.learning_rate = 0.01f, .momentum = 0.9f}, model->param_count());
  fedcore::Rng rng(2);
  Matrix x(static_cast<Eigen::Index>(model->input_size()), batch);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    x.data()[i] = rng.uniform_float();
  }
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (auto& label : labels) {
    label = static_cast<std::int32_t>(rng.below(10));
  }
  Matrix grad_logits;
  const auto step = [&] {
    const Matrix& logits = model->forward(x, Phase::train);
    evaluate_loss(LossKind::softmax_cross_entropy, logits, labels, &grad_logits);
    model->backward(grad_logits);
    sgd->step(model->params(), model->grads());
    benchmark::DoNotOptimize(model->params().data());
  };
  // Untimed warm-up steps, as bench/compare_torch.py gives PyTorch: the first step maps and
  // zero-fills every activation and gradient buffer (a cold step of the cnn at batch 128 is
  // one of only ~8 timed steps), which a training loop pays once.
  for (int warm_up = 0; warm_up < kWarmUpSteps; ++warm_up) {
    step();
  }
  for (auto _ : state) {
    step();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

void arguments(benchmark::internal::Benchmark* b) {
  b->ArgNames({"model", "batch", "threads"});
  for (int model = 0; model < static_cast<int>(std::size(kSpecs)); ++model) {
    for (int batch : {32, 128}) {
      for (int threads : {1, 2}) {
        b->Args({model, batch, threads});
      }
    }
  }
  b->MinTime(1.0)->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(train_step)->Apply(arguments);

// The OpenBLAS kernels the products ran on (shared/util/blas_kernels.hpp) and the
// convolution's kernel (shared/model/gemm.hpp) go into the output's context;
// bench/compare_torch.sh gives PyTorch the same OpenBLAS core. `--gemm=standard`
// runs the convolutions on the build's products instead of the AVX-512 kernel, and
// `--conv=gemm` keeps wide convolutions off their AVX-512 direct kernel
// (shared/model/conv_wide.hpp): with both, the step runs as on a CPU without AVX-512 (for
// the side-by-sides in docs/results.md).
int main(int argc, char** argv) {
  namespace gemm = fedcore::model::gemm;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg == "--gemm=standard" || arg == "--gemm=avx512") {
      const auto kernel = arg.ends_with("avx512") ? gemm::Kernel::avx512 : gemm::Kernel::standard;
      if (!gemm::use_kernel(kernel)) {
        std::fprintf(stderr, "%s: this CPU or build has no %s kernel\n", argv[0],
                     gemm::kernel_name(kernel));
        return 1;
      }
      continue;
    }
    if (arg == "--conv=gemm") {
      fedcore::model::kernels::allow_wide_kernels(false);
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::AddCustomContext("blas_core", fedcore::blas_core_name());
  benchmark::AddCustomContext("gemm_kernel", gemm::kernel_name(gemm::active_kernel()));
  const fedcore::model::kernels::ConvGeometry conv2{14, 14, 32, 14, 14, 64, 5, 1, 2};
  benchmark::AddCustomContext("wide_conv_kernel",
                              fedcore::model::kernels::wide_applies(conv2) ? "avx512" : "off");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
