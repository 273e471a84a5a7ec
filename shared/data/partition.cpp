#include "shared/data/partition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "shared/util/assert.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::data {
namespace {

constexpr std::size_t kMaxPerClient = 1'000'000;  // shards or samples per client

std::vector<std::size_t> iota_indices(std::size_t count) {
  std::vector<std::size_t> indices(count);
  std::iota(indices.begin(), indices.end(), std::size_t{0});
  return indices;
}

void check_labels(std::span<const std::int32_t> labels, std::int32_t num_classes) {
  for (auto label : labels) {
    FEDCORE_ASSERT(label >= 0 && label < num_classes, "partition: label out of range");
  }
}

void sort_each(Partitions& parts) {
  for (auto& part : parts) {
    std::sort(part.begin(), part.end());
  }
}

bool any_empty(const Partitions& parts) {
  return std::any_of(parts.begin(), parts.end(), [](const auto& part) { return part.empty(); });
}

// One Dirichlet draw for every class: class members are cut at the cumulative proportions.
Partitions draw_dirichlet(std::vector<std::vector<std::size_t>>& by_class, std::size_t clients,
                          double alpha, Rng& rng) {
  Partitions parts(clients);
  std::vector<double> weights(clients);
  for (auto& members : by_class) {
    rng.shuffle(std::span(members));
    double sum = 0;
    for (auto& weight : weights) {
      weight = rng.gamma(alpha);
      sum += weight;
    }
    const std::size_t n = members.size();
    if (!(sum > 0) || !std::isfinite(sum)) {
      // Every gamma variate underflowed (tiny alpha): the Dirichlet limit puts the whole
      // class on one client.
      auto& part = parts[rng.below(clients)];
      part.insert(part.end(), members.begin(), members.end());
      continue;
    }
    double cumulative = 0;
    std::size_t start = 0;
    for (std::size_t j = 0; j < clients; ++j) {
      cumulative += weights[j];
      std::size_t end = n;
      if (j + 1 < clients) {
        const double cut = std::floor(cumulative / sum * static_cast<double>(n));
        end = std::clamp(static_cast<std::size_t>(std::max(cut, 0.0)), start, n);
      }
      parts[j].insert(parts[j].end(), members.begin() + static_cast<std::ptrdiff_t>(start),
                      members.begin() + static_cast<std::ptrdiff_t>(end));
      start = end;
    }
  }
  return parts;
}

result<double> parse_alpha(std::string_view spec, std::string_view text) {
  const std::string prefix = "partition spec '" + std::string(spec) + "': ";
  double alpha = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), alpha);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return fail(errc::invalid_argument,
                prefix + "alpha '" + std::string(text) + "' is not a number");
  }
  if (!std::isfinite(alpha) || !(alpha > 0)) {
    return fail(errc::invalid_argument, prefix + "alpha must be a finite number > 0");
  }
  return alpha;
}

// `what`: "shards per client" or "samples per client".
result<std::size_t> parse_count(std::string_view spec, std::string_view text,
                                const std::string& what) {
  const std::string prefix = "partition spec '" + std::string(spec) + "': ";
  std::uint64_t k = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size()) {
    return fail(errc::invalid_argument,
                prefix + what + " '" + std::string(text) + "' is not a whole number");
  }
  if (ec == std::errc::result_out_of_range || k == 0 || k > kMaxPerClient) {
    return fail(errc::invalid_argument,
                prefix + what + " must be in 1.." + std::to_string(kMaxPerClient));
  }
  return static_cast<std::size_t>(k);
}

std::string pad_left(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

}  // namespace

Partitions partition_iid(std::span<const std::int32_t> labels, std::size_t clients,
                         std::uint64_t seed) {
  const std::size_t n = labels.size();
  FEDCORE_ASSERT(clients > 0 && clients <= n, "partition_iid: need 0 < clients <= samples");
  std::vector<std::size_t> order = iota_indices(n);
  Rng rng(seed);
  rng.shuffle(std::span(order));
  Partitions parts(clients);
  const std::size_t base = n / clients;
  const std::size_t extra = n % clients;
  std::size_t start = 0;
  for (std::size_t c = 0; c < clients; ++c) {
    const std::size_t size = base + (c < extra ? 1 : 0);
    parts[c].assign(order.begin() + static_cast<std::ptrdiff_t>(start),
                    order.begin() + static_cast<std::ptrdiff_t>(start + size));
    start += size;
  }
  sort_each(parts);
  return parts;
}

Partitions partition_dirichlet(std::span<const std::int32_t> labels, std::int32_t num_classes,
                               std::size_t clients, double alpha, std::uint64_t seed) {
  FEDCORE_ASSERT(clients > 0 && clients <= labels.size(),
                 "partition_dirichlet: need 0 < clients <= samples");
  FEDCORE_ASSERT(alpha > 0 && std::isfinite(alpha),
                 "partition_dirichlet: alpha must be finite and > 0");
  check_labels(labels, num_classes);
  std::vector<std::vector<std::size_t>> by_class(static_cast<std::size_t>(num_classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    by_class[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  Rng rng(seed);
  Partitions parts;
  // The usual "min_size" loop (Yurochkin et al. 2019, NIID-Bench): redraw until no client
  // is empty, since an empty client cannot train; bounded because at small alpha with many
  // clients a full draw may essentially never succeed.
  for (int draw = 0; draw < kDirichletMaxDraws; ++draw) {
    parts = draw_dirichlet(by_class, clients, alpha, rng);
    if (!any_empty(parts)) {
      break;
    }
  }
  // Deterministic repair: clients <= samples, so while one client is empty the largest
  // holds at least two and can spare one.
  for (auto& part : parts) {
    if (part.empty()) {
      auto& largest =
          *std::max_element(parts.begin(), parts.end(),
                            [](const auto& a, const auto& b) { return a.size() < b.size(); });
      part.push_back(largest.back());
      largest.pop_back();
    }
  }
  sort_each(parts);
  return parts;
}

Partitions partition_like(std::span<const std::int32_t> labels, std::int32_t num_classes,
                          const std::vector<std::vector<std::size_t>>& counts, std::uint64_t seed) {
  FEDCORE_ASSERT(!counts.empty(), "partition_like: no clients");
  check_labels(labels, num_classes);
  const auto classes = static_cast<std::size_t>(num_classes);
  for (const auto& row : counts) {
    FEDCORE_ASSERT(row.size() == classes, "partition_like: a count row is not num_classes long");
  }
  std::vector<std::vector<std::size_t>> by_class(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    by_class[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  Rng rng(seed);
  Partitions parts(counts.size());
  for (std::size_t k = 0; k < classes; ++k) {
    auto& members = by_class[k];
    rng.shuffle(std::span(members));
    std::size_t trained = 0;
    for (const auto& row : counts) {
      trained += row[k];
    }
    if (trained == 0) {
      continue;
    }
    // Largest remainders: floor shares first, then one more to the largest fractions.
    std::vector<std::size_t> share(counts.size());
    std::vector<std::pair<double, std::size_t>> remainders;
    std::size_t dealt = 0;
    for (std::size_t c = 0; c < counts.size(); ++c) {
      const double exact = double(members.size()) * double(counts[c][k]) / double(trained);
      share[c] = static_cast<std::size_t>(exact);
      dealt += share[c];
      remainders.emplace_back(-(exact - double(share[c])), c);
    }
    std::sort(remainders.begin(), remainders.end());
    for (std::size_t i = 0; dealt < members.size(); ++i, ++dealt) {
      FEDCORE_ASSERT(i < remainders.size(), "partition_like: shares do not add up");
      ++share[remainders[i].second];
    }
    std::size_t at = 0;
    for (std::size_t c = 0; c < counts.size(); ++c) {
      parts[c].insert(parts[c].end(), members.begin() + static_cast<std::ptrdiff_t>(at),
                      members.begin() + static_cast<std::ptrdiff_t>(at + share[c]));
      at += share[c];
    }
  }
  sort_each(parts);
  return parts;
}

Partitions partition_shards(std::span<const std::int32_t> labels, std::size_t clients,
                            std::size_t shards_per_client, std::uint64_t seed) {
  const std::size_t n = labels.size();
  FEDCORE_ASSERT(clients > 0 && shards_per_client > 0,
                 "partition_shards: clients and shards per client must be > 0");
  FEDCORE_ASSERT(shards_per_client <= n / clients,
                 "partition_shards: need clients * shards_per_client <= samples");
  Rng rng(seed);
  // Shuffle before the stable sort so which samples of a class share a shard is random.
  std::vector<std::size_t> order = iota_indices(n);
  rng.shuffle(std::span(order));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return labels[a] < labels[b]; });

  const std::size_t shards = clients * shards_per_client;
  const std::size_t base = n / shards;
  const std::size_t extra = n % shards;
  const auto shard_start = [&](std::size_t s) { return s * base + std::min(s, extra); };
  std::vector<std::size_t> shard_order = iota_indices(shards);
  rng.shuffle(std::span(shard_order));

  Partitions parts(clients);
  for (std::size_t c = 0; c < clients; ++c) {
    for (std::size_t k = 0; k < shards_per_client; ++k) {
      const std::size_t s = shard_order[c * shards_per_client + k];
      parts[c].insert(parts[c].end(), order.begin() + static_cast<std::ptrdiff_t>(shard_start(s)),
                      order.begin() + static_cast<std::ptrdiff_t>(shard_start(s + 1)));
    }
  }
  sort_each(parts);
  return parts;
}

Partitions partition_sampled(std::size_t samples, std::size_t clients,
                             std::size_t samples_per_client, std::uint64_t seed) {
  FEDCORE_ASSERT(clients > 0 && samples_per_client > 0 && samples_per_client <= samples,
                 "partition_sampled: need clients > 0 and 0 < samples per client <= samples");
  Rng rng(seed);
  Partitions parts(clients);
  for (auto& part : parts) {
    // Floyd's algorithm: k distinct indices in k draws, whatever the ratio of k to n.
    part.reserve(samples_per_client);
    for (std::size_t j = samples - samples_per_client; j < samples; ++j) {
      const std::size_t t = rng.below(j + 1);
      const bool taken = std::find(part.begin(), part.end(), t) != part.end();
      part.push_back(taken ? j : t);
    }
    std::sort(part.begin(), part.end());
  }
  return parts;
}

std::string PartitionSpec::to_string() const {
  switch (kind) {
    case PartitionKind::iid:
      return "iid";
    case PartitionKind::dirichlet: {
      char text[32];
      const auto [end, ec] = std::to_chars(text, text + sizeof text, alpha);
      FEDCORE_ASSERT(ec == std::errc(), "PartitionSpec::to_string: alpha did not fit");
      return "dirichlet:" + std::string(text, end);
    }
    case PartitionKind::shards:
      return "shards:" + std::to_string(shards_per_client);
    case PartitionKind::sample:
      return "sample:" + std::to_string(samples_per_client);
  }
  FEDCORE_ASSERT(false, "PartitionSpec::to_string: unknown kind");
  return {};
}

result<PartitionSpec> parse_partition_spec(std::string_view text) {
  const std::string expected = "expected iid, dirichlet:<alpha>, shards:<k> or sample:<k>";
  if (text.empty()) {
    return fail(errc::invalid_argument, "partition spec is empty; " + expected);
  }
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const bool has_parameter = colon != std::string_view::npos;
  const std::string_view parameter = has_parameter ? text.substr(colon + 1) : std::string_view{};
  const std::string prefix = "partition spec '" + std::string(text) + "': ";

  PartitionSpec spec;
  if (kind == "iid") {
    if (has_parameter) {
      return fail(errc::invalid_argument, prefix + "iid takes no parameter");
    }
    spec.kind = PartitionKind::iid;
    return spec;
  }
  if (kind == "dirichlet") {
    if (!has_parameter) {
      return fail(errc::invalid_argument, prefix + "dirichlet needs alpha, e.g. dirichlet:0.5");
    }
    auto alpha = parse_alpha(text, parameter);
    if (!alpha) {
      return alpha.error();
    }
    spec.kind = PartitionKind::dirichlet;
    spec.alpha = *alpha;
    return spec;
  }
  if (kind == "shards") {
    if (!has_parameter) {
      return fail(errc::invalid_argument, prefix + "shards needs shards per client, e.g. shards:2");
    }
    auto k = parse_count(text, parameter, "shards per client");
    if (!k) {
      return k.error();
    }
    spec.kind = PartitionKind::shards;
    spec.shards_per_client = *k;
    return spec;
  }
  if (kind == "sample") {
    if (!has_parameter) {
      return fail(errc::invalid_argument,
                  prefix + "sample needs samples per client, e.g. sample:60");
    }
    auto k = parse_count(text, parameter, "samples per client");
    if (!k) {
      return k.error();
    }
    spec.kind = PartitionKind::sample;
    spec.samples_per_client = *k;
    return spec;
  }
  return fail(errc::invalid_argument,
              prefix + "unknown kind '" + std::string(kind) + "'; " + expected);
}

std::size_t samples_needed(const PartitionSpec& spec, std::size_t clients) noexcept {
  switch (spec.kind) {
    case PartitionKind::shards:
      return clients * spec.shards_per_client;
    case PartitionKind::sample:
      return spec.samples_per_client;
    case PartitionKind::iid:
    case PartitionKind::dirichlet:
      break;
  }
  return clients;
}

Partitions partition(const PartitionSpec& spec, std::span<const std::int32_t> labels,
                     std::int32_t num_classes, std::size_t clients, std::uint64_t seed) {
  switch (spec.kind) {
    case PartitionKind::iid:
      return partition_iid(labels, clients, seed);
    case PartitionKind::dirichlet:
      return partition_dirichlet(labels, num_classes, clients, spec.alpha, seed);
    case PartitionKind::shards:
      return partition_shards(labels, clients, spec.shards_per_client, seed);
    case PartitionKind::sample:
      return partition_sampled(labels.size(), clients, spec.samples_per_client, seed);
  }
  FEDCORE_ASSERT(false, "partition: unknown kind");
  return {};
}

std::vector<std::vector<std::size_t>> label_count_table(const Partitions& partitions,
                                                        std::span<const std::int32_t> labels,
                                                        std::int32_t num_classes) {
  FEDCORE_ASSERT(num_classes >= 0, "label_count_table: negative num_classes");
  std::vector<std::vector<std::size_t>> counts(
      partitions.size(), std::vector<std::size_t>(static_cast<std::size_t>(num_classes), 0));
  for (std::size_t c = 0; c < partitions.size(); ++c) {
    for (std::size_t index : partitions[c]) {
      FEDCORE_ASSERT(index < labels.size(), "label_count_table: index out of range");
      const std::int32_t label = labels[index];
      FEDCORE_ASSERT(label >= 0 && label < num_classes, "label_count_table: label out of range");
      ++counts[c][static_cast<std::size_t>(label)];
    }
  }
  return counts;
}

std::string format_label_counts(const std::vector<std::vector<std::size_t>>& counts,
                                std::span<const std::string> class_names) {
  const std::size_t classes = counts.empty() ? class_names.size() : counts.front().size();
  FEDCORE_ASSERT(class_names.empty() || class_names.size() == classes,
                 "format_label_counts: one class name per class");
  // Rows of cells: a header, one per client, then the totals.
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"client"};
  for (std::size_t k = 0; k < classes; ++k) {
    header.push_back(class_names.empty() ? std::to_string(k) : class_names[k]);
  }
  header.push_back("total");
  rows.push_back(std::move(header));
  std::vector<std::size_t> totals(classes + 1, 0);
  for (std::size_t c = 0; c < counts.size(); ++c) {
    FEDCORE_ASSERT(counts[c].size() == classes, "format_label_counts: ragged table");
    std::vector<std::string> row{std::to_string(c)};
    std::size_t sum = 0;
    for (std::size_t k = 0; k < classes; ++k) {
      row.push_back(std::to_string(counts[c][k]));
      sum += counts[c][k];
      totals[k] += counts[c][k];
    }
    row.push_back(std::to_string(sum));
    totals[classes] += sum;
    rows.push_back(std::move(row));
  }
  std::vector<std::string> total_row{"total"};
  for (auto total : totals) {
    total_row.push_back(std::to_string(total));
  }
  rows.push_back(std::move(total_row));

  std::vector<std::size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      out += (i == 0 ? "" : "  ") + pad_left(row[i], widths[i]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace fedcore::data
