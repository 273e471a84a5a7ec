#include "sim/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

namespace fedcore::sim {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 70, kRight = 170, kTop = 40, kBottom = 55;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

// A tick label: short, without trailing zeros.
std::string tick_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", std::abs(v) < 1e-12 ? 0.0 : v);
  return text;
}

// About `count` round tick values covering [lo, hi]; steps of at least `min_step`.
std::vector<double> nice_ticks(double lo, double hi, int count, double min_step = 0) {
  std::vector<double> out;
  if (!(hi > lo)) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) {
      break;
    }
  }
  step = std::max(step, min_step);
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push_back(t);
  }
  return out;
}

std::string header(const std::string& title) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
         num(kWidth) + "\" height=\"" + num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " +
         num(kHeight) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n"
         "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
         "<text x=\"" +
         num(kWidth / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
         xml_escape(title) + "</text>\n";
}

std::string axis_labels(const std::string& x_label, const std::string& y_label) {
  return "<text x=\"" + num(kLeft + kPlotW / 2) + "\" y=\"" + num(kHeight - 12) +
         "\" text-anchor=\"middle\">" + xml_escape(x_label) + "</text>\n<text x=\"16\" y=\"" +
         num(kTop + kPlotH / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
         num(kTop + kPlotH / 2) + ")\">" + xml_escape(y_label) + "</text>\n";
}

std::string legend_entry(std::size_t row, const std::string& name, const std::string& color,
                         bool line, bool dashed) {
  const double x = kLeft + kPlotW + 15, y = kTop + 10 + 18 * double(row);
  std::string mark = line ? "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" +
                                num(x + 22) + "\" y2=\"" + num(y) + "\" stroke=\"" + color +
                                "\" stroke-width=\"2.5\"" +
                                (dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n"
                          : "<rect x=\"" + num(x + 5) + "\" y=\"" + num(y - 6) +
                                "\" width=\"12\" height=\"12\" fill=\"" + color + "\"/>\n";
  return mark + "<text x=\"" + num(x + 28) + "\" y=\"" + num(y + 4) + "\">" + xml_escape(name) +
         "</text>\n";
}

}  // namespace

const std::string& palette_color(std::size_t index) {
  static const std::array<std::string, 10> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                                       "#bcbd22", "#17becf"};
  return kPalette[index % kPalette.size()];
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_svg(const LineChart& chart) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const auto& s : chart.series) {
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
        continue;
      }
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (!std::isfinite(x_lo)) {
    x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  }
  if (chart.y_min < chart.y_max) {
    y_lo = chart.y_min;
    y_hi = chart.y_max;
  } else {
    const double pad = std::max(1e-9, (y_hi - y_lo) * 0.05);
    y_lo -= pad;
    y_hi += pad;
  }
  if (x_hi <= x_lo) {
    x_hi = x_lo + 1;
  }
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * kPlotW; };
  auto py = [&](double y) {
    return kTop + kPlotH - (std::clamp(y, y_lo, y_hi) - y_lo) / (y_hi - y_lo) * kPlotH;
  };

  std::string svg = header(chart.title);
  for (double t : nice_ticks(y_lo, y_hi, 6)) {
    svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py(t)) + "\" x2=\"" + num(kLeft + kPlotW) +
           "\" y2=\"" + num(py(t)) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" +
           tick_text(t) + "</text>\n";
  }
  for (double t : nice_ticks(x_lo, x_hi, 8, chart.integer_x ? 1.0 : 0.0)) {
    svg += "<line x1=\"" + num(px(t)) + "\" y1=\"" + num(kTop + kPlotH) + "\" x2=\"" + num(px(t)) +
           "\" y2=\"" + num(kTop + kPlotH + 5) + "\" stroke=\"black\"/>\n";
    svg += "<text x=\"" + num(px(t)) + "\" y=\"" + num(kTop + kPlotH + 19) +
           "\" text-anchor=\"middle\">" + tick_text(t) + "</text>\n";
  }
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kPlotW) +
         "\" height=\"" + num(kPlotH) + "\" fill=\"none\" stroke=\"black\"/>\n";
  svg += axis_labels(chart.x_label, chart.y_label);
  std::size_t row = 0;
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const auto& s = chart.series[k];
    const std::string color = s.color.empty() ? palette_color(k) : s.color;
    std::string points;
    std::size_t n = 0;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        points += num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
        ++n;
      }
    }
    if (n == 0) {
      continue;
    }
    svg += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"" +
           (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points + "\"/>\n";
    if (n <= 60) {
      for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
          svg += "<circle cx=\"" + num(px(s.x[i])) + "\" cy=\"" + num(py(s.y[i])) +
                 "\" r=\"2.5\" fill=\"" + color + "\"/>\n";
        }
      }
    }
    svg += legend_entry(row++, s.name, color, true, s.dashed);
  }
  return svg + "</svg>\n";
}

std::string render_svg(const StackedBars& chart) {
  double total_max = 0;
  for (const auto& bar : chart.values) {
    double total = 0;
    for (double v : bar) {
      total += std::max(0.0, v);
    }
    total_max = std::max(total_max, total);
  }
  if (total_max <= 0) {
    total_max = 1;
  }
  const auto ticks = nice_ticks(0, total_max, 6);
  const double y_hi = std::max(total_max, ticks.empty() ? total_max : ticks.back());
  auto py = [&](double y) { return kTop + kPlotH - y / y_hi * kPlotH; };
  const std::size_t bars = chart.values.size();
  const double slot = bars > 0 ? kPlotW / double(bars) : kPlotW;
  const double width = std::max(0.5, slot * 0.8);

  std::string svg = header(chart.title);
  for (double t : ticks) {
    svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py(t)) + "\" x2=\"" + num(kLeft + kPlotW) +
           "\" y2=\"" + num(py(t)) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" +
           tick_text(t) + "</text>\n";
  }
  // Label every bar when they fit, else about 20 of them.
  const std::size_t label_every = std::max<std::size_t>(1, (bars + 19) / 20);
  for (std::size_t b = 0; b < bars; ++b) {
    const double x = kLeft + slot * double(b) + (slot - width) / 2;
    double base = 0;
    for (std::size_t l = 0; l < chart.values[b].size(); ++l) {
      const double v = std::max(0.0, chart.values[b][l]);
      if (v <= 0) {
        continue;
      }
      svg += "<rect x=\"" + num(x) + "\" y=\"" + num(py(base + v)) + "\" width=\"" + num(width) +
             "\" height=\"" + num(py(base) - py(base + v)) + "\" fill=\"" + palette_color(l) +
             "\"/>\n";
      base += v;
    }
    if (b % label_every == 0 && b < chart.bar_labels.size()) {
      const double cx = kLeft + slot * (double(b) + 0.5);
      const double cy = kTop + kPlotH + 10;
      svg += "<text x=\"" + num(cx) + "\" y=\"" + num(cy) +
             "\" text-anchor=\"end\" font-size=\"10\" transform=\"rotate(-45 " + num(cx) + " " +
             num(cy) + ")\">" + xml_escape(chart.bar_labels[b]) + "</text>\n";
    }
  }
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kPlotW) +
         "\" height=\"" + num(kPlotH) + "\" fill=\"none\" stroke=\"black\"/>\n";
  // The rotated bar labels fill the space under the axis; the x label goes in the legend
  // column instead.
  svg += axis_labels("", chart.y_label);
  svg += "<text x=\"" + num(kLeft + kPlotW + 15) + "\" y=\"" + num(kTop + kPlotH) + "\">" +
         xml_escape(chart.x_label) + "</text>\n";
  for (std::size_t l = 0; l < chart.layer_names.size(); ++l) {
    svg += legend_entry(l, chart.layer_names[l], palette_color(l), false, false);
  }
  return svg + "</svg>\n";
}

}  // namespace fedcore::sim
