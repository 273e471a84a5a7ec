// MobileNetV2 (Sandler et al. 2018) for small images, as layers of the flat-parameter model.
//
// torchvision's network (features: a 3x3 stem convolution, 17 inverted-residual blocks in
// 7 stages (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1)
// (6,160,3,2) (6,320,1,1), a 1x1 convolution to 1280 channels; then global average
// pooling, dropout and a linear classifier), with the CIFAR change for 32x32 inputs that
// keeps the stem and the second stage at stride 1 (so the last feature map is 4x4, not
// 1x1). Channel counts follow torchvision's width multiplier: c * width rounded to a
// multiple of 8 (never below 8, never more than 10% down); the last convolution keeps 1280
// unless width > 1.
//
// Parameter counts equal torchvision's `mobilenet_v2(num_classes=10, width_mult=w)` exactly
// (the stride change moves no parameter): 2,236,682 at width 1, 700,490 at width 0.5
// (tests/model/mobilenet_v2_test.cpp checks them), and every tensor maps to a torchvision
// name (docs/models.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shared/model/layer.hpp"

namespace fedcore::model {

struct MobileNetV2Options {
  float width = 1.0f;    // width multiplier, > 0
  float dropout = 0.2f;  // before the classifier, as torchvision
  // Stem and second stage at stride 1 (for 32x32 inputs); false: ImageNet strides.
  bool small_input_strides = true;
};

// torchvision's _make_divisible(value, 8).
std::int64_t round_channels(double value);

// The layers, named "stem", "stem_bn", "stem_relu", "block1" ... "block17", "head",
// "head_bn", "head_relu", "pool", "dropout", "fc". REQUIRES: input_shape is {H, W, C} with
// H, W >= 1, outputs >= 1, options.width > 0.
std::vector<std::unique_ptr<Layer>> mobilenet_v2_layers(const Shape& input_shape,
                                                        std::int64_t outputs,
                                                        const MobileNetV2Options& options);

}  // namespace fedcore::model
