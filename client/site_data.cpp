#include "client/site_data.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::client {
namespace {

SiteDataShape shape_of(const data::TrainTest& d) {
  return {d.train.size(), d.test.size(), d.train.sample_shape, d.train.num_classes};
}

}  // namespace

SiteData::SiteData(data::TrainTest resident)
    : shape_(shape_of(resident)),
      resident_(std::make_shared<const data::TrainTest>(std::move(resident))) {}

SiteData::SiteData(SiteDataShape shape, Loader load)
    : shape_(std::move(shape)), load_(std::move(load)) {}

std::shared_ptr<const data::TrainTest> SiteData::samples() const {
  if (resident_) {
    return resident_;
  }
  auto loaded = std::make_shared<const data::TrainTest>(load_());
  // A loader that disagrees with the shape announced in HELLO is a programming error: the
  // server admitted this site for that shape.
  FEDCORE_ASSERT(
      loaded->train.size() == shape_.train_samples && loaded->test.size() == shape_.test_samples,
      "SiteData: the loader's data differs from the shape it announced");
  return loaded;
}

}  // namespace fedcore::client
