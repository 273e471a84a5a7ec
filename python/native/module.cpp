// fedcore._native: the Python SDK's bindings over the real client library (client/), not
// a second implementation of the protocol. The pure-Python package (python/fedcore/) checks
// the user's arguments and calls these.
//
//   run_client(client, config_path, samples, test_samples, input_shape, num_classes,
//              layout_json, log_level) -> rounds trained
//       runs fedcore-client's daemon with `client` as its trainer until SIGINT or SIGTERM;
//       the GIL is released while the daemon does I/O and taken only for fit/evaluate.
//   save_parameters(path, layout_json, flat, metadata_json) / load_parameters(path)
//       Fedcore's parameter file (docs/formats.md), written atomically.
//   layout_fingerprint(layout_json) -> 16 hex digits, as the server computes it.
//   load_fashion_mnist(dir) -> (train_x, train_y, test_x, test_y), read and scaled exactly
//       as Fedcore's own trainer reads them (shared/data/fashion_mnist.hpp).
//   partition(labels, spec, num_classes, clients, seed) -> [indices per client], the
//       partitioners of fedcore-sim and the daemon's "partition" (shared/data/partition.hpp),
//       so a Python site can hold exactly the shard a C++ site would.
#include <algorithm>
#include <csignal>
#include <fstream>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "client/client_config.hpp"
#include "client/daemon.hpp"
#include "python/native/python_site.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/partition.hpp"
#include "shared/model/layout.hpp"
#include "shared/model/param_io.hpp"

namespace py = pybind11;

namespace fedcore::python {
namespace {

// Raises the error as the Python exception a caller would expect for its kind.
[[noreturn]] void raise(const error& e) {
  switch (e.code) {
    case errc::invalid_argument:
    case errc::failed_precondition:
      throw py::value_error(e.message);
    case errc::not_found:
      PyErr_SetString(PyExc_FileNotFoundError, e.message.c_str());
      throw py::error_already_set();
    default:
      PyErr_SetString(PyExc_OSError, e.message.c_str());
      throw py::error_already_set();
  }
}

model::ParamLayout layout_from(const std::string& layout_json) {
  auto j = nlohmann::json::parse(layout_json, nullptr, false);
  auto layout = model::layout_from_json(j);
  if (!layout) {
    raise(layout.error());
  }
  return std::move(*layout);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    raise(fail(errc::not_found, "cannot read client config '" + path + "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// SIGINT and SIGTERM as Python had them: the daemon's signal_set replaces the handlers
// while it runs, and asio leaves SIG_DFL behind, which would make a later Ctrl-C kill the
// interpreter instead of raising KeyboardInterrupt.
class SavedSignalHandlers {
 public:
  SavedSignalHandlers() {
    sigaction(SIGINT, nullptr, &interrupt_);
    sigaction(SIGTERM, nullptr, &terminate_);
  }
  ~SavedSignalHandlers() {
    sigaction(SIGINT, &interrupt_, nullptr);
    sigaction(SIGTERM, &terminate_, nullptr);
  }
  SavedSignalHandlers(const SavedSignalHandlers&) = delete;
  SavedSignalHandlers& operator=(const SavedSignalHandlers&) = delete;

 private:
  struct sigaction interrupt_ {};
  struct sigaction terminate_ {};
};

std::uint64_t run_client(py::object user, const std::string& config_path, std::uint64_t samples,
                         std::uint64_t test_samples, std::vector<std::int64_t> input_shape,
                         std::int32_t num_classes, std::optional<std::string> layout_json,
                         const std::string& log_level) {
  spdlog::set_level(spdlog::level::from_str(log_level));
  auto options =
      client::parse_client_config_text(read_file(config_path), client::DataSection::forbidden);
  if (!options) {
    raise(fail(options.error().code,
               "config file '" + config_path + "': " + options.error().message));
  }
  std::optional<model::ParamLayout> layout;
  if (layout_json) {
    layout = layout_from(*layout_json);
  }
  auto site = std::make_shared<PythonSite>(
      std::move(user),
      client::SiteDataShape{samples, test_samples, std::move(input_shape), num_classes},
      std::move(layout));
  options->external = site;
  SavedSignalHandlers saved;
  boost::asio::io_context io;
  auto daemon = client::ClientDaemon::create(io, std::move(*options));
  if (!daemon) {
    raise(daemon.error());
  }
  {
    py::gil_scoped_release released;  // the daemon's threads take it for fit/evaluate only
    client::run_until_signalled(io, **daemon);
    daemon->reset();  // joins the worker thread, which may be waiting for the GIL
  }
  spdlog::info("stopped after {} round(s)", site->fits());
  return site->fits();
}

void save_parameters(const std::string& path, const std::string& layout_json,
                     const py::array_t<float, py::array::c_style | py::array::forcecast>& flat,
                     const std::string& metadata_json) {
  const auto layout = layout_from(layout_json);
  if (static_cast<std::size_t>(flat.size()) != layout.total()) {
    throw py::value_error("save_parameters: " + std::to_string(flat.size()) +
                          " values for a layout of " + std::to_string(layout.total()));
  }
  if (auto saved = model::save_params(path, layout, {flat.data(), layout.total()}, metadata_json);
      !saved) {
    raise(saved.error());
  }
}

py::tuple load_parameters(const std::string& path) {
  auto bundle = model::load_params(path);
  if (!bundle) {
    raise(bundle.error());
  }
  auto owned = std::make_unique<std::vector<float>>(std::move(bundle->params));
  const auto size = static_cast<py::ssize_t>(owned->size());
  float* data = owned->data();
  py::capsule base(owned.release(), [](void* p) { delete static_cast<std::vector<float>*>(p); });
  py::array_t<float> array({size}, {static_cast<py::ssize_t>(sizeof(float))}, data, base);
  return py::make_tuple(nlohmann::json(bundle->layout).dump(), array, bundle->metadata_json);
}

std::string layout_fingerprint(const std::string& layout_json) {
  return layout_from(layout_json).fingerprint_hex();
}

// A NumPy array that owns `values` (moved in, not copied), shaped `shape`.
template <class T, class Storage>
py::array_t<T> owning_array(Storage values, const T* (*data)(const Storage&),
                            std::vector<py::ssize_t> shape) {
  auto owned = std::make_unique<Storage>(std::move(values));
  const T* pointer = data(*owned);
  py::capsule base(owned.release(), [](void* p) { delete static_cast<Storage*>(p); });
  return py::array_t<T>(shape, py::detail::c_strides(shape, sizeof(T)), pointer, base);
}

py::array_t<float> samples_array(data::Dataset& set) {
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(set.size())};
  shape.insert(shape.end(), set.sample_shape.begin(), set.sample_shape.end());
  // Column-major sample_size x count: each sample's values are contiguous, i.e. C order
  // [count, H, W, C].
  return owning_array<float, Eigen::MatrixXf>(
      std::move(set.features), [](const Eigen::MatrixXf& m) { return m.data(); }, shape);
}

py::array_t<std::int32_t> labels_array(data::Dataset& set) {
  const auto count = static_cast<py::ssize_t>(set.labels.size());
  return owning_array<std::int32_t, std::vector<std::int32_t>>(
      std::move(set.labels), [](const std::vector<std::int32_t>& v) { return v.data(); }, {count});
}

py::tuple load_fashion_mnist(const std::string& dir) {
  auto loaded = data::load_fashion_mnist(dir.empty() ? data::default_fashion_mnist_dir() : dir);
  if (!loaded) {
    raise(loaded.error());
  }
  // In this order: samples_array reads a set's size from its labels, which labels_array
  // moves out (and a call's arguments have no order).
  auto train_x = samples_array(loaded->train);
  auto train_y = labels_array(loaded->train);
  auto test_x = samples_array(loaded->test);
  auto test_y = labels_array(loaded->test);
  return py::make_tuple(train_x, train_y, test_x, test_y);
}

py::list partition(
    const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& labels,
    const std::string& spec_text, std::int32_t num_classes, std::size_t clients,
    std::uint64_t seed) {
  auto spec = data::parse_partition_spec(spec_text);
  if (!spec) {
    raise(spec.error());
  }
  const std::span<const std::int32_t> values(labels.data(),
                                             static_cast<std::size_t>(labels.size()));
  // The partitioners assert their preconditions; a Python caller gets an exception instead.
  if (clients == 0 || values.size() < data::samples_needed(*spec, clients)) {
    throw py::value_error("partition " + spec_text + " of " + std::to_string(values.size()) +
                          " samples among " + std::to_string(clients) + " clients is impossible");
  }
  if (num_classes < 1 || std::any_of(values.begin(), values.end(),
                                     [&](std::int32_t y) { return y < 0 || y >= num_classes; })) {
    throw py::value_error("partition: every label must be in [0, num_classes)");
  }
  py::list out;
  for (auto& part : data::partition(*spec, values, num_classes, clients, seed)) {
    std::vector<std::int64_t> indices(part.begin(), part.end());
    const auto count = static_cast<py::ssize_t>(indices.size());
    out.append(owning_array<std::int64_t, std::vector<std::int64_t>>(
        std::move(indices), [](const std::vector<std::int64_t>& v) { return v.data(); }, {count}));
  }
  return out;
}

}  // namespace
}  // namespace fedcore::python

PYBIND11_MODULE(_native, m) {
  namespace fp = fedcore::python;
  m.doc() = "Fedcore's client library, bound for the Python SDK (use the fedcore package)";
  m.def("run_client", &fp::run_client, py::arg("client"), py::arg("config_path"),
        py::arg("samples"), py::arg("test_samples"), py::arg("input_shape"), py::arg("num_classes"),
        py::arg("layout_json"), py::arg("log_level"));
  m.def("save_parameters", &fp::save_parameters, py::arg("path"), py::arg("layout_json"),
        py::arg("flat"), py::arg("metadata_json") = "{}");
  m.def("load_parameters", &fp::load_parameters, py::arg("path"));
  m.def("layout_fingerprint", &fp::layout_fingerprint, py::arg("layout_json"));
  m.def("load_fashion_mnist", &fp::load_fashion_mnist, py::arg("dir") = "");
  m.def("partition", &fp::partition, py::arg("labels"), py::arg("spec"), py::arg("num_classes"),
        py::arg("clients"), py::arg("seed"));
}
