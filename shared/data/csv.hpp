// CSV reader for numeric tabular data with a header row.
//
// Every column except the label column is a float feature; each data row becomes one
// sample (one column of Dataset::features, sample_shape {feature count}). Labels that are
// all integers are used as class indices directly (num_classes = max + 1); otherwise the
// distinct label strings, sorted, become class_names and a label's class is its position.
//
// Accepted: CRLF or LF line ends, a UTF-8 byte order mark, spaces around fields, a missing
// final newline, blank lines at the end, and fields wrapped in double quotes ("1.5") as
// long as they contain no delimiter or quote. Not accepted: quoted delimiters, escaped
// quotes, multi-line fields, empty (missing) values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"

namespace fedcore::data {

inline constexpr std::size_t kCsvMaxLineBytes = std::size_t{1} << 20;
inline constexpr std::size_t kCsvMaxColumns = 10'000;
inline constexpr std::size_t kCsvMaxRows = 10'000'000;
inline constexpr std::int64_t kCsvMaxIntegerLabel = 999'999;

struct CsvOptions {
  std::string label_column;  // header name of the label column; empty means the last column
  char delimiter = ',';
};

// Loads `path`. Messages name the file and, where there is one, the line (1-based, the
// header is line 1) and column. Errors:
//   not_found           the file does not exist;
//   io_error            it cannot be opened or read;
//   invalid_argument    the delimiter is '"', CR or LF; the file is empty or its first line
//                       is blank (no header); the label column is not in the header; the
//                       header has only the label column; no data rows; a row with a
//                       different number of fields than the header ("line 17: 30 fields,
//                       header has 31"); a feature that is not a number ("line 5, column
//                       'mean_area': 'abc' is not a number"), not finite, or beyond float
//                       range; an empty label; a negative integer label; a blank line
//                       followed by more data;
//   resource_exhausted  a line longer than kCsvMaxLineBytes, a header with more than
//                       kCsvMaxColumns columns, more than kCsvMaxRows data rows, or an
//                       integer label above kCsvMaxIntegerLabel.
result<Dataset> load_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace fedcore::data
