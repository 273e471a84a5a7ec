// noop_site: fedcore-client's daemon with a C++ trainer that returns the global model as it
// came (an ExternalTrainer, client/external_trainer.hpp). The C++ half of
// bench/python_overhead.py: the same daemon path as a Python site whose fit returns its
// parameters untouched, without Python.
//
//   noop_site --config site.json --samples N
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>

#include "client/client_config.hpp"
#include "client/daemon.hpp"

namespace {

using namespace fedcore;

class NoopTrainer final : public client::ExternalTrainer {
 public:
  explicit NoopTrainer(std::uint64_t samples) : samples_(samples) {}
  client::SiteDataShape shape() const override { return {samples_, 0, {1}, 2}; }
  std::optional<model::ParamLayout> layout() const override { return std::nullopt; }
  result<client::ExternalFit> fit(const protocol::TrainRequest&, const model::ParamLayout&,
                                  std::span<const float> global) override {
    return client::ExternalFit{{global.begin(), global.end()}, samples_, 0, 0};
  }
  result<protocol::LocalEvaluation> evaluate(std::int64_t, std::int64_t, const model::ParamLayout&,
                                             std::span<const float>) override {
    return fail(errc::unimplemented, "noop_site does not evaluate");
  }

 private:
  std::uint64_t samples_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("fedcore-client's daemon with a no-op C++ trainer (bench/python_overhead.py)");
  std::string config_path;
  std::uint64_t samples = 100;
  app.add_option("--config", config_path, "client config without 'data'")->required();
  app.add_option("--samples", samples, "training examples announced");
  CLI11_PARSE(app, argc, argv);
  std::ifstream in(config_path);
  std::stringstream text;
  text << in.rdbuf();
  auto options = client::parse_client_config_text(text.str(), client::DataSection::forbidden);
  if (!options) {
    std::cerr << options.error().message << "\n";
    return 2;
  }
  options->external = std::make_shared<NoopTrainer>(samples);
  boost::asio::io_context io;
  auto daemon = client::ClientDaemon::create(io, std::move(*options));
  if (!daemon) {
    std::cerr << daemon.error().message << "\n";
    return 1;
  }
  client::run_until_signalled(io, **daemon);
  return 0;
}
