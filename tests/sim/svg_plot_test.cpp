#include "sim/svg_plot.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fedcore::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(SvgPlot, LineChartHasOnePolylinePerSeriesAndALegend) {
  LineChart chart;
  chart.title = "Accuracy <test> & more";
  chart.x_label = "round";
  chart.y_label = "accuracy";
  chart.series.push_back({"federated", {1, 2, 3}, {0.5, 0.7, 0.8}, "", false});
  chart.series.push_back({"centralized", {1, 2, 3}, {0.6, 0.8, 0.85}, "", true});
  const auto svg = render_svg(chart);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "<circle"), 6u);
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  EXPECT_THAT(svg, HasSubstr("Accuracy &lt;test&gt; &amp; more"));
  EXPECT_THAT(svg, HasSubstr(">federated<"));
  EXPECT_THAT(svg, HasSubstr(">centralized<"));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_THAT(svg, Not(HasSubstr("inf")));
}

TEST(SvgPlot, PointsMapIntoThePlotArea) {
  LineChart chart;
  chart.series.push_back({"s", {0, 10}, {0, 1}, "#000000", false});
  chart.y_min = 0;
  chart.y_max = 1;
  const auto svg = render_svg(chart);
  // Left edge 70, plot width 480, top 40, height 325 (see svg_plot.cpp's layout).
  EXPECT_THAT(svg, HasSubstr("points=\"70.00,365.00 550.00,40.00 \""));
}

TEST(SvgPlot, EmptyAndNonFiniteInputsStillRender) {
  LineChart empty;
  empty.title = "nothing";
  EXPECT_THAT(render_svg(empty), HasSubstr("</svg>"));
  LineChart odd;
  odd.series.push_back({"s", {1, 2, 3}, {0.5, std::nan(""), 0.7}, "", false});
  const auto svg = render_svg(odd);
  EXPECT_EQ(count(svg, "<circle"), 2u);
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
}

TEST(SvgPlot, StackedBarsDrawOneRectPerNonZeroCell) {
  StackedBars chart;
  chart.title = "labels";
  chart.bar_labels = {"site-001", "site-002"};
  chart.layer_names = {"a", "b", "c"};
  chart.values = {{3, 0, 1}, {2, 2, 2}};
  const auto svg = render_svg(chart);
  // 5 non-zero cells, 3 legend swatches, background and frame.
  EXPECT_EQ(count(svg, "<rect"), 5u + 3u + 2u);
  EXPECT_THAT(svg, HasSubstr(">site-002<"));
  EXPECT_THAT(svg, HasSubstr(">c<"));
}

}  // namespace
}  // namespace fedcore::sim
