#include "shared/model/spec.hpp"

#include <nlohmann/json.hpp>

#include "shared/model/layers.hpp"

namespace fedcore::model {
namespace {

constexpr std::size_t kMaxParams = std::size_t{1} << 28;  // 1 GiB of float32
constexpr std::int64_t kMaxWidth = 1 << 16;

error bad(const std::string& message) {
  return fail(errc::invalid_argument, "model spec: " + message);
}

result<std::vector<std::int64_t>> positive_ints(const nlohmann::json& j, const char* key,
                                                std::size_t max_count, bool allow_empty) {
  const auto& v = j[key];
  if (!v.is_array() || v.size() > max_count || (!allow_empty && v.empty())) {
    return bad(std::string("'") + key + "' must be an array of 1 to " + std::to_string(max_count) +
               " positive integers");
  }
  std::vector<std::int64_t> out;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<std::int64_t>() <= 0 || x.get<std::int64_t>() > kMaxWidth) {
      return bad(std::string("'") + key + "' entries must be integers in [1, 65536], got " +
                 x.dump());
    }
    out.push_back(x.get<std::int64_t>());
  }
  return out;
}

result<std::int64_t> positive_int(const nlohmann::json& j, const char* key, std::int64_t max) {
  const auto& v = j[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0 || v.get<std::int64_t>() > max) {
    return bad(std::string("'") + key + "' must be an integer in [1, " + std::to_string(max) +
               "], got " + v.dump());
  }
  return v.get<std::int64_t>();
}

std::int64_t output_units(const ModelSpec& spec) {
  return spec.num_classes == 2 ? 1 : spec.num_classes;
}

// Layers for a complete, validated spec. Shapes are checked here because they depend on
// the input: returns an error for a cnn whose input is too small.
result<std::vector<std::unique_ptr<Layer>>> make_layers(const ModelSpec& spec) {
  std::vector<std::unique_ptr<Layer>> layers;
  auto add = [&](std::unique_ptr<Layer> layer, std::string name) -> const Shape& {
    layer->set_name(std::move(name));
    layers.push_back(std::move(layer));
    return layers.back()->output_shape();
  };
  Shape shape = spec.input_shape;
  switch (spec.type) {
    case ModelType::logreg:
      add(std::make_unique<Dense>(shape, output_units(spec)), "fc");
      break;
    case ModelType::mlp: {
      for (std::size_t i = 0; i < spec.hidden.size(); ++i) {
        const auto n = std::to_string(i + 1);
        shape = add(std::make_unique<Dense>(shape, spec.hidden[i]), "fc" + n);
        shape = add(std::make_unique<ReLU>(shape), "relu" + n);
        if (spec.dropout > 0) {
          shape = add(std::make_unique<Dropout>(shape, spec.dropout), "dropout" + n);
        }
      }
      add(std::make_unique<Dense>(shape, output_units(spec)),
          "fc" + std::to_string(spec.hidden.size() + 1));
      break;
    }
    case ModelType::cnn: {
      if (shape.size() != 3) {
        return bad("a cnn needs an image input_shape [H, W, C], got " + shape_to_string(shape));
      }
      const std::int64_t padding = spec.kernel / 2;  // "same" convolutions, as in McMahan et al.
      for (std::size_t i = 0; i < spec.channels.size(); ++i) {
        const auto n = std::to_string(i + 1);
        if (shape[0] + 2 * padding < spec.kernel || shape[1] + 2 * padding < spec.kernel) {
          return bad("input " + shape_to_string(spec.input_shape) + " is too small for " +
                     std::to_string(spec.channels.size()) + " conv/pool stages");
        }
        shape = add(std::make_unique<Conv2d>(
                        shape, Conv2dOptions{spec.channels[i], spec.kernel, 1, padding}),
                    "conv" + n);
        shape = add(std::make_unique<ReLU>(shape), "relu" + n);
        if (shape[0] < 2 || shape[1] < 2) {
          return bad("input " + shape_to_string(spec.input_shape) + " is too small for " +
                     std::to_string(spec.channels.size()) + " conv/pool stages");
        }
        shape = add(std::make_unique<MaxPool2d>(shape, 2), "pool" + n);
      }
      shape = add(std::make_unique<Flatten>(shape), "flatten");
      shape = add(std::make_unique<Dense>(shape, spec.dense), "fc1");
      shape = add(std::make_unique<ReLU>(shape), "relu_fc1");
      if (spec.dropout > 0) {
        shape = add(std::make_unique<Dropout>(shape, spec.dropout), "dropout");
      }
      add(std::make_unique<Dense>(shape, output_units(spec)), "fc2");
      break;
    }
  }
  return layers;
}

// Parameter count without allocating, so oversized specs are refused before any memory
// is committed.
std::size_t count_params(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::size_t total = 0;
  for (const auto& layer : layers) {
    for (const auto& p : layer->param_shapes()) {
      total += element_count(p.shape);
    }
  }
  return total;
}

}  // namespace

result<ModelSpec> parse_model_spec(const nlohmann::json& j) {
  if (!j.is_object()) {
    return bad("expected a JSON object");
  }
  static const char* const kKeys[] = {"type",     "input_shape", "num_classes", "hidden",
                                      "channels", "kernel",      "dense",       "dropout"};
  for (const auto& [key, value] : j.items()) {
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) ==
        std::end(kKeys)) {
      return bad("unknown key '" + key + "'");
    }
  }
  ModelSpec spec;
  if (!j.contains("type") || !j["type"].is_string()) {
    return bad("'type' is required: \"logreg\", \"mlp\" or \"cnn\"");
  }
  const auto type = j["type"].get<std::string>();
  if (type == "logreg") {
    spec.type = ModelType::logreg;
  } else if (type == "mlp") {
    spec.type = ModelType::mlp;
  } else if (type == "cnn") {
    spec.type = ModelType::cnn;
  } else {
    return bad("unknown 'type' \"" + type + "\"; expected \"logreg\", \"mlp\" or \"cnn\"");
  }
  if (j.contains("input_shape")) {
    auto shape = positive_ints(j, "input_shape", 3, false);
    if (!shape) {
      return shape.error();
    }
    spec.input_shape = *shape;
  }
  if (j.contains("num_classes")) {
    auto classes = positive_int(j, "num_classes", 100000);
    if (!classes) {
      return classes.error();
    }
    if (*classes < 2) {
      return bad("'num_classes' must be at least 2");
    }
    spec.num_classes = static_cast<std::int32_t>(*classes);
  }
  if (spec.type == ModelType::mlp) {
    if (!j.contains("hidden")) {
      return bad("an mlp needs 'hidden', e.g. [256, 128]");
    }
    auto hidden = positive_ints(j, "hidden", 16, false);
    if (!hidden) {
      return hidden.error();
    }
    spec.hidden = *hidden;
  } else if (j.contains("hidden")) {
    return bad("'hidden' applies only to an mlp");
  }
  if (spec.type != ModelType::cnn &&
      (j.contains("channels") || j.contains("kernel") || j.contains("dense"))) {
    return bad("'channels', 'kernel' and 'dense' apply only to a cnn");
  }
  if (j.contains("channels")) {
    auto channels = positive_ints(j, "channels", 4, false);
    if (!channels) {
      return channels.error();
    }
    spec.channels = *channels;
  }
  if (j.contains("kernel")) {
    auto kernel = positive_int(j, "kernel", 15);
    if (!kernel) {
      return kernel.error();
    }
    spec.kernel = *kernel;
  }
  if (j.contains("dense")) {
    auto dense = positive_int(j, "dense", kMaxWidth);
    if (!dense) {
      return dense.error();
    }
    spec.dense = *dense;
  }
  if (j.contains("dropout")) {
    const auto& d = j["dropout"];
    if (spec.type == ModelType::logreg || !d.is_number() || d.get<double>() < 0 ||
        d.get<double>() >= 1) {
      return bad("'dropout' must be a number in [0, 1) on an mlp or cnn");
    }
    spec.dropout = d.get<float>();
  }
  if (spec.complete()) {
    auto layers = make_layers(spec);
    if (!layers) {
      return layers.error();
    }
    if (count_params(*layers) > kMaxParams) {
      return fail(errc::resource_exhausted, "model spec: more than 2^28 parameters");
    }
  }
  return spec;
}

result<ModelSpec> parse_model_spec(std::string_view json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return bad("not valid JSON: " + std::string(json_text.substr(0, 200)));
  }
  return parse_model_spec(j);
}

void to_json(nlohmann::json& j, const ModelSpec& spec) {
  static const char* const kTypes[] = {"logreg", "mlp", "cnn"};
  j = {{"type", kTypes[static_cast<int>(spec.type)]}};
  if (!spec.input_shape.empty()) {
    j["input_shape"] = spec.input_shape;
  }
  if (spec.num_classes > 0) {
    j["num_classes"] = spec.num_classes;
  }
  if (spec.type == ModelType::mlp) {
    j["hidden"] = spec.hidden;
  }
  if (spec.type == ModelType::cnn) {
    j["channels"] = spec.channels;
    j["kernel"] = spec.kernel;
    j["dense"] = spec.dense;
  }
  if (spec.type != ModelType::logreg) {
    j["dropout"] = spec.dropout;
  }
}

result<ModelSpec> complete_spec(ModelSpec spec, const Shape& data_sample_shape,
                                std::int32_t data_num_classes) {
  if (spec.input_shape.empty()) {
    spec.input_shape = data_sample_shape;
  } else if (element_count(spec.input_shape) != element_count(data_sample_shape)) {
    return bad("input_shape " + shape_to_string(spec.input_shape) + " does not match the data's " +
               shape_to_string(data_sample_shape));
  }
  if (spec.num_classes == 0) {
    spec.num_classes = data_num_classes;
  } else if (spec.num_classes < data_num_classes) {
    return bad("num_classes " + std::to_string(spec.num_classes) + " is fewer than the data's " +
               std::to_string(data_num_classes));
  }
  return parse_model_spec(nlohmann::json(spec));
}

LossKind loss_for(const ModelSpec& spec) noexcept {
  return spec.num_classes == 2 ? LossKind::binary_cross_entropy : LossKind::softmax_cross_entropy;
}

result<Model> build_model(const ModelSpec& spec) {
  if (!spec.complete()) {
    return bad("input_shape and num_classes must be known before building");
  }
  auto layers = make_layers(spec);
  if (!layers) {
    return layers.error();
  }
  if (count_params(*layers) > kMaxParams) {
    return fail(errc::resource_exhausted, "model spec: more than 2^28 parameters");
  }
  return Model(spec.input_shape, std::move(*layers));
}

}  // namespace fedcore::model
