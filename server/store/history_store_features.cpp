// HistoryStore: a run's federated feature scale (run_feature_scales, docs/schema.md).
#include <algorithm>
#include <cmath>

#include "server/store/detail/rows.hpp"
#include "server/store/history_store.hpp"

namespace fedcore::store {
using namespace detail;

namespace {

result<void> validate_scale(const FeatureScaleRecord& scale) {
  if (scale.mean.empty() || scale.mean.size() != scale.stddev.size()) {
    return fail(errc::invalid_argument,
                cat("a scale needs one mean and one stddev per feature (got ",
                    static_cast<std::int64_t>(scale.mean.size()), " and ",
                    static_cast<std::int64_t>(scale.stddev.size()), ")"));
  }
  for (std::size_t f = 0; f < scale.mean.size(); ++f) {
    if (!std::isfinite(scale.mean[f]) || !std::isfinite(scale.stddev[f]) ||
        !(scale.stddev[f] > 0)) {
      return fail(errc::invalid_argument,
                  cat("feature ", static_cast<std::int64_t>(f),
                      ": the mean must be finite and the stddev finite and positive"));
    }
  }
  if (scale.sites < 1) {
    return fail(errc::invalid_argument, cat("sites is ", scale.sites, ", not positive"));
  }
  return require_non_negative(scale.samples, "samples");
}

// A JSON array of finite numbers, as stored by save_feature_scale.
result<std::vector<double>> numbers_of(const std::string& text, std::size_t features) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  std::vector<double> out;
  if (j.is_array() && j.size() == features) {
    for (const auto& x : j) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) {
        break;
      }
      out.push_back(x.get<double>());
    }
  }
  if (out.size() != features) {
    return fail(errc::data_loss, cat("a stored scale is not ", static_cast<std::int64_t>(features),
                                     " finite numbers: ", in_quotes(text)));
  }
  return out;
}

}  // namespace

result<void> HistoryStore::save_feature_scale(const FeatureScaleRecord& scale) {
  const std::string what = cat("cannot store the feature scale of run ", scale.run_id);
  if (auto ok = validate_scale(scale); !ok) {
    return in(what, ok.error());
  }
  if (auto known = require_run(db_, scale.run_id, what); !known) {
    return known.error();
  }
  auto s = db_.prepare(
      "INSERT INTO run_feature_scales (run_id, features, mean_json, std_json, sites, samples, "
      "                                created_ms) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!s) {
    return in(what, s.error());
  }
  // nlohmann writes the shortest text that reads back as the same double.
  s->bind_int64(1, scale.run_id)
      .bind_int64(2, static_cast<std::int64_t>(scale.mean.size()))
      .bind_text(3, nlohmann::json(scale.mean).dump())
      .bind_text(4, nlohmann::json(scale.stddev).dump())
      .bind_int64(5, scale.sites)
      .bind_int64(6, scale.samples)
      .bind_int64(7, scale.created_ms);
  if (auto ok = s->run(); !ok) {
    if (ok.error().code == errc::already_exists) {
      return fail(errc::already_exists, cat(what, ": the run has one already"));
    }
    return in(what, ok.error());
  }
  return {};
}

result<std::optional<FeatureScaleRecord>> HistoryStore::feature_scale(std::int64_t run_id) {
  const std::string what = cat("cannot read the feature scale of run ", run_id);
  auto rows = first_row_of_run<FeatureScaleRecord>(
      db_, run_id, what,
      "SELECT run_id, features, mean_json, std_json, sites, samples, created_ms "
      "FROM run_feature_scales WHERE run_id = ?1",
      [](const Statement& s) -> result<FeatureScaleRecord> {
        FeatureScaleRecord r;
        r.run_id = s.column_int64(0);
        const auto features =
            static_cast<std::size_t>(std::max<std::int64_t>(0, s.column_int64(1)));
        auto mean = numbers_of(s.column_text(2), features);
        auto stddev = numbers_of(s.column_text(3), features);
        if (!mean || !stddev) {
          return !mean ? mean.error() : stddev.error();
        }
        r.mean = std::move(*mean);
        r.stddev = std::move(*stddev);
        r.sites = s.column_int64(4);
        r.samples = s.column_int64(5);
        r.created_ms = s.column_int64(6);
        return r;
      });
  if (!rows) {
    return rows.error();
  }
  return rows;
}

}  // namespace fedcore::store
