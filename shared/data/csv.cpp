#include "data/csv.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace fedcore::data {
namespace {

std::string file_prefix(const std::string& path) {
  return "file '" + path + "': ";
}

std::string at_line(const std::string& path, std::size_t line) {
  return file_prefix(path) + "line " + std::to_string(line);
}

enum class LineStatus { line, end, too_long };

// Reads one line without its terminator (and without a trailing CR). Reading character by
// character through the stream buffer keeps memory bounded by kCsvMaxLineBytes even when
// a file has no newlines at all, which std::getline would not.
LineStatus read_line(std::streambuf& in, std::string& line) {
  line.clear();
  bool any = false;
  for (;;) {
    const int c = in.sbumpc();
    if (c == std::char_traits<char>::eof()) {
      break;
    }
    any = true;
    if (c == '\n') {
      break;
    }
    if (line.size() >= kCsvMaxLineBytes) {
      return LineStatus::too_long;
    }
    line.push_back(static_cast<char>(c));
  }
  if (!any) {
    return LineStatus::end;
  }
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
  return LineStatus::line;
}

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t") == std::string_view::npos;
}

// Trims spaces and tabs, then one pair of surrounding double quotes.
std::string_view clean_field(std::string_view field) {
  const auto first = field.find_first_not_of(" \t");
  if (first == std::string_view::npos) {
    return {};
  }
  field = field.substr(first, field.find_last_not_of(" \t") - first + 1);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    field = field.substr(1, field.size() - 2);
  }
  return field;
}

// Splits `line` into cleaned fields. Callers count the delimiters first, so a row is never
// split into more fields than they accept.
void split_fields(std::string_view line, char delimiter, std::vector<std::string_view>& fields) {
  fields.clear();
  for (;;) {
    const auto end = line.find(delimiter);
    fields.push_back(clean_field(line.substr(0, end)));
    if (end == std::string_view::npos) {
      return;
    }
    line.remove_prefix(end + 1);
  }
}

std::size_t count_fields(std::string_view line, char delimiter) {
  return static_cast<std::size_t>(std::count(line.begin(), line.end(), delimiter)) + 1;
}

enum class NumberStatus { ok, not_a_number, not_finite, out_of_range };

NumberStatus parse_float(std::string_view text, float& out) {
  // from_chars rejects a leading '+', which spreadsheets sometimes write.
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size()) {
    return NumberStatus::not_a_number;
  }
  if (ec == std::errc::result_out_of_range) {
    return NumberStatus::out_of_range;
  }
  if (ec != std::errc()) {
    return NumberStatus::not_a_number;
  }
  if (!std::isfinite(value)) {
    return NumberStatus::not_finite;
  }
  if (std::abs(value) > std::numeric_limits<float>::max()) {
    return NumberStatus::out_of_range;
  }
  out = static_cast<float>(value);
  return NumberStatus::ok;
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

struct RawLabel {
  std::string text;
  std::size_t line;
};

// Turns label strings into class indices: integers as themselves, anything else by rank
// among the sorted distinct strings.
result<void> assign_labels(const std::string& path, const std::string& column,
                           const std::vector<RawLabel>& raw, Dataset& out) {
  std::vector<std::int64_t> integers;
  integers.reserve(raw.size());
  for (const auto& label : raw) {
    auto value = parse_integer(label.text);
    if (!value) {
      break;
    }
    integers.push_back(*value);
  }
  out.labels.resize(raw.size());
  if (integers.size() == raw.size()) {
    std::int64_t max_label = 0;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      const std::string where = at_line(path, raw[i].line) + ", column '" + column + "': label ";
      if (integers[i] < 0) {
        return fail(errc::invalid_argument,
                    where + raw[i].text + " is negative; integer labels must be >= 0");
      }
      if (integers[i] > kCsvMaxIntegerLabel) {
        return fail(errc::resource_exhausted, where + raw[i].text +
                                                  " is too large; integer labels must be <= " +
                                                  std::to_string(kCsvMaxIntegerLabel));
      }
      out.labels[i] = static_cast<std::int32_t>(integers[i]);
      max_label = std::max(max_label, integers[i]);
    }
    out.num_classes = static_cast<std::int32_t>(max_label + 1);
    return {};
  }
  std::map<std::string_view, std::int32_t> classes;
  for (const auto& label : raw) {
    classes.emplace(label.text, 0);
  }
  std::int32_t next = 0;
  for (auto& [name, index] : classes) {
    index = next++;
    out.class_names.emplace_back(name);
  }
  for (std::size_t i = 0; i < raw.size(); ++i) {
    out.labels[i] = classes.at(raw[i].text);
  }
  out.num_classes = next;
  return {};
}

}  // namespace

result<Dataset> load_csv(const std::string& path, const CsvOptions& options) {
  const char delimiter = options.delimiter;
  if (delimiter == '"' || delimiter == '\r' || delimiter == '\n') {
    return fail(errc::invalid_argument,
                file_prefix(path) + "the CSV delimiter must not be a double quote, CR or LF");
  }
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return fail(errc::not_found, file_prefix(path) + "does not exist");
  }
  if (ec || std::filesystem::is_directory(status)) {
    return fail(errc::io_error, file_prefix(path) + "is not a readable file");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return fail(errc::io_error, file_prefix(path) + "cannot be opened");
  }
  std::streambuf& in = *file.rdbuf();

  std::string line;
  std::size_t line_number = 1;
  const auto too_long = [&] {
    return fail(errc::resource_exhausted, at_line(path, line_number) + " is longer than " +
                                              std::to_string(kCsvMaxLineBytes) + " bytes");
  };

  switch (read_line(in, line)) {
    case LineStatus::end:
      return fail(errc::invalid_argument, file_prefix(path) + "is empty; expected a header row");
    case LineStatus::too_long:
      return too_long();
    case LineStatus::line:
      break;
  }
  if (line.starts_with("\xEF\xBB\xBF")) {
    line.erase(0, 3);
  }
  if (is_blank(line)) {
    return fail(errc::invalid_argument,
                file_prefix(path) + "line 1 is blank; expected a header row");
  }
  const std::size_t header_fields = count_fields(line, delimiter);
  if (header_fields > kCsvMaxColumns) {
    return fail(errc::resource_exhausted,
                file_prefix(path) + "header has " + std::to_string(header_fields) +
                    " columns; the limit is " + std::to_string(kCsvMaxColumns));
  }
  std::vector<std::string_view> fields;
  split_fields(line, delimiter, fields);
  const std::vector<std::string> header(fields.begin(), fields.end());
  const std::size_t columns = header.size();

  std::size_t label_index = columns - 1;
  if (!options.label_column.empty()) {
    const auto found = std::find(header.begin(), header.end(), options.label_column);
    if (found == header.end()) {
      return fail(errc::invalid_argument, file_prefix(path) + "label column '" +
                                              options.label_column + "' is not in the header");
    }
    label_index = static_cast<std::size_t>(found - header.begin());
  }
  if (columns < 2) {
    return fail(errc::invalid_argument,
                file_prefix(path) + "has no feature columns besides the label column");
  }
  const std::string& label_name = header[label_index];
  const std::size_t num_features = columns - 1;

  std::vector<float> values;  // row after row, num_features each
  std::vector<RawLabel> labels;
  std::size_t pending_blank = 0;  // line number of the first blank line not yet excused
  for (;;) {
    ++line_number;
    const LineStatus read = read_line(in, line);
    if (read == LineStatus::end) {
      break;
    }
    if (read == LineStatus::too_long) {
      return too_long();
    }
    if (is_blank(line)) {
      // Blank lines are fine at the end of a file but would hide lost rows in the middle.
      if (pending_blank == 0) {
        pending_blank = line_number;
      }
      continue;
    }
    if (pending_blank != 0) {
      return fail(errc::invalid_argument, at_line(path, pending_blank) +
                                              " is blank but data follows on line " +
                                              std::to_string(line_number));
    }
    if (labels.size() == kCsvMaxRows) {
      return fail(errc::resource_exhausted, at_line(path, line_number) + ": more than " +
                                                std::to_string(kCsvMaxRows) + " data rows");
    }
    const std::size_t row_fields = count_fields(line, delimiter);
    if (row_fields != columns) {
      return fail(errc::invalid_argument, at_line(path, line_number) + ": " +
                                              std::to_string(row_fields) + " fields, header has " +
                                              std::to_string(columns));
    }
    split_fields(line, delimiter, fields);
    // Built only on the error paths: most files have millions of cells and no errors.
    const auto where = [&](std::size_t c) {
      return at_line(path, line_number) + ", column '" + header[c] + "': ";
    };
    for (std::size_t c = 0; c < columns; ++c) {
      if (c == label_index) {
        if (fields[c].empty()) {
          return fail(errc::invalid_argument, where(c) + "empty label");
        }
        labels.push_back(RawLabel{std::string(fields[c]), line_number});
        continue;
      }
      float value = 0;
      switch (parse_float(fields[c], value)) {
        case NumberStatus::ok:
          values.push_back(value);
          break;
        case NumberStatus::not_a_number:
          return fail(errc::invalid_argument,
                      where(c) + "'" + std::string(fields[c]) + "' is not a number");
        case NumberStatus::not_finite:
          return fail(errc::invalid_argument,
                      where(c) + "'" + std::string(fields[c]) + "' is not finite");
        case NumberStatus::out_of_range:
          return fail(errc::invalid_argument,
                      where(c) + "'" + std::string(fields[c]) + "' is out of float range");
      }
    }
  }
  if (file.bad()) {
    return fail(errc::io_error, file_prefix(path) + "read failed");
  }
  if (labels.empty()) {
    return fail(errc::invalid_argument, file_prefix(path) + "has a header but no data rows");
  }

  Dataset out;
  out.features =
      Eigen::Map<const Eigen::MatrixXf>(values.data(), static_cast<Eigen::Index>(num_features),
                                        static_cast<Eigen::Index>(labels.size()));
  out.sample_shape = {static_cast<std::int64_t>(num_features)};
  for (std::size_t c = 0; c < columns; ++c) {
    if (c != label_index) {
      out.feature_names.push_back(header[c]);
    }
  }
  auto assigned = assign_labels(path, label_name, labels, out);
  if (!assigned) {
    return assigned.error();
  }
  return out;
}

}  // namespace fedcore::data
