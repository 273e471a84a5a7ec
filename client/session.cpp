#include "client/session.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "shared/model/optimizer.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::client {
namespace asio = boost::asio;

namespace {

// How long a stopping session waits for its GOODBYE to be written before it closes anyway.
constexpr std::chrono::seconds kGoodbyeWait{2};

std::string megabytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", double(bytes) / 1e6);
  return text;
}

std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<std::size_t>(i), ",");
  }
  return digits;
}

// A free coroutine, not a member: it may outlive the session object by one sleep, so it
// holds only what it needs (the link, the shared end flag) and the daemon's sleeper.
asio::awaitable<void> heartbeats(std::shared_ptr<net::Link> link, std::shared_ptr<bool> ended,
                                 net::Sleeper& sleeper, std::uint32_t seconds) {
  while (!*ended && link->is_open()) {
    // Awaited into a variable on purpose: GCC 12 compiled `if (!co_await
    // sleeper.sleep_for(std::chrono::seconds(...), ...))` into a coroutine whose resumption
    // hit its unreachable trap (SIGILL in tests/client/session_test.cpp).
    const bool slept = co_await sleeper.sleep_for(std::chrono::seconds(seconds), ended.get());
    if (!slept) {
      break;
    }
    if (!*ended && link->is_open()) {
      link->send(protocol::MessageType::heartbeat, "{}");
    }
  }
}

}  // namespace

ClientSession::ClientSession(asio::io_context& io, std::shared_ptr<net::Link> link,
                             net::Sleeper& sleeper, SessionHooks hooks, std::string server)
    : io_(io),
      link_(std::move(link)),
      sleeper_(sleeper),
      hooks_(std::move(hooks)),
      server_(std::move(server)) {}

ClientSession::~ClientSession() {
  *ended_ = true;
  sleeper_.cancel(ended_.get());  // the heartbeats stop now, not one interval later
}

void ClientSession::stop() {
  if (*ended_) {
    return;
  }
  *ended_ = true;
  sleeper_.cancel(ended_.get());
  if (!link_->is_open()) {
    return;
  }
  if (identity_.empty()) {
    link_->close();  // not WELCOMEd: nothing to say goodbye to
    return;
  }
  // GOODBYE, so the server records an orderly leave rather than a lost connection; the
  // link closes once it is written, or after kGoodbyeWait if the write cannot finish (a
  // stalled peer must not hold up a stopping daemon).
  // Weak references only: the link queues the callback, so a strong one would keep the
  // link alive by itself if the frame is never written (the io_context stopped first).
  auto timer = std::make_shared<asio::steady_timer>(io_, kGoodbyeWait);
  const std::weak_ptr<net::Link> weak_link = link_;
  timer->async_wait([timer, weak_link](const boost::system::error_code&) {
    if (auto link = weak_link.lock()) {
      link->close();
    }
  });
  link_->send(protocol::MessageType::goodbye, "{}", nullptr,
              [weak_timer = std::weak_ptr<asio::steady_timer>(timer), weak_link] {
                if (auto pending = weak_timer.lock()) {
                  pending->cancel();  // written: no timer keeps the io_context busy
                }
                if (auto link = weak_link.lock()) {
                  link->close();
                }
              });
}

asio::awaitable<result<void>> ClientSession::run(const protocol::Hello& hello_in) {
  protocol::Hello hello = hello_in;
  const std::string feature_stats(protocol::kFeatureStatsCapability);
  if (hooks_.feature_stats && std::find(hello.capabilities.begin(), hello.capabilities.end(),
                                        feature_stats) == hello.capabilities.end()) {
    hello.capabilities.push_back(feature_stats);
  }
  link_->send(protocol::MessageType::hello, protocol::to_metadata(hello));
  auto first = co_await link_->read_frame();
  if (!first) {
    co_return first.error();
  }
  if (first->type == protocol::MessageType::error) {
    auto message = protocol::parse_error_message(first->metadata);
    co_return fail(
        errc::permission_denied,
        "server refused us: " + (message ? message->message : std::string("(unreadable error)")));
  }
  auto welcome = protocol::parse_welcome(first->metadata);
  if (first->type != protocol::MessageType::welcome || !welcome) {
    co_return fail(errc::invalid_argument, "server did not welcome us");
  }
  if (welcome->protocol_version > hello.protocol_version) {
    co_return fail(errc::invalid_argument,
                   "server chose protocol " + std::to_string(welcome->protocol_version) +
                       ", above this client's " + std::to_string(hello.protocol_version));
  }
  identity_ = welcome->client_id;
  protocol_version_ = welcome->protocol_version;
  spdlog::info("connected to {} as '{}' (protocol {}); {} training and {} test samples", server_,
               identity_, protocol_version_, with_commas(hello.samples),
               with_commas(hello.test_samples));
  asio::co_spawn(io_, heartbeats(link_, ended_, sleeper_, welcome->heartbeat_seconds),
                 asio::detached);

  // The payload of the frame before, once handled: the next one is received into it, so
  // that a TRAIN of a large model does not map and zero fresh pages every round
  // (unless hooks_.keep_receive_buffer is off).
  std::vector<std::byte> spare;
  while (!*ended_) {
    auto frame = co_await link_->read_frame(std::move(spare));
    if (!frame) {
      link_->close();
      if (*ended_) {
        break;  // stop() closed the link under the read
      }
      co_return frame.error();
    }
    switch (frame->type) {
      case protocol::MessageType::heartbeat:
        break;
      case protocol::MessageType::goodbye:
        link_->close();
        *ended_ = true;
        co_return result<void>{};
      case protocol::MessageType::error: {
        auto message = protocol::parse_error_message(frame->metadata);
        spdlog::warn("server reported an error: {}",
                     message ? message->message : std::string("(unreadable)"));
        break;
      }
      case protocol::MessageType::secagg_neighbours:
      case protocol::MessageType::secagg_relay:
      case protocol::MessageType::secagg_survivors:
      case protocol::MessageType::secagg_unmask:
        on_secure_message(*frame);
        break;
      case protocol::MessageType::feature_stats_request:
        on_feature_stats_request(*frame);
        break;
      case protocol::MessageType::evaluate:
        co_await on_evaluate(*frame);
        break;
      case protocol::MessageType::train:
        if (auto served = co_await on_train(*frame); !served) {
          *ended_ = true;
          co_return served.error();
        }
        break;
      default:
        spdlog::warn("ignoring an unexpected {} message", protocol::message_type_name(frame->type));
    }
    if (hooks_.keep_receive_buffer) {
      spare = std::move(frame->payload);
    }
  }
  co_return result<void>{};
}

namespace {

const char* const kUnaudited = "the site's audit log cannot be written; nothing is sent";

// Writes one line of the site's audit log, if it keeps one. False when the line cannot be
// written: the caller answers with an ERROR instead, so nothing leaves the site unrecorded.
template <class Write>
bool audited(AuditLog* log, Write write) {
  if (log == nullptr) {
    return true;
  }
  if (auto written = write(*log); !written) {
    spdlog::error("site audit log: {}", written.error().message);
    return false;
  }
  return true;
}

void send_error(net::Link& link, errc code, std::string message) {
  link.send(protocol::MessageType::error, protocol::to_metadata(protocol::ErrorMessage{
                                              std::string(errc_name(code)), std::move(message)}));
}

}  // namespace

result<void> ClientSession::append_scaffold_change(const protocol::TrainRequest& request,
                                                   std::span<const float> global,
                                                   LocalResult& local,
                                                   std::span<const float> server_control) {
  auto optimizer = model::optimizer_config_from_json(request.settings.optimizer);
  if (!optimizer || optimizer->kind != model::OptimizerKind::sgd || optimizer->momentum != 0.0f ||
      !(optimizer->learning_rate > 0)) {
    return fail(errc::invalid_argument,
                "SCAFFOLD's control variate needs plain SGD steps at a positive learning rate");
  }
  if (local.steps == 0 || local.params.size() != global.size()) {
    return fail(errc::failed_precondition,
                "SCAFFOLD: local training took no step (or changed the model's size); no "
                "control variate can be computed");
  }
  // dc is written straight after the parameters, into the buffer the frame sends.
  const std::size_t n = global.size();
  local.params.resize(2 * n);
  const std::span<float> both(local.params);
  control_variate_change(global, both.first(n), server_control, local.steps,
                         optimizer->learning_rate, both.subspan(n));
  return {};
}

// The run's encoding of this round's step (trained - global), as 4-byte words for the
// frame (shared/protocol/update_encoding.hpp). int8's stochastic rounding is seeded from
// the round's nonce: reproducible for a (round, site), different across both.

std::vector<float> ClientSession::compress(const protocol::TrainRequest& request,
                                           std::span<const float> global,
                                           std::span<const float> trained) {
  std::vector<float> step(trained.size());
  for (std::size_t i = 0; i < step.size(); ++i) {
    step[i] = trained[i] - global[i];
  }
  const bool topk = request.compression.up == protocol::UpdateEncoding::topk;
  if (topk && hooks_.error_feedback != nullptr) {
    hooks_.error_feedback->add_residual(request.run_id, step);
  }
  Rng rng(std::hash<std::string>{}(request.nonce) ^ request.settings.seed);
  std::vector<float> residual;
  const auto bytes =
      protocol::encode_step(step, request.compression, rng, topk ? &residual : nullptr);
  if (topk && hooks_.error_feedback != nullptr) {
    hooks_.error_feedback->keep(request.run_id, std::move(residual));
  }
  std::vector<float> words(bytes.size() / sizeof(float));
  std::memcpy(words.data(), bytes.data(), words.size() * sizeof(float));
  return words;
}

asio::awaitable<result<void>> ClientSession::on_train(const protocol::Frame& frame) {
  auto request = protocol::parse_train_request(frame.metadata);
  auto global = protocol::payload_floats(frame.payload);
  if (!request || !global) {
    spdlog::warn("ignoring a malformed train request: {}",
                 !request ? request.error().message : global.error().message);
    co_return result<void>{};
  }
  // A model sent as f16 (compression.down): trained from its decoded values, and the step
  // sent back is taken against them (compress()).
  std::vector<float> received;
  if (request->compression.down == protocol::UpdateEncoding::f16) {
    auto decoded = protocol::decode_model_f16(frame.payload, request->compression.parameters);
    if (!decoded) {
      spdlog::warn("run {} round {}: the f16 model does not decode: {}", request->run_id,
                   request->round, decoded.error().message);
      send_error(*link_, errc::invalid_argument, "train payload: " + decoded.error().message);
      co_return result<void>{};
    }
    received = std::move(*decoded);
    global = std::span<const float>(received);
  }
  // SCAFFOLD: the payload is the model, then the server's control variate (as many values).
  std::span<const float> server_control;
  if (request->scaffold) {
    if (global->empty() || global->size() % 2 != 0 || request->privacy.secure_aggregation) {
      const std::string why =
          request->privacy.secure_aggregation
              ? "SCAFFOLD with secure aggregation is not a combination this site runs"
              : "train payload: a SCAFFOLD model and control variate are two halves of equal "
                "size; got " +
                    std::to_string(global->size()) + " values";
      spdlog::warn("run {} round {}: {}", request->run_id, request->round, why);
      send_error(*link_, errc::invalid_argument, why);
      co_return result<void>{};
    }
    const auto both = *global;
    global = both.first(both.size() / 2);
    server_control = both.subspan(both.size() / 2);
  }
  // The site decides before anything is trained (client/site_policy.hpp).
  const std::size_t parameter_count = global->size();
  if (!audited(hooks_.audit, [&](AuditLog& log) {
        return log.request_received(server_, *request, parameter_count);
      })) {
    send_error(*link_, errc::failed_precondition, kUnaudited);
    co_return result<void>{};
  }
  if (auto refused = hooks_.admit ? hooks_.admit(*request, parameter_count) : std::nullopt) {
    spdlog::warn("run {} round {}: refused by the site policy: {}", request->run_id, request->round,
                 refused->words);
    // Answered even when the refusal cannot be recorded: a refusal carries no data.
    (void)audited(hooks_.audit, [&](AuditLog& log) { return log.refused(*request, *refused); });
    send_error(*link_, errc::permission_denied, "site policy: " + refused->words);
    co_return result<void>{};
  }
  if (hooks_.dp_ledger) {
    if (auto over = hooks_.dp_ledger->check(*request)) {
      spdlog::warn("run {} round {}: refused by the site's DP accountant: {}", request->run_id,
                   request->round, *over);
      send_error(*link_, errc::permission_denied, "site DP accountant: " + *over);
      co_return result<void>{};
    }
  }
  std::vector<float> correction;
  if (request->scaffold) {
    correction = hooks_.control_variates != nullptr
                     ? hooks_.control_variates->correction(request->run_id, server_control)
                     : std::vector<float>(server_control.begin(), server_control.end());
  }
  LocalResult local = co_await hooks_.train(*request, *global, correction);
  if (hooks_.dp_ledger && local.record_dp) {
    // What DP-SGD really did, not what was asked, goes into the site's ledger — on disk
    // before the update may leave: privacy spent must not be forgotten by a restart.
    auto eps = hooks_.dp_ledger->record(request->run_id, *local.record_dp, request->privacy.delta);
    if (eps) {
      spdlog::info("run {} round {}: record-level DP, this site's epsilon now {:.4f} of {}",
                   request->run_id, request->round, *eps, request->privacy.epsilon);
    } else if (eps.error().code == errc::io_error) {
      spdlog::error("run {} round {}: the update is not sent: {}", request->run_id, request->round,
                    eps.error().message);
      send_error(*link_, errc::failed_precondition,
                 "site DP ledger: the round's privacy spend could not be recorded at the site");
      co_return result<void>{};
    }
  }
  if (local.failure) {
    spdlog::warn("run {} round {}: not trained: {}", request->run_id, request->round,
                 local.failure->message);
    (void)audited(hooks_.audit,
                  [&](AuditLog& log) { return log.not_trained(*request, *local.failure); });
    link_->send(protocol::MessageType::error,
                protocol::to_metadata(protocol::ErrorMessage{
                    std::string(errc_name(local.failure->code)), local.failure->message}));
    co_return result<void>{};
  }
  if (!audited(hooks_.audit, [&](AuditLog& log) { return log.trained(*request, local.report); })) {
    send_error(*link_, errc::failed_precondition, kUnaudited);
    co_return result<void>{};
  }
  if (hooks_.before_update) {
    const TrainedRound trained{request->run_id, request->round, local.report.train_seconds,
                               &local.params};
    const UpdateAction action = co_await hooks_.before_update(trained);
    if (action == UpdateAction::drop) {
      link_->close();
      co_return fail(errc::aborted, "round " + std::to_string(request->round) + ": update dropped");
    }
  }
  if (request->privacy.secure_aggregation) {
    // The update leaves only masked, after the key exchange (on_secure_message).
    auto secure =
        SecureParticipation::begin(*request, identity_, *global, std::move(local), hooks_.secure);
    if (!secure) {
      spdlog::warn("run {} round {}: cannot take part in secure aggregation: {}", request->run_id,
                   request->round, secure.error().message);
      send_error(*link_, secure.error().code, secure.error().message);
      co_return result<void>{};
    }
    secure_.emplace(std::move(*secure));
    send(secure_->advertise());
    spdlog::info("run {} round {}: trained {} samples in {:.1f} s; secure aggregation: keys sent",
                 request->run_id, request->round, with_commas(secure_->report().samples),
                 secure_->report().train_seconds);
    co_return result<void>{};
  }
  if (request->compression.up != protocol::UpdateEncoding::f32) {
    local.params = compress(*request, *global, local.params);
    local.report.encoding = request->compression.up;
  }
  if (request->scaffold) {
    if (auto appended = append_scaffold_change(*request, *global, local, server_control);
        !appended) {
      spdlog::warn("run {} round {}: {}", request->run_id, request->round,
                   appended.error().message);
      send_error(*link_, appended.error().code, appended.error().message);
      co_return result<void>{};
    }
    local.report.scaffold = true;
  }
  auto payload = std::make_shared<const std::vector<float>>(std::move(local.params));
  const auto bytes = payload->size() * sizeof(float);
  // Recorded before the bytes leave: the log may claim an update a broken link then lost,
  // never miss one that left.
  const bool recorded =
      audited(hooks_.audit,
              [&](AuditLog& log) { return log.update_sent(*request, local.report, bytes); }) &&
      (!local.report.evaluation || audited(hooks_.audit, [&](AuditLog& log) {
        return log.evaluation_sent(*request, *local.report.evaluation);
      }));
  if (!recorded) {
    send_error(*link_, errc::failed_precondition, kUnaudited);
    co_return result<void>{};
  }
  link_->send(protocol::MessageType::update, protocol::to_metadata(local.report), payload);
  if (request->scaffold && hooks_.control_variates != nullptr) {
    // c_i += dc, once sent; dc is the payload's second half.
    const std::span<const float> sent(*payload);
    hooks_.control_variates->advance(request->run_id, sent.subspan(sent.size() / 2));
  }
  ++rounds_trained_;
  spdlog::info("run {} round {}: trained {} samples in {:.1f} s, loss {:.2f}, update sent ({})",
               request->run_id, request->round, with_commas(local.report.samples),
               local.report.train_seconds, local.report.loss, megabytes(bytes));
  co_return result<void>{};
}

// Only aggregates of the training split leave, and only what the request can use: its
// feature count must be the site's. Malformed requests are ignored like malformed TRAINs
// (the server's deadline decides); a site that does not share statistics says so.
void ClientSession::on_feature_stats_request(const protocol::Frame& frame) {
  auto request = protocol::parse_feature_stats_request(frame.metadata);
  if (!request) {
    spdlog::warn("ignoring a malformed feature statistics request: {}", request.error().message);
    return;
  }
  if (!hooks_.feature_stats) {
    send_error(*link_, errc::failed_precondition, "this site does not report feature statistics");
    return;
  }
  auto report = hooks_.feature_stats(*request);
  if (!report) {
    spdlog::warn("run {}: feature statistics not sent: {}", request->run_id,
                 report.error().message);
    send_error(*link_, report.error().code, report.error().message);
    return;
  }
  if (!audited(hooks_.audit,
               [&](AuditLog& log) { return log.feature_stats_sent(server_, *report); })) {
    send_error(*link_, errc::failed_precondition, kUnaudited);
    return;
  }
  link_->send(protocol::MessageType::feature_stats, protocol::to_metadata(*report));
  spdlog::info("run {}: feature statistics of {} features sent", request->run_id, report->features);
}

// The server asks for an evaluation of a model, no training. Whatever the outcome, the
// server gets one EVALUATION echoing run, round and nonce, so its evaluating stage need not
// wait for the deadline; only the metrics of an ok answer leave the site, and they are
// recorded in the audit log first.
asio::awaitable<void> ClientSession::on_evaluate(const protocol::Frame& frame) {
  auto request = protocol::parse_evaluate_request(frame.metadata);
  auto params = protocol::payload_floats(frame.payload);
  if (!request || !params) {
    spdlog::warn("ignoring a malformed evaluate request: {}",
                 !request ? request.error().message : params.error().message);
    co_return;
  }
  protocol::EvaluationReport answer;
  answer.run_id = request->run_id;
  answer.round = request->round;
  answer.nonce = request->nonce;
  const auto not_evaluated = [&](protocol::EvaluationStatus status, std::string words) {
    // At most kMaxEvaluationMessage bytes, cut on a UTF-8 character boundary.
    if (words.size() > protocol::kMaxEvaluationMessage) {
      std::size_t cut = protocol::kMaxEvaluationMessage;
      while (cut > 0 && (static_cast<unsigned char>(words[cut]) & 0xC0) == 0x80) {
        --cut;
      }
      words.resize(cut);
    }
    answer.status = status;
    answer.message = words.empty() ? std::string("(no reason given)") : std::move(words);
    link_->send(protocol::MessageType::evaluation, protocol::to_metadata(answer));
  };
  const std::size_t parameter_count = params->size();
  if (!audited(hooks_.audit, [&](AuditLog& log) {
        return log.evaluation_requested(server_, *request, parameter_count);
      })) {
    not_evaluated(protocol::EvaluationStatus::failed, kUnaudited);
    co_return;
  }
  if (auto refused = hooks_.admit_evaluation ? hooks_.admit_evaluation(*request, parameter_count)
                                             : std::nullopt) {
    spdlog::warn("run {} round {}: evaluation refused by the site policy: {}", request->run_id,
                 request->round, refused->words);
    // Answered even when the refusal cannot be recorded: a refusal carries no data.
    (void)audited(hooks_.audit,
                  [&](AuditLog& log) { return log.evaluation_refused(*request, *refused); });
    not_evaluated(protocol::EvaluationStatus::refused, "site policy: " + refused->words);
    co_return;
  }
  if (!hooks_.evaluate) {
    not_evaluated(protocol::EvaluationStatus::failed, "this site does not evaluate models");
    co_return;
  }
  auto evaluation = co_await hooks_.evaluate(*request, *params);
  if (!evaluation) {
    spdlog::warn("run {} round {}: not evaluated: {}", request->run_id, request->round,
                 evaluation.error().message);
    (void)audited(hooks_.audit,
                  [&](AuditLog& log) { return log.not_evaluated(*request, evaluation.error()); });
    not_evaluated(protocol::EvaluationStatus::failed, evaluation.error().message);
    co_return;
  }
  if (!audited(hooks_.audit,
               [&](AuditLog& log) { return log.evaluation_sent(*request, *evaluation); })) {
    not_evaluated(protocol::EvaluationStatus::failed, kUnaudited);
    co_return;
  }
  answer.status = protocol::EvaluationStatus::ok;
  answer.loss = evaluation->loss;
  answer.accuracy = evaluation->accuracy;
  answer.samples = evaluation->samples;
  link_->send(protocol::MessageType::evaluation, protocol::to_metadata(answer));
  ++evaluations_sent_;
  spdlog::info(
      "run {} round {}: evaluated the {}model on {} test samples: accuracy {:.4f}, "
      "loss {:.4f}",
      request->run_id, request->round, request->final_model ? "final " : "",
      with_commas(evaluation->samples), evaluation->accuracy, evaluation->loss);
}

void ClientSession::send(const OutgoingFrame& frame) {
  link_->send(frame.type, frame.metadata, frame.payload);
}

// One step of secure aggregation. A step that fails (a neighbour's key binding does not
// verify, a tampered share, too few survivors) is reported to the server, which counts
// us as having left the round; nothing about our update is revealed by leaving.
void ClientSession::on_secure_message(const protocol::Frame& frame) {
  if (!secure_ || secure_->finished()) {
    spdlog::warn("ignoring a {} message: no secure round in progress",
                 protocol::message_type_name(frame.type));
    return;
  }
  auto answer = secure_->on_message(frame);
  if (!answer) {
    spdlog::warn("run {} round {}: leaving the secure aggregation: {}", secure_->request().run_id,
                 secure_->round(), answer.error().message);
    send_error(*link_, answer.error().code, answer.error().message);
    secure_.reset();
    return;
  }
  if (answer->type == protocol::MessageType::secagg_masked) {
    // What leaves the site is recorded before it leaves (as for a plain update).
    if (!audited(hooks_.audit, [&](AuditLog& log) {
          return log.update_sent(secure_->request(), secure_->report(), answer->bytes());
        })) {
      send_error(*link_, errc::failed_precondition, kUnaudited);
      secure_.reset();
      return;
    }
    ++rounds_trained_;
    spdlog::info("run {} round {}: masked update sent ({})", secure_->request().run_id,
                 secure_->round(), megabytes(answer->bytes()));
  }
  send(*answer);
  if (secure_->finished()) {
    spdlog::info("run {} round {}: secure aggregation done (unmasking shares sent)",
                 secure_->request().run_id, secure_->round());
  }
}

}  // namespace fedcore::client
