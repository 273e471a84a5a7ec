// Seeded stratified train/test split: every class is split in the same proportion, so a
// small test set still has each class in its share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shared/data/dataset.hpp"

namespace fedcore::data {

struct Split {
  Dataset train;
  Dataset test;
};

struct SplitIndices {
  std::vector<std::size_t> train;  // ascending
  std::vector<std::size_t> test;   // ascending
};

// For each class in turn (0, 1, ...), shuffles that class's sample indices with one
// fedcore::Rng seeded by `seed` and sends the first round(test_fraction * class count) to
// test, the rest to train. Every index lands in exactly one part; the result depends only on
// the labels, the fraction and the seed.
// REQUIRES: 0 <= test_fraction <= 1; every label in [0, num_classes).
SplitIndices stratified_split_indices(std::span<const std::int32_t> labels,
                                      std::int32_t num_classes, double test_fraction,
                                      std::uint64_t seed);

// The samples of stratified_split_indices(data.labels, data.num_classes, ...), in their
// original order, with the dataset's shape, class and feature names.
Split stratified_split(const Dataset& data, double test_fraction, std::uint64_t seed);

}  // namespace fedcore::data
