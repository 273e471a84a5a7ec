// What fedcore-sim prints while it runs, in one of three modes:
//   normal  a one-line summary per round and, on a terminal, a progress bar with the
//           elapsed time and an ETA across rounds, redrawn under the last line;
//   quiet   nothing until the final summary lines;
//   jsonl   one JSON object per line: {"type":"round",...} per round,
//           {"type":"baseline_epoch",...} per baseline epoch, then {"type":"summary",...}.
// Everything goes to the FILE* given (stdout in the tool); notes go to stderr in normal
// mode only.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/baseline.hpp"
#include "sim/federation_run.hpp"

namespace fedcore::sim {

enum class OutputMode { normal, quiet, jsonl };

class Progress {
 public:
  // `terminal`: whether `out` is a terminal (draw the bar) or a file/pipe (lines only).
  Progress(OutputMode mode, std::FILE* out, bool terminal);

  void note(const std::string& text);
  void begin_rounds(std::int64_t total_rounds);
  void round(const RoundRow& row);
  void begin_baseline(int epochs);
  void baseline_epoch(const EpochRow& row);
  // The final lines (or the summary object in jsonl mode).
  void summary(const nlohmann::json& summary, const std::string& human_text);

  // "[#######.............]  7/20 rounds  elapsed 1m02s  ETA 1m55s"
  static std::string bar(std::int64_t done, std::int64_t total, double elapsed_s);
  static std::string duration(double seconds);

 private:
  void clear_bar();
  void draw_bar(std::int64_t done, std::int64_t total, const char* unit);

  OutputMode mode_;
  std::FILE* out_;
  bool terminal_;
  bool bar_shown_ = false;
  std::int64_t total_ = 0;
  int epochs_ = 0;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace fedcore::sim
