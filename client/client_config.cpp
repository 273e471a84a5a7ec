#include "client/client_config.hpp"

#include <limits>

#include <nlohmann/json.hpp>

#include "shared/data/partition.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::client {
namespace {

using nlohmann::json;

const JsonPath kRoot("client config");

// Paths of files: non-empty, bounded, no control characters.
constexpr StringRule kPath{.min_size = 1, .max_size = 4096};

result<tls::ClientTlsConfig> parse_tls(const json& j, const JsonPath& at) {
  StrictObject o(j, at, {"ca", "cert", "key"});
  tls::ClientTlsConfig tls;
  for (auto [key, target] : {std::pair{"ca", &tls.ca_file}, std::pair{"cert", &tls.cert_file},
                             std::pair{"key", &tls.key_file}}) {
    if (o.ok() && !o.has(key)) {
      o.reject(key, "is required (a PEM file)");
    }
    o.string(key, *target, kPath);
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return tls;
}

result<DataSource> parse_data(const json& j, const JsonPath& at) {
  StrictObject o(j, at,
                 {"format", "path", "label_column", "test_fraction", "split_seed", "partition",
                  "partition_clients", "partition_index", "partition_seed"});
  DataSource d;
  o.choice("format", d.format, {"csv", "fashion-mnist", "cifar10"});
  o.string("path", d.path, kPath);
  if (o.ok() && d.format != "fashion-mnist" && d.path.empty()) {
    o.reject("path", "is required for format \"" + d.format + "\"");
  }
  if (o.ok() && d.format != "csv") {
    // These formats ship their own test set and name their labels: the keys would be ignored.
    for (const char* key : {"label_column", "test_fraction", "split_seed"}) {
      if (o.has(key)) {
        o.reject(key, "applies only to format \"csv\"");
      }
    }
  }
  o.string("label_column", d.label_column, {.max_size = 1024});
  o.number("test_fraction", d.test_fraction, {0, 1, false, true});
  o.integer("split_seed", d.split_seed, {0, std::numeric_limits<std::int64_t>::max()});
  o.string("partition", d.partition, {.min_size = 1, .max_size = 64});
  if (o.ok() && o.has("partition")) {
    if (auto spec = data::parse_partition_spec(d.partition); !spec) {
      o.reject("partition", "is not a partition: " + spec.error().message);
    }
  }
  if (o.ok() && !o.has("partition")) {
    for (const char* key : {"partition_clients", "partition_index", "partition_seed"}) {
      if (o.has(key)) {
        o.reject(key, "applies only with 'partition'");
      }
    }
  }
  // At most 10000 parts: the public test sets (10000 images each) are split as many ways.
  o.integer("partition_clients", d.partition_clients, {1, 10000});
  o.integer("partition_index", d.partition_index, {0, 9999});
  o.integer("partition_seed", d.partition_seed, {0, std::numeric_limits<std::int64_t>::max()});
  if (o.ok() && d.partition_index >= d.partition_clients) {
    o.reject("partition_index", "must be below 'partition_clients' (" +
                                    std::to_string(d.partition_clients) + "), got " +
                                    std::to_string(d.partition_index));
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return d;
}

}  // namespace

result<ClientOptions> parse_client_config(const json& j, DataSection data_section) {
  StrictObject o(j, kRoot,
                 {"server", "port", "server_name", "tls", "data", "threads", "audit_log",
                  "site_state", "policy"});
  ClientOptions options;
  o.string("server", options.host, {.min_size = 1, .max_size = 255});
  o.integer("port", options.port, {1, 65535});
  options.tls.server_name = options.host;
  o.string("server_name", options.tls.server_name, {.min_size = 1, .max_size = 255});
  o.integer("threads", options.threads, {0, 1024});
  o.string("audit_log", options.audit_log, kPath);
  o.string("site_state", options.site_state, kPath);
  if (o.ok() && !o.has("tls")) {
    o.reject("tls", "is required");
  }
  if (o.ok() && data_section == DataSection::required && !o.has("data")) {
    o.reject("data", "is required");
  }
  if (o.ok() && data_section == DataSection::forbidden && o.has("data")) {
    o.reject("data",
             "names data for fedcore-client; a site's own training code holds its data "
             "(leave 'data' out)");
  }
  if (o.ok()) {
    auto tls = parse_tls(*o.find("tls"), o.at("tls"));
    if (o.take(tls)) {
      tls->server_name = options.tls.server_name;
      options.tls = std::move(*tls);
    }
  }
  if (o.ok() && o.has("data")) {
    auto data = parse_data(*o.find("data"), o.at("data"));
    if (o.take(data)) {
      options.data = std::move(*data);
    }
  }
  if (o.ok() && o.has("policy")) {
    auto policy = parse_site_policy(*o.find("policy"), o.at("policy"));
    if (o.take(policy)) {
      options.policy = std::move(*policy);
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return options;
}

result<ClientOptions> parse_client_config_text(std::string_view text, DataSection data_section) {
  auto j = parse_json_strict(text, "client config");
  if (!j) {
    return j.error();
  }
  return parse_client_config(*j, data_section);
}

}  // namespace fedcore::client
