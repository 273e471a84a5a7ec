#include "client/audit_log.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <sys/file.h>
#include <unistd.h>

#include <openssl/evp.h>

namespace fedcore::client {

namespace {

// Lines we write are far shorter; a longer one is not ours, and reading stops there
// instead of growing a buffer without bound (docs/engineering.md R3).
constexpr std::size_t kMaxLine = 1 << 20;
const std::string kNoPrevious(64, '0');

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // EVP_Digest fails for SHA-256 only when memory runs out; that is not an expected error.
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP_Digest(SHA-256) failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0x0f];
  }
  return hex;
}

std::string iso_time(std::int64_t wall_ms) {
  const std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const auto n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(wall_ms % 1000));
  return text;
}

error system_failure(errc code, const std::string& what, int saved_errno) {
  return fail(code, what + ": " + std::strerror(saved_errno));
}

// Calls `line(text, number)` for every newline-terminated line of the file (numbered from
// 1), stopping at the first error it returns. Errors: not_found, io_error, data_loss for a
// torn last line or a line over kMaxLine.
result<std::uint64_t> for_each_line(
    const std::string& path,
    const std::function<result<void>(std::string_view, std::uint64_t)>& line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(errno == ENOENT ? errc::not_found : errc::io_error,
                "audit log '" + path + "': cannot be read");
  }
  std::string current;
  std::uint64_t number = 0;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const auto got = static_cast<std::size_t>(in.gcount());
    for (std::size_t i = 0; i < got; ++i) {
      if (buffer[i] != '\n') {
        current += buffer[i];
        if (current.size() > kMaxLine) {
          return fail(errc::data_loss, "audit log '" + path + "' line " +
                                           std::to_string(number + 1) +
                                           ": longer than any audit line");
        }
        continue;
      }
      ++number;
      if (auto ok = line(current, number); !ok) {
        return ok.error();
      }
      current.clear();
    }
  }
  if (in.bad()) {
    return fail(errc::io_error, "audit log '" + path + "': read failed");
  }
  if (!current.empty()) {
    return fail(errc::data_loss, "audit log '" + path + "' line " + std::to_string(number + 1) +
                                     ": torn (no newline at the end of the file)");
  }
  return number;
}

nlohmann::json privacy_json(const protocol::PrivacyTerms& p) {
  nlohmann::json j = {{"secure_aggregation", p.secure_aggregation},
                      {"dp", protocol::dp_mode_name(p.dp)},
                      {"epsilon", p.epsilon},
                      {"delta", p.delta}};
  if (p.dp == protocol::DpMode::record) {
    j["clip_norm"] = p.clip_norm;
    j["noise_multiplier"] = p.noise_multiplier;
  }
  return j;
}

nlohmann::json round_of(const protocol::TrainRequest& request) {
  return {{"run", request.run_id}, {"round", request.round}};
}

}  // namespace

AuditLog::AuditLog(std::string path, int fd, const Clock& clock, std::uint64_t seq,
                   std::string head)
    : path_(std::move(path)), fd_(fd), clock_(clock), seq_(seq), head_(std::move(head)) {}

AuditLog::~AuditLog() {
  ::close(fd_);  // also releases the flock
}

result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path, const Clock& clock) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return system_failure(errc::io_error, "audit log '" + path + "': cannot open", errno);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    ::close(fd);
    if (saved == EWOULDBLOCK) {
      return fail(errc::failed_precondition,
                  "audit log '" + path + "' is in use by another process");
    }
    return system_failure(errc::io_error, "audit log '" + path + "': cannot lock", saved);
  }
  // Continue the chain from the last line (the chain itself is verify_audit_log's job).
  std::string last;
  auto lines = for_each_line(path, [&](std::string_view text, std::uint64_t) -> result<void> {
    last.assign(text);
    return {};
  });
  if (!lines) {
    ::close(fd);
    return lines.error();
  }
  std::uint64_t seq = 0;
  std::string head = kNoPrevious;
  if (*lines > 0) {
    const auto j = nlohmann::json::parse(last, nullptr, false);
    if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned()) {
      ::close(fd);
      return fail(errc::data_loss, "audit log '" + path + "' line " + std::to_string(*lines) +
                                       ": not an audit line");
    }
    seq = j["seq"].get<std::uint64_t>();
    head = sha256_hex(last);
  }
  return std::unique_ptr<AuditLog>(new AuditLog(path, fd, clock, seq, std::move(head)));
}

result<void> AuditLog::record(std::string_view event, const nlohmann::json& fields) {
  if (broken_) {
    return fail(errc::io_error, "audit log '" + path_ + "' is broken by an earlier failed write");
  }
  const auto now = clock_.wall_ms();
  nlohmann::ordered_json line = {
      {"seq", seq_ + 1}, {"time", iso_time(now)}, {"time_ms", now}, {"event", event}};
  for (const auto& [key, value] : fields.items()) {
    line[key] = value;
  }
  line["prev"] = head_;
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  const std::string with_newline = text + "\n";
  // One write() of the whole line: with O_APPEND it lands at the end in one piece.
  ssize_t written = -1;
  do {
    written = ::write(fd_, with_newline.data(), with_newline.size());
  } while (written < 0 && errno == EINTR);
  if (written != static_cast<ssize_t>(with_newline.size())) {
    const int saved = written < 0 ? errno : ENOSPC;
    broken_ = true;
    return system_failure(errc::io_error, "audit log '" + path_ + "': write failed", saved);
  }
  if (::fsync(fd_) != 0) {
    const int saved = errno;
    broken_ = true;
    return system_failure(errc::io_error, "audit log '" + path_ + "': fsync failed", saved);
  }
  ++seq_;
  head_ = sha256_hex(text);
  return {};
}

result<void> AuditLog::request_received(std::string_view server,
                                        const protocol::TrainRequest& request,
                                        std::size_t parameter_count) {
  auto fields = round_of(request);
  const auto type = request.model_spec.find("type");
  fields["server"] = server;
  fields["model_type"] =
      type != request.model_spec.end() && type->is_string() ? type->get<std::string>() : "";
  fields["model"] = request.model_spec;
  fields["parameters"] = parameter_count;
  fields["epochs"] = request.settings.epochs;
  fields["batch_size"] = request.settings.batch_size;
  fields["privacy"] = privacy_json(request.privacy);
  return record("request_received", fields);
}

result<void> AuditLog::refused(const protocol::TrainRequest& request,
                               const PolicyRefusal& refusal) {
  auto fields = round_of(request);
  fields["reason"] = refusal_reason_name(refusal.reason);
  fields["words"] = refusal.words;
  return record("refused", fields);
}

result<void> AuditLog::not_trained(const protocol::TrainRequest& request, const error& why) {
  auto fields = round_of(request);
  fields["code"] = errc_name(why.code);
  fields["words"] = why.message;
  return record("not_trained", fields);
}

result<void> AuditLog::trained(const protocol::TrainRequest& request,
                               const protocol::UpdateReport& report) {
  auto fields = round_of(request);
  fields["samples"] = report.samples;
  fields["seconds"] = report.train_seconds;
  fields["loss"] = report.loss;
  return record("trained", fields);
}

result<void> AuditLog::update_sent(const protocol::TrainRequest& request,
                                   const protocol::UpdateReport& report, std::uint64_t bytes) {
  auto fields = round_of(request);
  fields["bytes"] = bytes;
  fields["samples"] = report.samples;
  return record("update_sent", fields);
}

result<void> AuditLog::evaluation_sent(const protocol::TrainRequest& request,
                                       const protocol::LocalEvaluation& evaluation) {
  auto fields = round_of(request);
  fields["samples"] = evaluation.samples;
  fields["loss"] = evaluation.loss;
  fields["accuracy"] = evaluation.accuracy;
  return record("evaluation_sent", fields);
}

result<void> AuditLog::evaluation_requested(std::string_view server,
                                            const protocol::EvaluateRequest& request,
                                            std::size_t parameter_count) {
  nlohmann::json fields = {{"run", request.run_id}, {"round", request.round}};
  const auto type = request.model_spec.find("type");
  fields["server"] = server;
  fields["final"] = request.final_model;
  fields["model_type"] =
      type != request.model_spec.end() && type->is_string() ? type->get<std::string>() : "";
  fields["model"] = request.model_spec;
  fields["parameters"] = parameter_count;
  fields["privacy"] = privacy_json(request.privacy);
  return record("evaluation_requested", fields);
}

result<void> AuditLog::evaluation_refused(const protocol::EvaluateRequest& request,
                                          const PolicyRefusal& refusal) {
  return record("evaluation_refused", {{"run", request.run_id},
                                       {"round", request.round},
                                       {"reason", refusal_reason_name(refusal.reason)},
                                       {"words", refusal.words}});
}

result<void> AuditLog::not_evaluated(const protocol::EvaluateRequest& request, const error& why) {
  return record("not_evaluated", {{"run", request.run_id},
                                  {"round", request.round},
                                  {"code", errc_name(why.code)},
                                  {"words", why.message}});
}

result<void> AuditLog::evaluation_sent(const protocol::EvaluateRequest& request,
                                       const protocol::LocalEvaluation& evaluation) {
  return record("evaluation_sent", {{"run", request.run_id},
                                    {"round", request.round},
                                    {"for", "evaluate"},
                                    {"final", request.final_model},
                                    {"samples", evaluation.samples},
                                    {"loss", evaluation.loss},
                                    {"accuracy", evaluation.accuracy}});
}

result<void> AuditLog::feature_stats_sent(std::string_view server,
                                          const protocol::FeatureStatsReport& report) {
  const auto samples = report.count.empty() ? std::uint64_t{0} : report.count.front();
  return record("feature_stats_sent", {{"server", server},
                                       {"run", report.run_id},
                                       {"features", report.features},
                                       {"samples", samples}});
}

result<void> AuditLog::server_refused(std::string_view server, const PolicyRefusal& refusal) {
  return record("server_refused", {{"server", server},
                                   {"reason", refusal_reason_name(refusal.reason)},
                                   {"words", refusal.words}});
}

result<AuditSummary> verify_audit_log(const std::string& path) {
  std::string previous = kNoPrevious;
  auto lines = for_each_line(path, [&](std::string_view text, std::uint64_t n) -> result<void> {
    auto broken = [&](const std::string& what) {
      return fail(errc::data_loss,
                  "audit log '" + path + "' line " + std::to_string(n) + ": " + what);
    };
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("prev") || !j["prev"].is_string() || !j.contains("seq") ||
        !j["seq"].is_number_unsigned()) {
      return broken("not an audit line");
    }
    if (j["prev"].get<std::string>() != previous) {
      return broken(n == 1
                        ? "the chain is broken: the first line does not start a chain "
                          "(lines were removed before it)"
                        : "the chain is broken: it does not carry the hash of line " +
                              std::to_string(n - 1) + " (a line was changed, inserted or removed)");
    }
    if (j["seq"].get<std::uint64_t>() != n) {
      return broken("sequence number " + std::to_string(j["seq"].get<std::uint64_t>()) +
                    ", expected " + std::to_string(n));
    }
    previous = sha256_hex(text);
    return {};
  });
  if (!lines) {
    return lines.error();
  }
  return AuditSummary{*lines, previous};
}

}  // namespace fedcore::client
