#include "sim/options.hpp"

#include <algorithm>
#include <cmath>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "server/federation/strategy_config.hpp"
#include "shared/data/partition.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/protocol/messages.hpp"
#include "sim/attack.hpp"

namespace fedcore::sim {
namespace {

result<void> invalid(const std::string& message) {
  return fail(errc::invalid_argument, message);
}

bool is_probability(double p) {
  return std::isfinite(p) && p >= 0.0 && p <= 1.0;
}

}  // namespace

std::string_view to_string(Transport transport) noexcept {
  return transport == Transport::tls ? "tls" : "inproc";
}

result<CommandLine> parse_command_line(std::span<const std::string> args) {
  CommandLine line;
  SimOptions& o = line.options;
  CLI::App app{
      "fedcore-sim: a simulated federation (the real server and N real client daemons in one "
      "process) with reports and plots",
      "fedcore-sim"};
  std::string transport = "tls";
  app.add_option("--dataset", o.dataset, "fashion-mnist | breast-cancer | cifar10")
      ->capture_default_str();
  app.add_option("--data-path", o.data_path,
                 "data folder (fashion-mnist, cifar10) or CSV file (breast-cancer)");
  app.add_option("--model", o.model, "logreg | mlp | cnn | a JSON model spec")
      ->capture_default_str();
  app.add_option("--partition", o.partition, "iid | dirichlet:ALPHA | shards:K | sample:K")
      ->capture_default_str();
  app.add_option("--site-test", o.site_test,
                 "iid | like-train: how the test split is dealt to the sites (like-train: "
                 "each site's classes in its training proportions)")
      ->capture_default_str();
  app.add_option("--batch-norm", o.batch_norm,
                 "averaged | local (FedBN): BatchNorm of a mobilenetv2 or a cnn with "
                 "\"batch_norm\": true")
      ->capture_default_str();
  app.add_option("--clients", o.clients, "simulated sites")->capture_default_str();
  app.add_option("--clients-per-round", o.clients_per_round,
                 "clients sampled per round (0: use --fraction)");
  app.add_option("--fraction", o.fraction, "fraction of online clients sampled per round")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds)->capture_default_str();
  app.add_option("--local-epochs", o.local_epochs)->capture_default_str();
  app.add_option("--batch", o.batch)->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd | adam")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay)->capture_default_str();
  app.add_option("--strategy", o.strategy,
                 "fedavg | fedprox | fedavgm | fedadam | fedyogi | fedadagrad | median | "
                 "trimmed_mean | krum | multi_krum | bulyan | centered_clipping")
      ->capture_default_str();
  app.add_option("--strategy-options", o.strategy_options,
                 "the strategy's options as a JSON object, e.g. '{\"server_lr\": 0.01}' "
                 "(docs/strategies.md)")
      ->capture_default_str();
  app.add_option("--client-sampling", o.client_sampling,
                 "uniform | weighted (by sample count, drawn with replacement; each update "
                 "weighs its draws)")
      ->capture_default_str();
  app.add_option("--mu", o.mu, "FedProx proximal strength (needs --strategy fedprox)");
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads per client (1 = reproducible)")
      ->capture_default_str();
  app.add_option("--round-timeout", o.round_timeout_s, "seconds a round waits for updates")
      ->capture_default_str();
  app.add_option("--transport", transport, "tls (loopback mutual TLS) | inproc (socket pairs)")
      ->capture_default_str();
  // Kept so that old command lines still run: updates always go as they are ready now,
  // and the run is reproducible bit for bit anyway (the server's sum is exact).
  app.add_flag("--unordered")->description("no effect (updates are never held back)");
  app.add_flag("--secure-aggregation", o.secure_aggregation,
               "SecAgg+: the server sees only the sum of the updates");
  app.add_option("--dp", o.dp, "none | record | client_central | client_distributed")
      ->capture_default_str();
  app.add_option("--epsilon", o.epsilon, "the run's DP budget");
  app.add_option("--delta", o.delta, "the run's DP delta")->capture_default_str();
  app.add_option("--clip", o.clip_norm, "DP clip: per example (record) or per update (client)")
      ->capture_default_str();
  app.add_option("--noise-multiplier", o.noise_multiplier, "DP noise (0: calibrated to --epsilon)");
  app.add_option("--min-clients", o.min_clients,
                 "the round's quorum (0: 1, or 3 with --secure-aggregation)");
  app.add_option("--adaptive-clip", o.adaptive_clip_quantile,
                 "client-level DP: the clip follows this quantile of the update norms (0: fixed)");
  app.add_option("--clip-count-stddev", o.clip_count_stddev,
                 "adaptive clipping: noise on the unclipped count (0: clients per round / 20)");
  app.add_option("--drop-prob", o.drop_prob, "probability that a selected client drops out");
  app.add_option("--slow-prob", o.slow_prob, "probability that a selected client is slow");
  app.add_option("--compression", o.compression,
                 "none | f16 | int8 | topk: how the sites send their updates")
      ->capture_default_str();
  app.add_option("--topk-fraction", o.topk_fraction, "topk: the share of entries sent")
      ->capture_default_str();
  app.add_option("--compression-down", o.compression_down,
                 "none | f16: how the global model goes down (f16 needs --compression)")
      ->capture_default_str();
  app.add_option("--attack", o.attack,
                 "none | label_flip | sign_flip | scaled | noise | little_is_enough: what "
                 "malicious sites send (sim/attack.hpp)")
      ->capture_default_str();
  app.add_option("--attack-fraction", o.attack_fraction,
                 "fraction of the sites that are malicious (a seeded sample)")
      ->capture_default_str();
  app.add_option("--attack-scale", o.attack_scale,
                 "the attack's strength s (sign_flip 4, scaled 10, noise 1 when 0; "
                 "little_is_enough: z, the paper's rule when 0)")
      ->capture_default_str();
  app.add_option("--slow-factor", o.slow_factor, "a slow client takes this many times longer")
      ->capture_default_str();
  app.add_flag("--baseline", o.baseline, "also train centrally and report side by side");
  app.add_flag("--baseline-only", o.baseline_only, "only the centralized baseline");
  app.add_option("--baseline-epochs", o.baseline_epochs,
                 "baseline epochs (0 = the federated run's passes over the data)");
  app.add_option("--baseline-threads", o.baseline_threads, "compute threads (0 = all cores)")
      ->capture_default_str();
  app.add_option("--out", o.out, "output folder")->capture_default_str();
  app.add_option("--target", o.targets, "accuracy targets for summary.json (repeatable)");
  app.add_option("--train-limit", o.train_limit, "use only the first N training samples");
  app.add_option("--test-limit", o.test_limit, "use only the first N test samples");
  app.add_option("--dashboard-port", o.dashboard_port,
                 "serve the admin dashboard and API on this port (0 = none)");
  app.add_option("--web-root", o.web_root, "the dashboard's files")->capture_default_str();
  app.add_option("--dashboard-linger", o.dashboard_linger_s,
                 "keep the dashboard up this many seconds after the run ends")
      ->check(CLI::Range(0, 3600));
  app.add_flag("--quiet", o.quiet, "print only the final summary");
  app.add_flag("--jsonl", o.jsonl, "print one JSON object per round and one for the summary");
  app.add_flag("--verbose", o.verbose, "show server and client logs");
  app.add_option("--server-host", o.server_host,
                 "address the server listens on and the sites connect to (tls transport; with "
                 "--mpi across machines, an address of rank 0's host the others can reach)")
      ->capture_default_str();
  app.add_flag("--mpi", o.mpi,
               "run across the ranks of an MPI job (mpirun -n K): rank 0 hosts the server, "
               "each rank a share of the sites; needs --transport tls");

  // CLI11 takes the arguments in reverse order.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    line.help = true;
    line.help_text = app.help();
    return line;
  } catch (const CLI::ParseError& e) {
    return fail(errc::invalid_argument, e.what());
  }
  if (transport == "tls") {
    o.transport = Transport::tls;
  } else if (transport == "inproc") {
    o.transport = Transport::inproc;
  } else {
    return fail(errc::invalid_argument,
                "--transport must be tls or inproc, got '" + transport + "'");
  }
  if (auto checked = validate(o); !checked) {
    return checked.error();
  }
  return line;
}

result<void> validate(const SimOptions& o) {
  if (o.dataset != "fashion-mnist" && o.dataset != "breast-cancer" && o.dataset != "cifar10") {
    return invalid("--dataset must be fashion-mnist, breast-cancer or cifar10, got '" + o.dataset +
                   "'");
  }
  if (o.dataset == "cifar10" && o.data_path.empty()) {
    return invalid("--dataset cifar10 needs --data-path DIR (the folder of data_batch_*.bin)");
  }
  if (o.mpi && o.transport != Transport::tls) {
    return invalid(
        "--mpi needs --transport tls: sites in other processes reach the server over "
        "the network");
  }
  if (o.mpi && o.baseline_only) {
    return invalid("--mpi distributes the federation's sites; --baseline-only has none");
  }
  if (auto spec = model_spec_json(o); !spec) {
    return spec.error();
  }
  if (auto partition = data::parse_partition_spec(o.partition); !partition) {
    return invalid("--partition: " + partition.error().message);
  }
  if (o.clients == 0) {
    return invalid("--clients must be at least 1");
  }
  if (!protocol::dp_mode_from_name(o.dp)) {
    return invalid("--dp must be none, record, client_central or client_distributed, got '" + o.dp +
                   "'");
  }
  if (o.dp != "none" && !(o.epsilon > 0)) {
    return invalid("--dp " + o.dp + " needs --epsilon > 0 (the run's budget)");
  }
  if (o.adaptive_clip_quantile != 0 &&
      (!(o.adaptive_clip_quantile > 0 && o.adaptive_clip_quantile < 1) ||
       (o.dp != "client_central" && o.dp != "client_distributed"))) {
    return invalid(
        "--adaptive-clip takes a quantile in (0, 1) and needs --dp client_central or "
        "client_distributed");
  }
  if (o.clients > 100000) {
    return invalid("--clients must be at most 100000");
  }
  if (o.min_clients > o.clients ||
      (o.clients_per_round != 0 && o.min_clients > o.clients_per_round)) {
    return invalid("--min-clients " + std::to_string(o.min_clients) +
                   " is more than the clients of a round");
  }
  if (o.secure_aggregation && o.min_clients != 0 && o.min_clients < 3) {
    return invalid("--min-clients must be at least 3 with --secure-aggregation");
  }
  if (o.clients_per_round > o.clients) {
    return invalid("--clients-per-round " + std::to_string(o.clients_per_round) +
                   " exceeds --clients " + std::to_string(o.clients));
  }
  if (!(o.fraction > 0.0 && o.fraction <= 1.0)) {
    return invalid("--fraction must be in (0, 1]");
  }
  if (o.rounds < 1 || o.rounds > 100000) {
    return invalid("--rounds must be between 1 and 100000");
  }
  if (o.local_epochs < 1 || o.local_epochs > 1000) {
    return invalid("--local-epochs must be between 1 and 1000");
  }
  if (o.batch < 1 || o.batch > 65536) {
    return invalid("--batch must be between 1 and 65536");
  }
  if (o.threads < 1 || o.threads > 256) {
    return invalid("--threads must be between 1 and 256");
  }
  if (std::find(std::begin(federation::kStrategies), std::end(federation::kStrategies),
                o.strategy) == std::end(federation::kStrategies)) {
    return invalid("--strategy: unknown strategy '" + o.strategy +
                   "' (fedcore-sim --help lists them)");
  }
  {
    const auto options = nlohmann::json::parse(o.strategy_options, nullptr, false);
    if (options.is_discarded() || !options.is_object()) {
      return invalid("--strategy-options must be a JSON object, got '" + o.strategy_options + "'");
    }
    auto parsed =
        federation::parse_strategy_config(o.strategy, &options, JsonPath("--strategy-options"));
    if (!parsed) {
      return invalid(parsed.error().message);
    }
  }
  if (o.site_test != "iid" && o.site_test != "like-train") {
    return invalid("--site-test must be iid or like-train, got '" + o.site_test + "'");
  }
  if (o.batch_norm != "averaged" && o.batch_norm != "local") {
    return invalid("--batch-norm must be averaged or local, got '" + o.batch_norm + "'");
  }
  if (o.batch_norm == "local" && o.baseline_only) {
    return invalid(
        "--batch-norm local is FedBN, a federated option; --baseline-only has no "
        "federation");
  }
  if (o.client_sampling != "uniform" && o.client_sampling != "weighted") {
    return invalid("--client-sampling must be uniform or weighted, got '" + o.client_sampling +
                   "'");
  }
  if (o.strategy == "fedprox" && !(o.mu > 0.0f)) {
    return invalid("--strategy fedprox needs --mu > 0");
  }
  if (o.strategy == "fedavg" && o.mu != 0.0f) {
    return invalid("--mu applies to --strategy fedprox only");
  }
  if (auto optimizer = model::optimizer_config_from_json(optimizer_json(o)); !optimizer) {
    return invalid("optimizer (--optimizer/--lr/--momentum/--weight-decay): " +
                   optimizer.error().message);
  }
  if (o.compression != "none" && o.compression != "f16" && o.compression != "int8" &&
      o.compression != "topk") {
    return invalid("--compression must be none, f16, int8 or topk, got '" + o.compression + "'");
  }
  if (o.compression_down != "none" && o.compression_down != "f16") {
    return invalid("--compression-down must be none or f16, got '" + o.compression_down + "'");
  }
  if (o.compression_down == "f16" && o.compression == "none") {
    return invalid(
        "--compression-down f16 needs --compression (the sites send their step "
        "against the model they received)");
  }
  if (!(o.topk_fraction > 0.0 && o.topk_fraction <= 1.0)) {
    return invalid("--topk-fraction must be in (0, 1]");
  }
  if (o.compression != "none" && o.secure_aggregation) {
    return invalid(
        "--compression does not apply with --secure-aggregation (it masks "
        "quantized updates of its own)");
  }
  if (!attack_kind(o.attack)) {
    return invalid(
        "--attack must be none, label_flip, sign_flip, scaled, noise or little_is_enough, got '" +
        o.attack + "'");
  }
  if (!is_probability(o.attack_fraction)) {
    return invalid("--attack-fraction must be in [0, 1]");
  }
  if ((o.attack == "none") != (o.attack_fraction == 0.0)) {
    return invalid("--attack and --attack-fraction go together: give both or neither");
  }
  if (o.attack == "little_is_enough" &&
      ((o.clients_per_round != 0 && o.clients_per_round != o.clients) || o.fraction < 1.0 ||
       o.mpi)) {
    return invalid(
        "--attack little_is_enough has its attackers pool their honest updates each round: it "
        "needs every site in every round (no --clients-per-round or --fraction below all) and "
        "one process (no --mpi)");
  }
  if (!(o.attack_scale >= 0.0 && o.attack_scale <= 1e6)) {
    return invalid("--attack-scale must be in [0, 1e6]");
  }
  if (!is_probability(o.drop_prob)) {
    return invalid("--drop-prob must be a probability in [0, 1]");
  }
  if (!is_probability(o.slow_prob)) {
    return invalid("--slow-prob must be a probability in [0, 1]");
  }
  if (!(o.slow_factor >= 1.0 && o.slow_factor <= 1000.0)) {
    return invalid("--slow-factor must be between 1 and 1000");
  }
  if (!(o.round_timeout_s > 0 && o.round_timeout_s <= 86400)) {
    return invalid("--round-timeout must be between 0 and 86400 seconds");
  }
  if (o.baseline_epochs < 0 || o.baseline_epochs > 10000) {
    return invalid("--baseline-epochs must be between 0 (matched) and 10000");
  }
  if (o.baseline_threads < 0) {
    return invalid("--baseline-threads must be 0 (all cores) or more");
  }
  if (o.out.empty()) {
    return invalid("--out must name a folder");
  }
  for (double t : o.targets) {
    if (!(t > 0.0 && t <= 1.0)) {
      return invalid("--target must be an accuracy in (0, 1]");
    }
  }
  if (o.dashboard_port < 0 || o.dashboard_port > 65535) {
    return invalid("--dashboard-port must be a port number (0 = no dashboard)");
  }
  if (o.quiet && o.jsonl) {
    return invalid("--quiet and --jsonl exclude each other");
  }
  return {};
}

result<nlohmann::json> model_spec_json(const SimOptions& o) {
  nlohmann::json parsed;
  if (o.model == "logreg" || o.model == "cnn") {
    parsed = {{"type", o.model}};
  } else if (o.model == "mlp") {
    // The zoo's mlp has no default width; 256-128 is the one benchmarked (docs/results.md).
    parsed = {{"type", "mlp"}, {"hidden", {256, 128}}};
  } else {
    parsed = nlohmann::json::parse(o.model, nullptr, false);
  }
  if (parsed.is_discarded()) {
    return fail(errc::invalid_argument,
                "--model must be logreg, mlp, cnn or a JSON model spec, got '" + o.model + "'");
  }
  if (auto spec = model::parse_model_spec(parsed); !spec) {
    return fail(errc::invalid_argument, "--model: " + spec.error().message);
  }
  return result<nlohmann::json>(boost::system::in_place_value, std::move(parsed));
}

nlohmann::json optimizer_json(const SimOptions& o) {
  nlohmann::json j{{"kind", o.optimizer}, {"lr", o.lr}, {"weight_decay", o.weight_decay}};
  if (o.optimizer == "sgd") {
    j["momentum"] = o.momentum;
  }
  return j;
}

nlohmann::json to_json(const SimOptions& o) {
  return {{"dataset", o.dataset},
          {"data_path", o.data_path},
          {"model", model_spec_json(o).value()},
          {"train_limit", o.train_limit},
          {"test_limit", o.test_limit},
          {"partition", o.partition},
          {"site_test", o.site_test},
          {"batch_norm", o.batch_norm},
          {"clients", o.clients},
          {"clients_per_round", o.clients_per_round},
          {"fraction", o.fraction},
          {"rounds", o.rounds},
          {"local_epochs", o.local_epochs},
          {"batch", o.batch},
          {"optimizer", optimizer_json(o)},
          {"strategy", o.strategy},
          {"strategy_options", nlohmann::json::parse(o.strategy_options, nullptr, false)},
          {"client_sampling", o.client_sampling},
          {"mu", o.mu},
          {"seed", o.seed},
          {"threads", o.threads},
          {"round_timeout_s", o.round_timeout_s},
          {"transport", to_string(o.transport)},
          {"drop_prob", o.drop_prob},
          {"slow_prob", o.slow_prob},
          {"secure_aggregation", o.secure_aggregation},
          {"dp", o.dp},
          {"epsilon", o.epsilon},
          {"delta", o.delta},
          {"clip_norm", o.clip_norm},
          {"noise_multiplier", o.noise_multiplier},
          {"adaptive_clip", o.adaptive_clip_quantile},
          {"min_clients", o.min_clients},
          {"clip_count_stddev", o.clip_count_stddev},
          {"slow_factor", o.slow_factor},
          {"compression", o.compression},
          {"topk_fraction", o.topk_fraction},
          {"compression_down", o.compression_down},
          {"attack", o.attack},
          {"attack_fraction", o.attack_fraction},
          {"attack_scale", o.attack_scale},
          {"baseline", o.baseline || o.baseline_only},
          {"baseline_only", o.baseline_only},
          {"baseline_epochs", o.baseline_epochs},
          {"targets", o.targets},
          {"dashboard_port", o.dashboard_port},
          {"web_root", o.web_root}};
}

}  // namespace fedcore::sim
