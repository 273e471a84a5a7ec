// ModelSpec: the JSON description that builds a model, and that travels over the wire so
// server and clients build the same network.
//
//   {"type": "logreg"}
//   {"type": "mlp", "hidden": [256, 128], "dropout": 0.0}
//   {"type": "cnn"}     conv5x5x32-pool2-conv5x5x64-pool2-dense512-dense (McMahan et al. 2017)
//
// plus, in every spec, "input_shape" ({H, W, C} for images, {features} for tables) and
// "num_classes". Those two may be left out of a user's spec and filled from the data set
// with `complete_spec`. A two-class problem gets one output logit and binary
// cross-entropy; more classes get one logit per class and softmax cross-entropy.
//
// Optional cnn keys: "channels": [32, 64], "kernel": 5, "dense": 512, "dropout": 0.0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/model/layout.hpp"
#include "shared/model/loss_kind.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::model {

class Model;  // shared/model/model.hpp: to use build_model's result (it needs Eigen)

enum class ModelType { logreg, mlp, cnn };

struct ModelSpec {
  ModelType type = ModelType::logreg;
  Shape input_shape;                           // empty until completed
  std::int32_t num_classes = 0;                // 0 until completed
  std::vector<std::int64_t> hidden;            // mlp
  std::vector<std::int64_t> channels{32, 64};  // cnn
  std::int64_t kernel = 5;                     // cnn
  std::int64_t dense = 512;                    // cnn
  float dropout = 0.0f;  // mlp (after each hidden layer) and cnn (before the last dense)

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
// work (e.g. a cnn on a 2x2 input).
result<Model> build_model(const ModelSpec& spec);

}  // namespace fedcore::model
