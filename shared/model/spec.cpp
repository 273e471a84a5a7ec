#include "shared/model/spec.hpp"

#include <tuple>

#include <nlohmann/json.hpp>

#include "shared/model/layers.hpp"
#include "shared/model/model.hpp"

namespace fedcore::model {
namespace {

constexpr std::size_t kMaxParams = std::size_t{1} << 28;  // 1 GiB of float32
constexpr std::int64_t kMaxWidth = 1 << 16;

error bad(const std::string& message) {
  return fail(errc::invalid_argument, "model spec: " + message);
}

// A problem of the spec as a whole (its shapes), named after where the spec sits:
// "model spec: ..." alone, "run config: model: ..." inside a run config.
error bad_spec(const JsonPath& at, const error& e) {
  const std::string where = at.path().empty() ? at.document() : at.document() + ": " + at.path();
  auto message = e.message;
  if (message.rfind("model spec: ", 0) == 0) {
    message.erase(0, std::string("model spec: ").size());
  }
  return fail(e.code, where + ": " + message);
}

// `key` as an array of 1 to `max_count` integers in [1, kMaxWidth].
result<std::vector<std::int64_t>> positive_ints(const StrictObject& o, std::string_view key,
                                                std::size_t max_count) {
  const auto& v = *o.find(key);
  const auto at = o.at(key);
  if (!v.is_array() || v.empty() || v.size() > max_count) {
    return at.bad("must be an array of 1 to " + std::to_string(max_count) +
                  " integers in [1, 65536], got " + describe_json(v));
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto x = json_integer(v[i], at.index(i), {1, kMaxWidth});
    if (!x) {
      return x.error();
    }
    out.push_back(*x);
  }
  return out;
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
  return parse_model_spec(j, JsonPath("model spec"));
}

result<ModelSpec> parse_model_spec(const nlohmann::json& j, const JsonPath& at) {
  StrictObject o(
      j, at,
      {"type", "input_shape", "num_classes", "hidden", "channels", "kernel", "dense", "dropout"});
  if (o.ok() && !o.has("type")) {
    o.reject("type", "is required: \"logreg\", \"mlp\" or \"cnn\"");
  }
  std::string type;
  o.choice("type", type, {"logreg", "mlp", "cnn"});
  if (!o.ok()) {
    return o.status().error();
  }
  ModelSpec spec;
  spec.type = type == "mlp" ? ModelType::mlp : type == "cnn" ? ModelType::cnn : ModelType::logreg;
  // Keys another type would use are errors, not ignored: a "hidden" on a logreg means the
  // admin expects a network the server would not build.
  if (spec.type != ModelType::mlp && o.has("hidden")) {
    o.reject("hidden", "applies only to an mlp");
  }
  for (const char* key : {"channels", "kernel", "dense"}) {
    if (spec.type != ModelType::cnn && o.has(key)) {
      o.reject(key, "applies only to a cnn");
    }
  }
  if (spec.type == ModelType::logreg && o.has("dropout")) {
    o.reject("dropout", "applies only to an mlp or a cnn");
  }
  if (spec.type == ModelType::mlp && !o.has("hidden")) {
    o.reject("hidden", "is required for an mlp, e.g. [256, 128]");
  }
  for (auto [key, target, max_count] :
       {std::tuple{"input_shape", &spec.input_shape, std::size_t{3}},
        std::tuple{"hidden", &spec.hidden, std::size_t{16}},
        std::tuple{"channels", &spec.channels, std::size_t{4}}}) {
    if (o.ok() && o.has(key)) {
      auto values = positive_ints(o, key, max_count);
      if (o.take(values)) {
        *target = std::move(*values);
      }
    }
  }
  o.integer("num_classes", spec.num_classes, {2, 100000});
  o.integer("kernel", spec.kernel, {1, 15});
  o.integer("dense", spec.dense, {1, kMaxWidth});
  o.number("dropout", spec.dropout, {0, 1, false, true});
  if (!o.ok()) {
    return o.status().error();
  }
  if (spec.complete()) {
    auto layers = make_layers(spec);
    if (!layers) {
      return bad_spec(at, layers.error());
    }
    if (count_params(*layers) > kMaxParams) {
      return bad_spec(at, fail(errc::resource_exhausted, "more than 2^28 parameters"));
    }
  }
  return spec;
}

result<ModelSpec> parse_model_spec(std::string_view json_text) {
  auto j = parse_json_strict(json_text, "model spec");
  if (!j) {
    return j.error();
  }
  return parse_model_spec(*j);
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
