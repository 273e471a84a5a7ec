#include "python/native/python_site.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <pybind11/numpy.h>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace py = pybind11;

namespace fedcore::python {
namespace {

// One read-only view per tensor of `layout` into `flat`. The arrays' base is a capsule
// that owns nothing: `flat` is the daemon's, alive for the call.
py::list tensor_views(const model::ParamLayout& layout, std::span<const float> flat) {
  py::capsule borrowed(flat.data(), [](void*) {});
  py::list views;
  for (const auto& e : layout.entries()) {
    std::vector<py::ssize_t> shape(e.shape.begin(), e.shape.end());
    py::array_t<float> view(shape, py::detail::c_strides(shape, sizeof(float)),
                            flat.data() + e.offset, borrowed);
    view.attr("setflags")(py::arg("write") = false);
    views.append(std::move(view));
  }
  return views;
}

// The Python exception being handled, as the one line the server records, and its
// traceback in the log.
error python_failure(const char* call, py::error_already_set& e) {
  std::string text = e.what();
  spdlog::error("{} raised {}", call, text);
  const auto line_end = text.find('\n');
  std::string first = text.substr(0, line_end);
  if (first.size() > 400) {
    first = first.substr(0, 400) + "...";
  }
  return fail(errc::aborted, std::string(call) + " raised " + first);
}

// The site code's own mistake in what it returned: named so the data scientist can fix it.
error bad_return(const char* call, const std::string& problem) {
  spdlog::error("{}: {}", call, problem);
  return fail(errc::invalid_argument, std::string(call) + ": " + problem);
}

// Copies `returned` (a list of arrays in the layout's order and shapes, or one array of
// the layout's size) into a flat vector: the update's one and only copy.
result<std::vector<float>> flatten(const py::handle& returned, const model::ParamLayout& layout) {
  std::vector<float> flat(layout.total());
  auto copy_in = [&](const py::handle& item, std::size_t offset, std::size_t count,
                     const std::string& what) -> result<void> {
    auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(item);
    if (!array) {
      PyErr_Clear();
      return bad_return("fit", what + " is not an array of numbers");
    }
    if (static_cast<std::size_t>(array.size()) != count) {
      return bad_return("fit", what + " has " + std::to_string(array.size()) +
                                   " values; the run's layout has " + std::to_string(count));
    }
    std::memcpy(flat.data() + offset, array.data(), count * sizeof(float));
    return {};
  };
  if (py::isinstance<py::list>(returned) || py::isinstance<py::tuple>(returned)) {
    const auto items = py::reinterpret_borrow<py::sequence>(returned);
    const auto& entries = layout.entries();
    if (items.size() != entries.size()) {
      return bad_return("fit", "returned " + std::to_string(items.size()) +
                                   " arrays; the run's layout has " +
                                   std::to_string(entries.size()) + " tensors");
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto done = copy_in(items[i], entries[i].offset, entries[i].size,
                          "parameters[" + std::to_string(i) + "] ('" + entries[i].name + "')");
      if (!done) {
        return done.error();
      }
    }
    return flat;
  }
  auto done = copy_in(returned, 0, layout.total(), "the returned parameter array");
  if (!done) {
    return done.error();
  }
  return flat;
}

// A metric by name from a dict (or None), when it is a real number.
std::optional<double> metric(const py::handle& metrics, const char* name) {
  if (!py::isinstance<py::dict>(metrics)) {
    return std::nullopt;
  }
  const auto dict = py::reinterpret_borrow<py::dict>(metrics);
  if (!dict.contains(name)) {
    return std::nullopt;
  }
  try {
    return dict[name].cast<double>();
  } catch (const py::cast_error&) {
    return std::nullopt;
  }
}

// A count as the protocol needs it: a non-negative Python int.
std::optional<std::uint64_t> count_of(const py::handle& value) {
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
    return std::nullopt;
  }
  try {
    return value.cast<std::uint64_t>();
  } catch (const py::cast_error&) {
    return std::nullopt;
  }
}

py::dict fit_config(const protocol::TrainRequest& request) {
  py::dict config;
  config["run_id"] = request.run_id;
  config["round"] = request.round;
  config["epochs"] = request.settings.epochs;
  config["batch_size"] = request.settings.batch_size;
  config["optimizer"] =
      py::module_::import("json").attr("loads")(request.settings.optimizer.dump());
  if (request.settings.optimizer.contains("lr") && request.settings.optimizer["lr"].is_number()) {
    config["lr"] = request.settings.optimizer["lr"].get<double>();
  }
  config["proximal_mu"] = request.settings.proximal_mu;
  config["seed"] = request.settings.seed;
  return config;
}

}  // namespace

PythonSite::PythonSite(py::object user, client::SiteDataShape shape,
                       std::optional<model::ParamLayout> layout)
    : user_(std::move(user)), shape_(std::move(shape)), layout_(std::move(layout)) {}

PythonSite::~PythonSite() {
  py::gil_scoped_acquire gil;
  user_ = py::object();
}

result<client::ExternalFit> PythonSite::fit(const protocol::TrainRequest& request,
                                            const model::ParamLayout& layout,
                                            std::span<const float> global) {
  py::gil_scoped_acquire gil;
  try {
    py::object returned = user_.attr("fit")(tensor_views(layout, global), fit_config(request));
    if (!py::isinstance<py::tuple>(returned) || py::len(returned) != 3) {
      return bad_return("fit", "must return (parameters, num_examples, metrics)");
    }
    const auto parts = returned.cast<py::tuple>();
    auto params = flatten(parts[0], layout);
    if (!params) {
      return params.error();
    }
    const auto examples = count_of(parts[1]);
    if (!examples) {
      return bad_return("fit", "num_examples must be a non-negative int, got " +
                                   std::string(py::str(py::repr(parts[1]))));
    }
    client::ExternalFit out;
    out.params = std::move(*params);
    out.samples = *examples;
    out.loss = metric(parts[2], "loss").value_or(0.0);
    out.accuracy = metric(parts[2], "accuracy").value_or(0.0);
    ++fits_;
    return out;
  } catch (py::error_already_set& e) {
    return python_failure("fit", e);
  }
}

result<protocol::LocalEvaluation> PythonSite::evaluate(std::int64_t run_id, std::int64_t round,
                                                       const model::ParamLayout& layout,
                                                       std::span<const float> params) {
  py::gil_scoped_acquire gil;
  try {
    py::dict config;
    config["run_id"] = run_id;
    config["round"] = round;
    py::object returned = user_.attr("evaluate")(tensor_views(layout, params), config);
    if (!py::isinstance<py::tuple>(returned) || py::len(returned) != 3) {
      return bad_return("evaluate", "must return (loss, num_examples, metrics)");
    }
    const auto parts = returned.cast<py::tuple>();
    const auto examples = count_of(parts[1]);
    double loss = 0;
    try {
      loss = parts[0].cast<double>();
    } catch (const py::cast_error&) {
      return bad_return("evaluate", "loss must be a number");
    }
    if (!examples || *examples == 0 || !std::isfinite(loss)) {
      return bad_return("evaluate", "needs a finite loss and num_examples >= 1");
    }
    const double accuracy = std::clamp(metric(parts[2], "accuracy").value_or(0.0), 0.0, 1.0);
    return protocol::LocalEvaluation{loss, std::isfinite(accuracy) ? accuracy : 0.0, *examples};
  } catch (py::error_already_set& e) {
    return python_failure("evaluate", e);
  }
}

}  // namespace fedcore::python
