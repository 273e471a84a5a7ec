#include "sim/plots.hpp"

#include "sim/report.hpp"
#include "sim/svg_plot.hpp"

namespace fedcore::sim {
namespace {

constexpr std::size_t kMaxBars = 100;

Series federated_series(const FederatedResult& fed, bool accuracy, double x_scale,
                        const std::string& name) {
  Series s{name, {}, {}, "#1f77b4", false};
  for (const auto& r : fed.rounds) {
    s.x.push_back(double(r.round) * x_scale);
    s.y.push_back(accuracy ? r.accuracy : r.loss);
  }
  return s;
}

Series baseline_series(const BaselineResult& base, bool accuracy) {
  Series s{"centralized", {}, {}, "#d62728", true};
  for (const auto& e : base.curve) {
    s.x.push_back(e.epoch);
    s.y.push_back(accuracy ? e.accuracy : e.loss);
  }
  return s;
}

}  // namespace

result<std::vector<std::string>> write_plots(const std::string& out_dir, const SimOptions& o,
                                             const SimData* data, const FederatedResult* fed,
                                             const BaselineResult* base) {
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& svg) -> result<void> {
    if (auto w = write_text(out_dir + "/" + name, svg); !w) {
      return w.error();
    }
    written.push_back(name);
    return {};
  };
  const std::string what =
      o.dataset + ", " + o.partition + ", " + std::to_string(o.clients) + " clients";
  for (bool accuracy : {true, false}) {
    LineChart chart;
    chart.title = std::string(accuracy ? "Test accuracy" : "Test loss") + " (" + what + ")";
    chart.x_label = base != nullptr ? "round (federated) / epoch (centralized)" : "round";
    chart.y_label = accuracy ? "accuracy" : "loss";
    chart.integer_x = true;
    if (fed != nullptr) {
      chart.series.push_back(federated_series(*fed, accuracy, 1.0, "federated"));
    }
    if (base != nullptr) {
      chart.series.push_back(baseline_series(*base, accuracy));
    }
    if (auto w = write(accuracy ? "accuracy.svg" : "loss.svg", render_svg(chart)); !w) {
      return w.error();
    }
  }
  if (fed != nullptr && base != nullptr) {
    // One round passes over (sampled / clients) x local_epochs of the data.
    const double passes = passes_per_round(o);
    LineChart chart;
    chart.title = "Federated vs centralized (" + what + ")";
    chart.x_label = "passes over the training data (epochs)";
    chart.y_label = "test accuracy";
    chart.series.push_back(federated_series(*fed, true, passes, "federated (" + o.strategy + ")"));
    chart.series.push_back(baseline_series(*base, true));
    if (auto w = write("federated_vs_centralized.svg", render_svg(chart)); !w) {
      return w.error();
    }
  }
  if (fed != nullptr && !fed->rounds.empty() && fed->rounds.back().epsilon) {
    // What the privacy budget bought: accuracy against the epsilon spent so far.
    LineChart chart;
    chart.title = "Accuracy against privacy spent (" + what + ", dp " + o.dp + ")";
    chart.x_label = "epsilon spent (delta " + std::to_string(o.delta) + ")";
    chart.y_label = "test accuracy";
    Series s{"federated (" + o.dp + ")", {}, {}, "#1f77b4", false};
    for (const auto& r : fed->rounds) {
      if (r.epsilon) {
        s.x.push_back(*r.epsilon);
        s.y.push_back(r.accuracy);
      }
    }
    chart.series.push_back(std::move(s));
    if (auto w = write("accuracy_vs_epsilon.svg", render_svg(chart)); !w) {
      return w.error();
    }
  }
  if (data != nullptr && !data->label_counts.empty()) {
    StackedBars chart;
    const std::size_t shown = std::min(kMaxBars, data->label_counts.size());
    chart.title = "Label distribution, " + o.partition +
                  (shown < data->label_counts.size()
                       ? " (first " + std::to_string(shown) + " of " +
                             std::to_string(data->label_counts.size()) + " clients)"
                       : "");
    chart.x_label = "bars: clients";
    chart.y_label = "training samples";
    for (std::size_t c = 0; c < shown; ++c) {
      chart.bar_labels.push_back(client_id(c, o.clients));
      std::vector<double> layers(data->label_counts[c].begin(), data->label_counts[c].end());
      chart.values.push_back(std::move(layers));
    }
    const auto& names = data->all.train.class_names;
    const auto classes = static_cast<std::size_t>(data->all.train.num_classes);
    for (std::size_t k = 0; k < classes; ++k) {
      chart.layer_names.push_back(k < names.size() ? names[k] : "class " + std::to_string(k));
    }
    if (auto w = write("label_distribution.svg", render_svg(chart)); !w) {
      return w.error();
    }
  }
  return written;
}

}  // namespace fedcore::sim
