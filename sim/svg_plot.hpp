// A small SVG writer for the simulator's plots: line charts (one or more series over a
// shared x axis) and stacked bar charts. The output is a self-contained SVG 1.1 document
// with axes, ticks, a title and a legend; no scripts, no external resources.
#pragma once

#include <string>
#include <vector>

namespace fedcore::sim {

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // same length as x
  std::string color;      // any SVG colour; "" picks from the palette
  bool dashed = false;
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  // Fixed y range when y_min < y_max; otherwise fitted to the data.
  double y_min = 0;
  double y_max = 0;
  bool integer_x = false;  // x ticks on whole numbers only (rounds, epochs)
};

struct StackedBars {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> bar_labels;      // one per bar (e.g. client ids)
  std::vector<std::string> layer_names;     // one per stacked layer (e.g. class names)
  std::vector<std::vector<double>> values;  // [bar][layer], non-negative
};

// The SVG document of a chart. Series with fewer than one point are skipped; an empty
// chart still renders its axes and title.
std::string render_svg(const LineChart& chart);
std::string render_svg(const StackedBars& chart);

// The default palette (10 distinguishable colours), cycled.
const std::string& palette_color(std::size_t index);

// Escapes &, <, >, " for SVG text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace fedcore::sim
