// Scaling report arithmetic and the SVG it draws.
#include "distributed/report.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fedcore::distributed {
namespace {

nlohmann::json run(int world, double rate, double accuracy, double comm_share) {
  return {{"world", world},
          {"samples_per_second", rate},
          {"test_accuracy", accuracy},
          {"ranks", nlohmann::json::array({{{"comm_share", comm_share}}})}};
}

TEST(ScalingReport, SpeedupEfficiencyAndAccuracyAreRelativeToTheSmallestWorld) {
  const auto report =
      scaling_report({run(4, 300, 0.80, 0.3), run(1, 100, 0.85, 0.0), run(2, 180, 0.84, 0.2)});
  ASSERT_EQ(report["runs"].size(), 3u);
  EXPECT_EQ(report["baseline_world"], 1);
  const auto& two = report["runs"][1];
  EXPECT_EQ(two["world"], 2);
  EXPECT_DOUBLE_EQ(two["speedup"].get<double>(), 1.8);
  EXPECT_DOUBLE_EQ(two["efficiency"].get<double>(), 0.9);
  EXPECT_NEAR(two["accuracy_delta_vs_baseline"].get<double>(), -0.01, 1e-12);
  EXPECT_DOUBLE_EQ(report["runs"][2]["efficiency"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(report["runs"][2]["max_comm_share"].get<double>(), 0.3);
  const std::string svg = scaling_svg(report);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("speedup 1.80x"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace fedcore::distributed
