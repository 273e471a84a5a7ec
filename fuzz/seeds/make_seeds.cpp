// Writes the seed corpora of fuzz/corpus/<target>/ from the real encoders, so every seed
// is an input production accepts (plus a few near-misses the parsers must refuse). Run by
// hand after a format changes: build/fuzz/fuzz/fuzz_make_seeds fuzz/corpus
// The files are committed; keep each one a few KiB at most.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zlib.h>

#include "distributed/checkpoint.hpp"
#include "shared/model/param_io.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/protocol/update_encoding.hpp"
#include "shared/secagg/wire.hpp"
#include "shared/util/rng.hpp"

namespace {

using namespace fedcore;
namespace fs = std::filesystem;

fs::path g_root;

void write(const std::string& target, const std::string& name, std::span<const std::byte> bytes) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write(const std::string& target, const std::string& name, std::string_view text) {
  write(target, name, std::as_bytes(std::span(text.data(), text.size())));
}

// Targets that dispatch on their first byte: the selector, then the text.
void write_selected(const std::string& target, const std::string& name, char selector,
                    std::string_view text) {
  write(target, name, std::string(1, selector) + std::string(text));
}

const std::string kNonce = "0123456789abcdef0123456789abcdef";

void frames() {
  const auto hello =
      protocol::encode_frame(protocol::MessageType::hello, R"({"samples":100,"input_shape":[30]})");
  write("frame", "hello", hello);
  const std::vector<float> params = {0.5f, -1.0f, 2.0f, 0.0f};
  const auto update = protocol::encode_frame(protocol::MessageType::update, R"({"run":1})",
                                             std::as_bytes(std::span(params)));
  write("frame", "update_with_payload", update);
  write("frame", "heartbeat", protocol::encode_frame(protocol::MessageType::heartbeat, "{}"));
  auto truncated = hello;
  truncated.resize(truncated.size() - 3);
  write("frame", "truncated", truncated);
  auto bad_magic = hello;
  bad_magic[0] = std::byte{'X'};
  write("frame", "bad_magic", bad_magic);
}

void messages() {
  protocol::Hello hello;
  hello.samples = 455;
  hello.test_samples = 114;
  hello.input_shape = {30};
  hello.num_classes = 2;
  hello.capabilities = {"train", "evaluate", "feature_stats"};
  hello.software = "fedcore-client 0.1.0";
  write_selected("messages", "hello", 0, protocol::to_metadata(hello));
  write_selected("messages", "welcome", 1,
                 protocol::to_metadata(protocol::Welcome{"hospital-a", 5}));

  protocol::TrainRequest train;
  train.run_id = 1;
  train.round = 3;
  train.nonce = kNonce;
  train.model_spec = {{"type", "mlp"}, {"input_shape", {30}}, {"num_classes", 2}, {"hidden", {16}}};
  train.layout_fingerprint = "0123456789abcdef";
  train.evaluate = true;
  train.scaling = {protocol::ScalingMode::federated, {0.5, 1.5}, {1.0, 2.0}};
  write_selected("messages", "train", 2, protocol::to_metadata(train));
  train.privacy = {.secure_aggregation = true,
                   .dp = protocol::DpMode::record,
                   .epsilon = 8,
                   .delta = 1e-5,
                   .clip_norm = 1,
                   .noise_multiplier = 1.1};
  write_selected("messages", "train_dp", 2, protocol::to_metadata(train));

  protocol::UpdateReport update;
  update.run_id = 1;
  update.round = 3;
  update.nonce = kNonce;
  update.layout_fingerprint = "0123456789abcdef";
  update.samples = 455;
  update.loss = 0.25;
  update.accuracy = 0.9;
  update.train_seconds = 1.5;
  update.evaluation = protocol::LocalEvaluation{0.3, 0.88, 114};
  write_selected("messages", "update", 3, protocol::to_metadata(update));
  write_selected("messages", "feature_stats_request", 4,
                 protocol::to_metadata(protocol::FeatureStatsRequest{1, kNonce, 2}));
  write_selected("messages", "feature_stats", 5,
                 protocol::to_metadata(protocol::FeatureStatsReport{
                     1, kNonce, 2, {10, 10}, {5.0, -3.0}, {30.0, 12.5}}));
  write_selected("messages", "error", 6,
                 protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", "bad"}));
  write_selected("messages", "metadata", 7, R"({"a":[1,2.5e3,"x",null,true]})");
  write_selected("messages", "hello_negative", 0, R"({"samples":-1,"input_shape":[30]})");

  protocol::EvaluateRequest evaluate;
  evaluate.run_id = 1;
  evaluate.round = 3;
  evaluate.nonce = kNonce;
  evaluate.model_spec = train.model_spec;
  evaluate.layout_fingerprint = "0123456789abcdef";
  evaluate.final_model = true;
  evaluate.scaling = {protocol::ScalingMode::federated, {0.5, 1.5}, {1.0, 2.0}};
  write_selected("messages", "evaluate", 8, protocol::to_metadata(evaluate));
  protocol::EvaluationReport evaluation{1,   3,    kNonce, protocol::EvaluationStatus::ok,
                                        0.3, 0.88, 114,    ""};
  write_selected("messages", "evaluation", 9, protocol::to_metadata(evaluation));
  evaluation.status = protocol::EvaluationStatus::refused;
  evaluation.message = "site policy: evaluation is not allowed";
  write_selected("messages", "evaluation_refused", 9, protocol::to_metadata(evaluation));
  write_selected("messages", "evaluation_mixed", 9,
                 R"({"run":1,"round":3,"nonce":")" + kNonce +
                     R"(","status":"failed","message":"x","loss":0.5})");
}

secagg::Bytes filled(std::size_t n, std::uint8_t v) {
  return secagg::Bytes(n, v);
}

void secagg_wire() {
  const secagg::Envelope e{1, 2, kNonce};
  secagg::AdvertisedKeys keys{"site-a", filled(32, 1), filled(32, 2), filled(64, 3),
                              "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"};
  write_selected("secagg_wire", "keys", 0, secagg::to_metadata(e, keys));
  secagg::NeighbourKeys neighbours;
  neighbours.plan = {.clients = 3,
                     .degree = 2,
                     .threshold = 2,
                     .clip_range = 8.0,
                     .quant_range = 1u << 20,
                     .weight_cap = 100,
                     .bind_keys = true,
                     .metric_slots = 3};
  neighbours.neighbours = {keys, keys};
  neighbours.neighbours[1].client_id = "site-b";
  write_selected("secagg_wire", "neighbours", 1, secagg::to_metadata(e, neighbours));
  secagg::SharesUpload shares{{{"site-b", filled(60, 4)}, {"site-c", filled(60, 5)}}};
  write_selected("secagg_wire", "shares", 2, secagg::to_metadata(e, shares));
  write_selected("secagg_wire", "relay", 3,
                 secagg::to_metadata(e, secagg::RelayedShares{shares.shares}));
  write_selected("secagg_wire", "masked", 4, secagg::to_metadata(e));
  write_selected("secagg_wire", "survivors", 5,
                 secagg::to_metadata(e, secagg::SurvivorList{{"site-a", "site-b", "site-c"}}));
  write_selected("secagg_wire", "signed", 6,
                 secagg::to_metadata(e, secagg::SurvivorSignature{filled(64, 6)}));
  secagg::UnmaskRequest unmask{{"site-a", "site-b"}, {"site-c"}, {{"site-b", filled(64, 7)}}};
  write_selected("secagg_wire", "unmask", 7, secagg::to_metadata(e, unmask));
  secagg::UnmaskResponse revealed;
  revealed.shares = {{"site-b", secagg::SecretKind::self_mask, {2, filled(66, 8)}},
                     {"site-c", secagg::SecretKind::mask_key, {2, filled(66, 9)}}};
  write_selected("secagg_wire", "revealed", 8, secagg::to_metadata(e, revealed));
}

model::ParamLayout small_layout() {
  model::ParamLayout layout;
  layout.append("dense1.weight", {3, 2});
  layout.append("dense1.bias", {2});
  return layout;
}

void params_and_checkpoints() {
  const auto layout = small_layout();
  const std::vector<float> params = {0.1f, -0.2f, 0.3f, 1.0f, 2.0f, -3.0f, 0.0f, 0.5f};
  write("params", "small", model::encode_params(layout, params, R"({"run":1,"round":2})"));
  auto corrupt = model::encode_params(layout, params);
  corrupt[corrupt.size() - 5] ^= std::byte{1};  // a parameter bit: the CRC must catch it
  write("params", "bad_crc", corrupt);

  model::OptimizerState sgd;
  write("dist_checkpoint", "sgd", distributed::encode_checkpoint(layout, params, sgd, 10, 2));
  model::OptimizerState adam;
  adam.kind = model::OptimizerKind::adam;
  adam.steps = 10;
  adam.buffers = {{"m", std::vector<float>(params.size(), 0.01f)},
                  {"s", std::vector<float>(params.size(), 0.02f)}};
  write("dist_checkpoint", "adam", distributed::encode_checkpoint(layout, params, adam, 10, 2));
}

void configs() {
  write("run_config", "full",
        R"({"name":"bc","model":{"type":"mlp","hidden":[16,8],"dropout":0.1},"rounds":5,)"
        R"("clients_per_round":3,"min_clients":2,"local_epochs":2,"batch_size":16,)"
        R"("optimizer":{"kind":"sgd","lr":0.1,"momentum":0.9},"round_timeout_s":30,"seed":7,)"
        R"("on_failed_round":"retry","max_retries":1,"feature_scaling":"site"})");
  write("run_config", "secure_dp",
        R"({"model":{"type":"logreg"},"rounds":2,"strategy":"fedprox","proximal_mu":0.01,)"
        R"("optimizer":{"kind":"adam","lr":0.001,"beta1":0.9,"beta2":0.999},)"
        R"("privacy":{"secure_aggregation":{"threshold":2,"bind_keys":true},)"
        R"("dp":{"mode":"client_distributed","epsilon":8,"delta":1e-5,"clip_norm":1}}})");
  write("run_config", "cnn",
        R"({"model":{"type":"cnn","input_shape":[28,28,1],)"
        R"("num_classes":10,"channels":[8,16],"kernel":3,"dense":64}})");
  write("run_config", "typo", R"({"model":{"type":"logreg"},"roundz":5})");

  write("server_config", "full",
        R"({"listen":"0.0.0.0","port":7500,"database":"h.db","checkpoint_dir":"ck",)"
        R"("max_connections":64,"heartbeat_seconds":2,"idle_timeout_s":30,)"
        R"("tls":{"ca":"ca.pem","cert":"s.pem","key":"s.key","crl":"crl.pem"},)"
        R"("api":{"port":0,"enabled":true,"web_root":"web","tokens":[{"name":"ops",)"
        R"("sha256":"0000000000000000000000000000000000000000000000000000000000000000",)"
        R"("created_ms":1}]}})");
  write("server_config", "typo", R"({"databse":"x.db"})");

  write_selected("client_config", "full", 0,
                 R"({"server":"fl.example.org","port":7500,"server_name":"fl","threads":2,)"
                 R"("tls":{"ca":"ca.pem","cert":"c.pem","key":"c.key"},)"
                 R"("data":{"format":"csv","path":"d.csv","label_column":"y",)"
                 R"("test_fraction":0.25,"split_seed":7,"partition":"dirichlet:0.5",)"
                 R"("partition_clients":4,"partition_index":3,"partition_seed":9},)"
                 R"("policy":{"max_local_epochs":2}})");
  write_selected("client_config", "images", 0,
                 R"({"tls":{"ca":"a","cert":"b","key":"c"},"data":{"format":"cifar10",)"
                 R"("path":"cifar"}})");
  write_selected(
      "client_config", "policy", 1,
      R"({"allowed_model_types":["logreg","mlp"],"max_parameters":100000,)"
      R"("max_local_epochs":5,"max_rounds_per_day":24,"require_secure_aggregation":true,)"
      R"("max_epsilon":8,"server":{"common_name":"server","server_fingerprint":)"
      R"("00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"}})");

  write("model_spec", "mlp", R"({"type":"mlp","input_shape":[30],"num_classes":2,"hidden":[16]})");
  write("model_spec", "cnn",
        R"({"type":"cnn","input_shape":[32,32,3],"num_classes":10,)"
        R"("channels":[16,32],"kernel":5,"dense":128,"dropout":0.25})");
  write("model_spec", "too_large",
        R"({"type":"mlp","input_shape":[65536],"num_classes":100000,"hidden":[65536,65536]})");

  write_selected("api_request", "run_body", 0,
                 R"({"model":{"type":"logreg"},"rounds":3,"clients_per_round":2})");
  write_selected("api_request", "query", 1, "limit=10&offset=20&state=running");
  write_selected("api_request", "query_escapes", 1, "state=r%75nning+x&limit=%zz");
  write_selected("api_request", "route", 2, "/api/v1/runs/12/rounds/3/results");
  write_selected("api_request", "route_escaped", 2, "/api/v1/clients/site%2Da");
  write_selected("api_request", "bearer", 3, "Bearer fuzz-token");
  write_selected("api_request", "static", 4, "/assets/app.js");
  write_selected("api_request", "static_traversal", 4, "/assets/%2e%2e/%2e%2e/etc/passwd");
}

void csv() {
  write_selected("csv", "numeric", 0, "a,b,label\n1.5,2,0\n-3e2,0.25,1\n4,5,1\n");
  write_selected("csv", "named_labels", 4,
                 "\xEF\xBB\xBFx;label;y\r\n1;benign;2\r\n\"3\";malignant;4\r\n\r\n");
  write_selected("csv", "tabs", 2, "f1\tf2\tclass\n0\t1\tcat\n1\t0\tdog\n");
  write_selected("csv", "ragged", 0, "a,b,label\n1,2\n");
}

std::vector<std::byte> big_endian(std::initializer_list<std::uint32_t> words) {
  std::vector<std::byte> out;
  for (auto w : words) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<std::byte>((w >> shift) & 0xff));
    }
  }
  return out;
}

std::vector<std::byte> gzipped(std::span<const std::byte> raw) {
  uLongf size = compressBound(static_cast<uLong>(raw.size())) + 32;
  std::vector<std::byte> out(size);
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 16: gzip wrapper
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::vector<std::byte> selected(char selector, std::span<const std::byte> bytes) {
  std::vector<std::byte> out{static_cast<std::byte>(selector)};
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

void idx() {
  auto images = big_endian({0x00000803, 2, 4, 4});  // two 4x4 images
  for (int i = 0; i < 32; ++i) {
    images.push_back(static_cast<std::byte>(i * 8));
  }
  write("idx", "images", selected(0, images));
  write("idx", "images_gz", selected(0, gzipped(images)));
  auto labels = big_endian({0x00000801, 3});
  labels.insert(labels.end(), {std::byte{1}, std::byte{9}, std::byte{0}});
  write("idx", "labels", selected(1, labels));
  write("idx", "labels_gz", selected(1, gzipped(labels)));
  auto short_images = big_endian({0x00000803, 100, 28, 28});
  write("idx", "images_truncated", selected(0, short_images));
}

void cifar10() {
  std::vector<std::byte> record(3073);
  record[0] = std::byte{7};
  for (std::size_t i = 1; i < record.size(); ++i) {
    record[i] = static_cast<std::byte>(i % 251);
  }
  write("cifar10", "one_record", record);
  record[0] = std::byte{12};  // a label above 9
  write("cifar10", "bad_label", record);
  record.resize(100);
  write("cifar10", "truncated", record);
}

}  // namespace

// Compressed update payloads of a 300-parameter model: the selector byte (0 f16, 1 int8,
// 2 topk), the size in two bytes, then what a site sends; plus a truncated one.
void update_encodings() {
  std::vector<float> step(300);
  for (std::size_t i = 0; i < step.size(); ++i) {
    step[i] = 0.01f * static_cast<float>(static_cast<int>(i % 17) - 8);
  }
  Rng rng(1);
  const std::pair<const char*, protocol::CompressionTerms> kinds[] = {
      {"f16", {protocol::UpdateEncoding::f16, 256, 0.01}},
      {"int8", {protocol::UpdateEncoding::int8, 64, 0.01}},
      {"topk", {protocol::UpdateEncoding::topk, 256, 0.05}}};
  for (std::size_t s = 0; s < 3; ++s) {
    const auto payload = protocol::encode_step(step, kinds[s].second, rng);
    std::vector<std::byte> input{std::byte(s), std::byte(299 >> 8), std::byte(299 & 0xff)};
    input.insert(input.end(), payload.begin(), payload.end());
    write("update_encoding", kinds[s].first, input);
    input.resize(input.size() - 5);
    write("update_encoding", std::string(kinds[s].first) + "_truncated", input);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds <corpus dir>\n";
    return 2;
  }
  g_root = argv[1];
  frames();
  messages();
  update_encodings();
  secagg_wire();
  params_and_checkpoints();
  configs();
  csv();
  idx();
  cifar10();
  return 0;
}
