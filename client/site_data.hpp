// SiteData: a site's local data as the daemon uses it — its shape, known from the start
// (HELLO announces it), and its samples, which are either resident or loaded for each piece
// of work and released after it.
//
// A real site loads its data once and keeps it (resident). fedcore-sim's virtual sites
// load on demand: 100,000 registered sites each holding its samples would not fit in
// memory, and a round trains only the sites it samples (a Flower simulation builds each
// sampled client's data in its client_fn the same way).
//
// Thread safety: samples() may be called from any thread (training runs on a worker pool);
// a loader must therefore be safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shared/data/dataset.hpp"

namespace fedcore::client {

struct SiteDataShape {
  std::size_t train_samples = 0;
  std::size_t test_samples = 0;
  std::vector<std::int64_t> sample_shape;
  std::int32_t num_classes = 0;
};

class SiteData {
 public:
  using Loader = std::function<data::TrainTest()>;

  explicit SiteData(data::TrainTest resident);
  // REQUIRES: every call of `load` returns data of `shape`.
  SiteData(SiteDataShape shape, Loader load);

  const SiteDataShape& shape() const noexcept { return shape_; }
  // The resident samples, or a fresh load that lives as long as the caller holds it.
  std::shared_ptr<const data::TrainTest> samples() const;

 private:
  SiteDataShape shape_;
  std::shared_ptr<const data::TrainTest> resident_;
  Loader load_;
};

}  // namespace fedcore::client
