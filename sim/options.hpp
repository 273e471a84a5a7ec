// SimOptions: everything that defines one fedcore-sim invocation, and its command line.
//
// The command line is parsed and validated here, before anything is loaded or started:
// every problem is errc::invalid_argument with a message that names the option and says
// what is allowed ("--partition: ...", "--clients-per-round 12 exceeds --clients 10").
// The same struct is written into summary.json as the run's full configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"
#include "shared/util/source_tree.hpp"

namespace fedcore::sim {

enum class Transport {
  tls,     // real loopback TCP + mutual TLS 1.3, one certificate per simulated site
  inproc,  // connected AF_UNIX socket pairs, no TLS: for thousands of clients
};

struct SimOptions {
  // Data and model.
  std::string dataset = "fashion-mnist";  // fashion-mnist | breast-cancer | cifar10
  std::string data_path;                  // "" = the data set's default location
  std::string model = "mlp";              // logreg | mlp (256-128) | cnn | a JSON model spec
  std::size_t train_limit = 0;            // use only the first N training samples (0 = all)
  std::size_t test_limit = 0;             // ... and the first N test samples

  // Federation.
  std::string partition = "iid";  // iid | dirichlet:ALPHA | shards:K
  // How the test split is dealt to the sites for federated evaluation: iid, or like-train
  // (each site's classes in its training split's proportions: personalised evaluation).
  std::string site_test = "iid";
  // BatchNorm models: "averaged" with the parameters, or "local" (FedBN; run_config.hpp).
  std::string batch_norm = "averaged";
  std::size_t clients = 10;
  std::size_t clients_per_round = 0;  // 0: use fraction
  double fraction = 1.0;
  std::int64_t rounds = 10;
  int local_epochs = 1;
  int batch = 32;
  std::string optimizer = "sgd";  // sgd | adam
  float lr = 0.05f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  std::string strategy = "fedavg";          // any of federation::kStrategies
  std::string strategy_options = "{}";      // the run config's "strategy_options", as JSON
  std::string compression = "none";         // none | f16 | int8 | topk (update_encoding.hpp)
  double topk_fraction = 0.01;              // topk: share of the entries sent
  std::string compression_down = "none";    // none | f16: the global model in TRAIN
  std::string client_sampling = "uniform";  // uniform | weighted (run_config.hpp)
  float mu = 0.0f;                          // fedprox proximal strength
  std::uint64_t seed = 1;
  int threads = 1;  // compute threads per simulated client
  double round_timeout_s = 600;
  Transport transport = Transport::tls;
  // Privacy (server/federation/privacy_config.hpp): SecAgg+ and differential privacy.
  bool secure_aggregation = false;
  std::string dp = "none";  // none | record | client_central | client_distributed
  double epsilon = 0;       // the run's budget (DP modes)
  double delta = 1e-5;
  double clip_norm = 1.0;       // per example (record) or per update (client-level)
  double noise_multiplier = 0;  // 0: calibrated to the budget
  // Adaptive clipping (client-level DP): the clip follows this quantile of the update norms;
  // 0 = a fixed clip. The bit count's noise: 0 = clients per round / 20 (Andrew et al.).
  double adaptive_clip_quantile = 0;
  // The round's quorum: 0 = 1 (3 with secure aggregation). Distributed DP sizes each site's
  // noise share for max(SecAgg threshold, this), so a quorum near the round's size means
  // near-minimal noise.
  std::size_t min_clients = 0;
  double clip_count_stddev = 0;

  // Fault injection, decided per (seed, client, round) so that it is reproducible.
  double drop_prob = 0.0;    // a selected client closes its connection instead of answering
  double slow_prob = 0.0;    // a selected client answers late ...
  double slow_factor = 3.0;  // ... after slow_factor times its training time
  // Malicious sites (sim/attack.hpp): the attack, the fraction of sites that run it, and
  // its strength (0: the attack's default).
  std::string attack = "none";
  double attack_fraction = 0.0;
  double attack_scale = 0.0;

  // Centralized baseline on the same data, model and hyper-parameters.
  bool baseline = false;
  bool baseline_only = false;
  int baseline_epochs = 0;  // 0 = as many passes over the data as the federated run made
  // 1 by default: reproducible, and OpenMP threads that spin while a loaded machine
  // deschedules their partner can make 2 threads far slower than 1.
  int baseline_threads = 1;  // 0 = all cores

  // Outputs.
  std::string out = "sim-out";
  std::vector<double> targets = {0.80, 0.85, 0.89};  // accuracy targets in summary.json
  int dashboard_port = 0;  // 0 = no dashboard; else the admin API and dashboard on it
  std::string web_root = source_path("web");  // the dashboard's files
  int dashboard_linger_s = 0;                 // keep the dashboard up this long after the run ends
  bool quiet = false;                         // only the final summary line
  bool jsonl = false;                         // one JSON object per line (rounds, then the summary)
  bool verbose = false;                       // server and client logs on stderr
  // Run across the processes of an MPI job (mpirun -n K fedcore-sim --mpi): rank 0 hosts
  // the server, every rank a share of the sites (sim/cluster.hpp). Needs --transport tls.
  bool mpi = false;
  // Where rank 0's server listens and every site connects (TLS transport).
  std::string server_host = "127.0.0.1";
};

// The outcome of reading a command line: options to run with, or help text to print.
struct CommandLine {
  SimOptions options;
  bool help = false;
  std::string help_text;
};

// Parses the arguments (without the program name) and validates them together.
// Errors: invalid_argument naming the option.
result<CommandLine> parse_command_line(std::span<const std::string> args);

// Cross-option checks (also run by parse_command_line). Errors: invalid_argument.
result<void> validate(const SimOptions& options);

// The model spec of `options.model` as JSON: {"type": NAME} for a zoo name, else the JSON
// given, parsed once here. Errors: invalid_argument when it is neither a name nor a valid
// spec.
result<nlohmann::json> model_spec_json(const SimOptions& options);

// The optimizer config JSON the run and the baseline use.
nlohmann::json optimizer_json(const SimOptions& options);

// The whole configuration, for summary.json.
nlohmann::json to_json(const SimOptions& options);

std::string_view to_string(Transport transport) noexcept;

}  // namespace fedcore::sim
