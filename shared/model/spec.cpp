#include "shared/model/spec.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <tuple>

#include <nlohmann/json.hpp>

#include "shared/model/federated_vector.hpp"
#include "shared/model/layers.hpp"
#include "shared/model/mobile_layers.hpp"
#include "shared/model/mobilenet_v2.hpp"
#include "shared/model/model.hpp"
#include "shared/util/rng.hpp"

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
    case ModelType::external:
      return fail(errc::failed_precondition,
                  "model spec: an external model is trained by the site's own code (the Python "
                  "SDK); Fedcore cannot build it");
    case ModelType::mobilenetv2: {
      if (shape.size() != 3) {
        return bad("a mobilenetv2 needs an image input_shape [H, W, C], got " +
                   shape_to_string(shape));
      }
      // Five stride-2 stages halve an ImageNet-sized input 32 times; three (the CIFAR
      // strides) halve a small one 8 times. Either way the last map is at least 1x1.
      const bool small = shape[0] <= 64 && shape[1] <= 64;
      layers = mobilenet_v2_layers(shape, output_units(spec),
                                   MobileNetV2Options{spec.width, spec.dropout, small});
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
        // With BatchNorm the convolution has no bias: the normalisation's shift replaces it.
        Conv2dOptions conv{spec.channels[i], spec.kernel, 1, padding};
        conv.bias = !spec.batch_norm;
        shape = add(std::make_unique<Conv2d>(shape, conv), "conv" + n);
        if (spec.batch_norm) {
          shape = add(std::make_unique<BatchNorm2d>(shape), "bn" + n);
        }
        if (shape[0] < 2 || shape[1] < 2) {
          return bad("input " + shape_to_string(spec.input_shape) + " is too small for " +
                     std::to_string(spec.channels.size()) + " conv/pool stages");
        }
        // Pooling before the ReLU: max pooling and ReLU commute (relu(max x) = max relu(x),
        // and the gradient reaches the window's first maximum exactly when it is positive,
        // with ReLU's derivative at 0 taken as 0), so this is the model of McMahan et al.
        // (conv, ReLU, pool) with the ReLU's two passes over a quarter of the values.
        shape = add(std::make_unique<MaxPool2d>(shape, 2), "pool" + n);
        shape = add(std::make_unique<ReLU>(shape), "relu" + n);
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

// An external model's "layout": {"tensors": [{"name", "shape"}, ...]} of 1 to 4096 tensors
// with printable names, every dimension positive and at most 2^28 parameters in all.
// An external layout and which of its tensors are marked "normalization": true.
struct ExternalLayout {
  ParamLayout layout;
  std::vector<std::size_t> normalization;
};

result<ExternalLayout> external_layout(const nlohmann::json& j, const JsonPath& at) {
  if (!j.is_object() || j.size() != 1 || !j.contains("tensors") || !j["tensors"].is_array() ||
      j["tensors"].empty()) {
    return at.bad(
        "must be {\"tensors\": [{\"name\": ..., \"shape\": [...]}, ...]} with at least one "
        "tensor, got " +
        describe_json(j));
  }
  // The layout proper, without the marks (layout_from_json reads names and shapes only).
  nlohmann::json plain = j;
  auto& tensors = plain["tensors"];
  std::vector<std::size_t> normalization;
  std::size_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    const auto where = at.key("tensors").index(i);
    if (t.is_object() && t.contains("normalization")) {
      if (!t["normalization"].is_boolean()) {
        return where.key("normalization")
            .bad("must be true or false, got " + describe_json(t["normalization"]));
      }
      if (t["normalization"].get<bool>()) {
        normalization.push_back(i);
      }
      t.erase("normalization");
    }
    if (!t.is_object() || t.size() != 2 || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("shape") || !t["shape"].is_array()) {
      return where.bad(
          "must be {\"name\": string, \"shape\": [integers]} (and optionally "
          "\"normalization\": true), got " +
          describe_json(j["tensors"][i]));
    }
    const auto name = t["name"].get<std::string>();
    if (name.empty() || name.size() > 256 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      return where.key("name").bad("must be 1 to 256 printable ASCII characters without spaces");
    }
    if (t["shape"].size() > 8) {
      return where.key("shape").bad("has more than 8 dimensions");
    }
    std::size_t count = 1;
    for (std::size_t d = 0; d < t["shape"].size(); ++d) {
      auto dim = json_integer(t["shape"][d], where.key("shape").index(d),
                              {1, static_cast<std::int64_t>(kMaxParams)});
      if (!dim) {
        return dim.error();
      }
      count = std::min(count * static_cast<std::size_t>(*dim), kMaxParams + 1);  // no wrap
    }
    total += count;
    if (total > kMaxParams) {
      return fail(errc::resource_exhausted,
                  at.document() + ": '" + at.path() + "' has more than 2^28 parameters");
    }
  }
  auto layout = layout_from_json(plain);
  if (!layout) {
    return fail(layout.error().code,
                at.document() + ": '" + at.path() + "': " + layout.error().message);
  }
  return ExternalLayout{std::move(*layout), std::move(normalization)};
}

}  // namespace

result<ModelSpec> parse_model_spec(const nlohmann::json& j) {
  return parse_model_spec(j, JsonPath("model spec"));
}

result<ModelSpec> parse_model_spec(const nlohmann::json& j, const JsonPath& at) {
  StrictObject o(j, at,
                 {"type", "input_shape", "num_classes", "hidden", "channels", "kernel", "dense",
                  "dropout", "layout", "initial", "width", "batch_norm"});
  if (o.ok() && !o.has("type")) {
    o.reject("type", "is required: \"logreg\", \"mlp\", \"cnn\", \"mobilenetv2\" or \"external\"");
  }
  std::string type;
  o.choice("type", type, {"logreg", "mlp", "cnn", "external", "mobilenetv2"});
  if (!o.ok()) {
    return o.status().error();
  }
  ModelSpec spec;
  spec.type = type == "mlp"           ? ModelType::mlp
              : type == "cnn"         ? ModelType::cnn
              : type == "external"    ? ModelType::external
              : type == "mobilenetv2" ? ModelType::mobilenetv2
                                      : ModelType::logreg;
  for (const char* key : {"layout", "initial"}) {
    if (spec.type != ModelType::external && o.has(key)) {
      o.reject(key, "applies only to an external model");
    }
  }
  if (spec.type == ModelType::external) {
    if (o.ok() && !o.has("layout")) {
      o.reject("layout",
               "is required for an external model: {\"tensors\": [{\"name\": ..., "
               "\"shape\": [...]}, ...]} (python: fedcore.torch.layout_of(model))");
    }
    if (o.ok() && o.has("dropout")) {
      o.reject("dropout", "applies only to an mlp, a cnn or a mobilenetv2");
    }
    if (o.ok()) {
      auto layout = external_layout(*o.find("layout"), o.at("layout"));
      if (o.take(layout)) {
        spec.layout = std::move(layout->layout);
        spec.normalization_tensors = std::move(layout->normalization);
      }
    }
    o.string("initial", spec.initial, {.min_size = 1, .max_size = 4096});
  }
  // Keys another type would use are errors, not ignored: a "hidden" on a logreg means the
  // admin expects a network the server would not build.
  if (spec.type != ModelType::mlp && o.has("hidden")) {
    o.reject("hidden", "applies only to an mlp");
  }
  for (const char* key : {"channels", "kernel", "dense", "batch_norm"}) {
    if (spec.type != ModelType::cnn && o.has(key)) {
      o.reject(key, "applies only to a cnn");
    }
  }
  if (spec.type == ModelType::logreg && o.has("dropout")) {
    o.reject("dropout", "applies only to an mlp, a cnn or a mobilenetv2");
  }
  if (spec.type != ModelType::mobilenetv2 && o.has("width")) {
    o.reject("width", "applies only to a mobilenetv2");
  }
  if (spec.type == ModelType::mobilenetv2) {
    spec.dropout = 0.2f;
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
  o.number("width", spec.width, {0, 4, true, false});
  o.boolean("batch_norm", spec.batch_norm);
  if (!o.ok()) {
    return o.status().error();
  }
  if (spec.complete() && spec.type != ModelType::external) {
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
  static const char* const kTypes[] = {"logreg", "mlp", "cnn", "external", "mobilenetv2"};
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
    if (spec.batch_norm) {  // absent otherwise: the spec older sites know
      j["batch_norm"] = true;
    }
  }
  if (spec.type == ModelType::mobilenetv2) {
    j["width"] = spec.width;
  }
  if (spec.type == ModelType::mlp || spec.type == ModelType::cnn ||
      spec.type == ModelType::mobilenetv2) {
    j["dropout"] = spec.dropout;
  }
  if (spec.type == ModelType::external) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& e : spec.layout.entries()) {
      tensors.push_back({{"name", e.name}, {"shape", e.shape}});
    }
    for (const auto i : spec.normalization_tensors) {
      tensors[i]["normalization"] = true;
    }
    j["layout"] = {{"tensors", std::move(tensors)}};
    if (!spec.initial.empty()) {
      j["initial"] = spec.initial;
    }
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

result<ParamLayout> layout_of(const ModelSpec& spec) {
  if (spec.type == ModelType::external) {
    return spec.layout;
  }
  auto built = build_model(spec);
  if (!built) {
    return built.error();
  }
  return federated_layout(*built);
}

bool has_batch_norm(const ModelSpec& spec) noexcept {
  return spec.type == ModelType::mobilenetv2 || (spec.type == ModelType::cnn && spec.batch_norm) ||
         (spec.type == ModelType::external && !spec.normalization_tensors.empty());
}

std::vector<ValueRange> external_site_ranges(const ModelSpec& spec) {
  return entry_ranges(spec.layout, spec.normalization_tensors);
}

std::vector<float> initialize_external(const ParamLayout& layout, std::uint64_t seed) {
  std::vector<float> params(layout.total(), 0.0f);
  Rng rng(seed);
  for (const auto& e : layout.entries()) {
    Rng tensor_rng = rng.split();  // one stream per tensor: a tensor's start ignores the others'
    const auto out = std::span<float>(params).subspan(e.offset, e.size);
    if (e.shape.size() >= 2) {
      const auto fan_in = static_cast<double>(e.size / static_cast<std::size_t>(e.shape.front()));
      const double bound = 1.0 / std::sqrt(fan_in);
      for (auto& x : out) {
        x = static_cast<float>((2.0 * tensor_rng.uniform_double() - 1.0) * bound);
      }
    } else if (e.shape.size() == 1 &&
               (e.name.ends_with("weight") || e.name.ends_with("running_var"))) {
      std::fill(out.begin(), out.end(), 1.0f);
    }
  }
  return params;
}

}  // namespace fedcore::model
