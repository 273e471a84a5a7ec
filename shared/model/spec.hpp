// ModelSpec: the JSON description that builds a model, and that travels over the wire so
// server and clients build the same network.
//
//   {"type": "logreg"}
//   {"type": "mlp", "hidden": [256, 128], "dropout": 0.0}
//   {"type": "cnn"}     conv5x5x32-pool2-conv5x5x64-pool2-dense512-dense (McMahan et al. 2017)
//   {"type": "external", "layout": {"tensors": [{"name": "conv1.weight", "shape": [6, 1, 5, 5]},
//                                               ...]},
//    "initial": "/srv/fedcore/init.fcp"}
//                       a tensor may carry "normalization": true (a BatchNorm weight, bias
//                       or running statistic: what FedBN keeps at each site)
//                       a model trained by the site's own code (the Python SDK, python/):
//                       Fedcore aggregates its flat buffer and never builds it. "initial"
//                       (optional, read by the server only) is a parameter file of the same
//                       layout to start from; without it the server draws the start with
//                       `initialize_external` below.
//
// plus, in every spec, "input_shape" ({H, W, C} for images, {features} for tables) and
// "num_classes". Those two may be left out of a user's spec and filled from the data set
// with `complete_spec`. A two-class problem gets one output logit and binary
// cross-entropy; more classes get one logit per class and softmax cross-entropy.
//
//   {"type": "mobilenetv2", "width": 0.5}
//                       MobileNetV2 with BatchNorm (shared/model/mobilenet_v2.hpp); inputs of
//                       at most 64x64 get the CIFAR strides (stem and second stage at stride 1)
//
// Optional cnn keys: "channels": [32, 64], "kernel": 5, "dense": 512, "dropout": 0.0,
// "batch_norm": false (true: a BatchNorm2d after each convolution, which then has no bias).
// Optional mobilenetv2 keys: "width": 1.0 (in (0, 4]), "dropout": 0.2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/model/federated_vector.hpp"
#include "shared/model/layout.hpp"
#include "shared/model/loss_kind.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::model {

class Model;  // shared/model/model.hpp: to use build_model's result (it needs Eigen)

enum class ModelType { logreg, mlp, cnn, external, mobilenetv2 };

struct ModelSpec {
  ModelType type = ModelType::logreg;
  Shape input_shape;                           // empty until completed
  std::int32_t num_classes = 0;                // 0 until completed
  std::vector<std::int64_t> hidden;            // mlp
  std::vector<std::int64_t> channels{32, 64};  // cnn
  std::int64_t kernel = 5;                     // cnn
  std::int64_t dense = 512;                    // cnn
  bool batch_norm = false;                     // cnn: BatchNorm2d after each convolution
  float width = 1.0f;                          // mobilenetv2: width multiplier
  // mlp (after each hidden layer), cnn and mobilenetv2 (before the last dense); unset means
  // 0 for an mlp or a cnn and 0.2 for a mobilenetv2 (torchvision's)
  float dropout = 0.0f;
  ParamLayout layout;  // external: its tensors, in flat-buffer order
  // external: the indices (ascending) of the layout's tensors marked "normalization": true,
  // a normalisation layer's weight, bias or statistics (FedBN keeps them at the sites)
  std::vector<std::size_t> normalization_tensors;
  std::string initial;  // external: the server's parameter file to start from ("" = none)

  bool complete() const noexcept { return !input_shape.empty() && num_classes > 0; }
};

// Parses and validates a spec strictly (shared/util/strict_json.hpp): every problem is
// errc::invalid_argument with a message naming the key ("model spec: 'hidden[1]' must be an
// integer in [1, 65536], got 0"), unknown keys and keys of another model type included
// ("'hidden' applies only to an mlp"). Total parameter counts above 2^28 are
// errc::resource_exhausted. The text form also refuses invalid JSON and duplicate keys.
result<ModelSpec> parse_model_spec(const nlohmann::json& j);
result<ModelSpec> parse_model_spec(std::string_view json_text);
// The same for a spec inside another document, e.g. JsonPath("run config", "model"), so
// messages name it there ("run config: 'model.hidden' ...").
result<ModelSpec> parse_model_spec(const nlohmann::json& j, const JsonPath& at);
void to_json(nlohmann::json& j, const ModelSpec& spec);

// Fills missing input_shape / num_classes from the data and checks that present ones agree.
result<ModelSpec> complete_spec(ModelSpec spec, const Shape& data_sample_shape,
                                std::int32_t data_num_classes);

// The loss a spec trains with.
LossKind loss_for(const ModelSpec& spec) noexcept;

// Builds the (uninitialised) model. Fails if the spec is incomplete or its shapes cannot
// work (e.g. a cnn on a 2x2 input), and with failed_precondition for an external model
// (Fedcore has no code for it).
result<Model> build_model(const ModelSpec& spec);

// The layout of the vector a federated round carries for a complete spec: the built model's
// parameters and state (federated_vector.hpp) for Fedcore's own models, as declared for an
// external one. Errors: those of build_model for the built-in types.
result<ParamLayout> layout_of(const ModelSpec& spec);

// Whether the spec has BatchNorm layers (running statistics, FedBN's site-local values): a
// mobilenetv2, a cnn with "batch_norm", an external model with tensors marked
// "normalization" (python: fedcore.torch.spec_of marks BatchNorm's).
bool has_batch_norm(const ModelSpec& spec) noexcept;
// An external model's marked tensors as ranges of its flat buffer, in order, adjacent ones
// merged (model/federated_vector.hpp site_ranges for the models Fedcore builds).
std::vector<ValueRange> external_site_ranges(const ModelSpec& spec);

// The starting point of an external model when the run names no "initial" file,
// following PyTorch's defaults for its common layers so that a torch model started here
// trains as it would from its own constructor: a tensor of rank >= 2 is drawn uniformly in
// +-1/sqrt(fan_in), fan_in = the product of its dimensions after the first (PyTorch's
// [out, in, ...] order); a rank-1 tensor named "*weight" or "*running_var" is ones
// (normalisation layers); every other tensor (biases, running means) is zeros. Seeded:
// the same layout and seed give the same bits on every platform.
std::vector<float> initialize_external(const ParamLayout& layout, std::uint64_t seed);

}  // namespace fedcore::model
