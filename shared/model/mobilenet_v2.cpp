#include "shared/model/mobilenet_v2.hpp"

#include <algorithm>
#include <string>

#include "shared/model/inverted_residual.hpp"
#include "shared/model/layers.hpp"
#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

namespace {

struct Stage {
  std::int64_t expansion, channels, blocks, stride;
};

// Table 2 of the paper (torchvision's inverted_residual_setting).
constexpr Stage kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                             {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};

}  // namespace

std::int64_t round_channels(double value) {
  constexpr std::int64_t kDivisor = 8;
  std::int64_t rounded = std::max<std::int64_t>(
      kDivisor, static_cast<std::int64_t>(value + kDivisor / 2.0) / kDivisor * kDivisor);
  if (double(rounded) < 0.9 * value) {
    rounded += kDivisor;
  }
  return rounded;
}

std::vector<std::unique_ptr<Layer>> mobilenet_v2_layers(const Shape& input_shape,
                                                        std::int64_t outputs,
                                                        const MobileNetV2Options& options) {
  FEDCORE_ASSERT(input_shape.size() == 3 && outputs >= 1 && options.width > 0.0f,
                 "mobilenet_v2_layers: bad input shape or options");
  std::vector<std::unique_ptr<Layer>> layers;
  auto add = [&](std::unique_ptr<Layer> layer, std::string name) -> const Shape& {
    layer->set_name(std::move(name));
    layers.push_back(std::move(layer));
    return layers.back()->output_shape();
  };
  const double width = options.width;
  const std::int64_t stem_stride = options.small_input_strides ? 1 : 2;
  Shape shape = add(std::make_unique<Conv2d>(input_shape, Conv2dOptions{round_channels(32 * width),
                                                                        3, stem_stride, 1, false}),
                    "stem");
  shape = add(std::make_unique<BatchNorm2d>(shape), "stem_bn");
  shape = add(std::make_unique<ReLU6>(shape), "stem_relu");
  int block = 0;
  for (std::size_t s = 0; s < std::size(kStages); ++s) {
    const Stage& stage = kStages[s];
    const std::int64_t stride = options.small_input_strides && s == 1 ? 1 : stage.stride;
    for (std::int64_t i = 0; i < stage.blocks; ++i) {
      shape = add(std::make_unique<InvertedResidual>(
                      shape, InvertedResidualOptions{round_channels(stage.channels * width),
                                                     i == 0 ? stride : 1, stage.expansion}),
                  "block" + std::to_string(++block));
    }
  }
  shape = add(std::make_unique<PointwiseConv2d>(shape, round_channels(1280 * std::max(1.0, width))),
              "head");
  shape = add(std::make_unique<BatchNorm2d>(shape), "head_bn");
  shape = add(std::make_unique<ReLU6>(shape), "head_relu");
  shape = add(std::make_unique<GlobalAvgPool2d>(shape), "pool");
  if (options.dropout > 0.0f) {
    shape = add(std::make_unique<Dropout>(shape, options.dropout), "dropout");
  }
  add(std::make_unique<Dense>(shape, outputs), "fc");
  return layers;
}

}  // namespace fedcore::model
