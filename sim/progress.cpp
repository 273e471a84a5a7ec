#include "sim/progress.hpp"

#include <nlohmann/json.hpp>

namespace fedcore::sim {
namespace {

std::string megabytes(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", double(bytes) / 1e6);
  return text;
}

}  // namespace

Progress::Progress(OutputMode mode, std::FILE* out, bool terminal)
    : mode_(mode), out_(out), terminal_(terminal), started_(std::chrono::steady_clock::now()) {}

std::string Progress::duration(double s) {
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%dm%02ds", int(s) / 60, int(s) % 60);
  } else {
    std::snprintf(text, sizeof text, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  }
  return text;
}

std::string Progress::bar(std::int64_t done, std::int64_t total, double elapsed_s) {
  constexpr int kWidth = 30;
  const double share = total > 0 ? double(done) / double(total) : 0.0;
  const int filled = static_cast<int>(share * kWidth);
  std::string out = "[" + std::string(std::size_t(filled), '#') +
                    std::string(std::size_t(kWidth - filled), '.') + "] ";
  char text[96];
  std::snprintf(text, sizeof text, "%lld/%lld", static_cast<long long>(done),
                static_cast<long long>(total));
  out += text;
  out += "  elapsed " + duration(elapsed_s);
  if (done > 0 && done < total) {
    out += "  ETA " + duration(elapsed_s / double(done) * double(total - done));
  }
  return out;
}

void Progress::clear_bar() {
  if (bar_shown_) {
    std::fputs("\r\033[K", out_);
    bar_shown_ = false;
  }
}

void Progress::draw_bar(std::int64_t done, std::int64_t total, const char* unit) {
  if (!terminal_ || mode_ != OutputMode::normal) {
    return;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::fprintf(out_, "%s %s", bar(done, total, elapsed).c_str(), unit);
  bar_shown_ = true;
  std::fflush(out_);
}

void Progress::note(const std::string& text) {
  if (mode_ == OutputMode::normal) {
    clear_bar();
    std::fprintf(out_, "%s\n", text.c_str());
    std::fflush(out_);
  }
}

void Progress::begin_rounds(std::int64_t total_rounds) {
  total_ = total_rounds;
  started_ = std::chrono::steady_clock::now();
  draw_bar(0, total_, "rounds");
}

void Progress::round(const RoundRow& r) {
  if (mode_ == OutputMode::jsonl) {
    nlohmann::json j{{"type", "round"},
                     {"round", r.round},
                     {"accuracy", r.accuracy},
                     {"loss", r.loss},
                     {"participants", r.participants},
                     {"selected", r.selected},
                     {"rejected", r.rejected},
                     {"dropped", r.dropped},
                     {"timed_out", r.timed_out},
                     {"bytes_up", r.bytes_up},
                     {"bytes_down", r.bytes_down},
                     {"duration_s", r.duration_s},
                     {"train_loss", r.train_loss},
                     {"elapsed_s", r.elapsed_s}};
    std::fprintf(out_, "%s\n", j.dump().c_str());
    std::fflush(out_);
    return;
  }
  if (mode_ != OutputMode::normal) {
    return;
  }
  clear_bar();
  std::string faults;
  if (r.dropped > 0 || r.timed_out > 0 || r.rejected > 0) {
    faults = "  (" + std::to_string(r.dropped) + " dropped, " + std::to_string(r.timed_out) +
             " timed out, " + std::to_string(r.rejected) + " rejected)";
  }
  std::fprintf(out_,
               "round %3lld/%lld  accuracy %6.2f%%  loss %.4f  train loss %.4f  %lld/%lld "
               "clients  up %s  down %s  %.1f s%s\n",
               static_cast<long long>(r.round), static_cast<long long>(total_), 100 * r.accuracy,
               r.loss, r.train_loss, static_cast<long long>(r.participants),
               static_cast<long long>(r.selected), megabytes(r.bytes_up).c_str(),
               megabytes(r.bytes_down).c_str(), r.duration_s, faults.c_str());
  draw_bar(r.round, total_, "rounds");
  std::fflush(out_);
}

void Progress::begin_baseline(int epochs) {
  epochs_ = epochs;
  started_ = std::chrono::steady_clock::now();
  note("centralized baseline: " + std::to_string(epochs) + " epoch(s) on the whole training set");
  draw_bar(0, epochs_, "epochs");
}

void Progress::baseline_epoch(const EpochRow& e) {
  if (mode_ == OutputMode::jsonl) {
    nlohmann::json j{{"type", "baseline_epoch"},   {"epoch", e.epoch},
                     {"accuracy", e.accuracy},     {"loss", e.loss},
                     {"train_loss", e.train_loss}, {"seconds", e.seconds}};
    std::fprintf(out_, "%s\n", j.dump().c_str());
    std::fflush(out_);
    return;
  }
  if (mode_ != OutputMode::normal) {
    return;
  }
  clear_bar();
  std::fprintf(out_, "epoch %3d/%d  accuracy %6.2f%%  loss %.4f  train loss %.4f  %.1f s\n",
               e.epoch, epochs_, 100 * e.accuracy, e.loss, e.train_loss, e.seconds);
  draw_bar(e.epoch, epochs_, "epochs");
  std::fflush(out_);
}

void Progress::summary(const nlohmann::json& summary, const std::string& human_text) {
  clear_bar();
  if (mode_ == OutputMode::jsonl) {
    nlohmann::json j = summary;
    j["type"] = "summary";
    std::fprintf(out_, "%s\n", j.dump().c_str());
  } else {
    std::fputs(human_text.c_str(), out_);
  }
  std::fflush(out_);
}

}  // namespace fedcore::sim
