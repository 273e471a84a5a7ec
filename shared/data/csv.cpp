#include "shared/data/csv.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
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

struct FileCloser {
  void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

// Reads lines one character at a time, so memory stays bounded by kCsvMaxLineBytes even
// for a file with no newlines at all (std::getline would grow without limit).
class LineReader {
 public:
  LineReader(std::FILE* file, const std::string& path) : file_(file), path_(path) {}

  // The next line without its LF or CRLF in `line`; false at the end of the file.
  result<bool> next(std::string& line) {
    line.clear();
    ++number_;
    bool any = false;
    for (int c = std::getc(file_); c != EOF; c = std::getc(file_)) {
      any = true;
      if (c == '\n') {
        break;
      }
      if (line.size() >= kCsvMaxLineBytes) {
        return fail(errc::resource_exhausted, at_line(path_, number_) + " is longer than " +
                                                  std::to_string(kCsvMaxLineBytes) + " bytes");
      }
      line.push_back(static_cast<char>(c));
    }
    if (std::ferror(file_)) {
      return fail(errc::io_error,
                  at_line(path_, number_) + ": read failed: " + std::strerror(errno));
    }
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    return any;
  }

  // 1-based number of the line last returned.
  std::size_t number() const noexcept { return number_; }

 private:
  std::FILE* file_;
  const std::string& path_;
  std::size_t number_ = 0;
};

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

struct Header {
  std::vector<std::string> names;
  std::size_t label_index = 0;
};

result<Header> parse_header(const std::string& path, std::string line, const CsvOptions& options) {
  if (line.starts_with("\xEF\xBB\xBF")) {
    line.erase(0, 3);  // UTF-8 byte order mark, as spreadsheet exports write
  }
  if (is_blank(line)) {
    return fail(errc::invalid_argument,
                file_prefix(path) + "line 1 is blank; expected a header row");
  }
  const std::size_t count = count_fields(line, options.delimiter);
  if (count > kCsvMaxColumns) {
    return fail(errc::resource_exhausted, file_prefix(path) + "header has " +
                                              std::to_string(count) + " columns; the limit is " +
                                              std::to_string(kCsvMaxColumns));
  }
  std::vector<std::string_view> fields;
  split_fields(line, options.delimiter, fields);
  Header header;
  header.names.assign(fields.begin(), fields.end());
  header.label_index = header.names.size() - 1;
  if (!options.label_column.empty()) {
    const auto found = std::find(header.names.begin(), header.names.end(), options.label_column);
    if (found == header.names.end()) {
      return fail(errc::invalid_argument, file_prefix(path) + "label column '" +
                                              options.label_column + "' is not in the header");
    }
    header.label_index = static_cast<std::size_t>(found - header.names.begin());
  }
  if (header.names.size() < 2) {
    return fail(errc::invalid_argument,
                file_prefix(path) + "has no feature columns besides the label column");
  }
  return header;
}

// Appends one data row's features to `values` and its label to `labels`.
result<void> parse_row(const std::string& path, std::size_t line_number, const Header& header,
                       const std::vector<std::string_view>& fields, std::vector<float>& values,
                       std::vector<RawLabel>& labels) {
  // Built only on the error paths: most files have millions of cells and no errors.
  const auto where = [&](std::size_t c) {
    return at_line(path, line_number) + ", column '" + header.names[c] + "': ";
  };
  for (std::size_t c = 0; c < fields.size(); ++c) {
    if (c == header.label_index) {
      if (fields[c].empty()) {
        return fail(errc::invalid_argument, where(c) + "empty label");
      }
      labels.push_back(RawLabel{std::string(fields[c]), line_number});
      continue;
    }
    float value = 0;
    const auto bad = [&](const char* problem) {
      return fail(errc::invalid_argument, where(c) + "'" + std::string(fields[c]) + "' " + problem);
    };
    switch (parse_float(fields[c], value)) {
      case NumberStatus::ok:
        values.push_back(value);
        break;
      case NumberStatus::not_a_number:
        return bad("is not a number");
      case NumberStatus::not_finite:
        return bad("is not finite");
      case NumberStatus::out_of_range:
        return bad("is out of float range");
    }
  }
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
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    return fail(errc::io_error, file_prefix(path) + "cannot be opened: " + std::strerror(errno));
  }
  LineReader reader(file.get(), path);
  std::string line;

  auto got_header = reader.next(line);
  if (!got_header) {
    return got_header.error();
  }
  if (!*got_header) {
    return fail(errc::invalid_argument, file_prefix(path) + "is empty; expected a header row");
  }
  auto header = parse_header(path, line, options);
  if (!header) {
    return header.error();
  }
  const std::size_t columns = header->names.size();

  std::vector<float> values;  // row after row, columns - 1 each
  std::vector<RawLabel> labels;
  std::vector<std::string_view> fields;
  std::size_t pending_blank = 0;  // the first blank line since the last data row, if any
  for (;;) {
    auto got = reader.next(line);
    if (!got) {
      return got.error();
    }
    if (!*got) {
      break;
    }
    const std::size_t line_number = reader.number();
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
    auto parsed = parse_row(path, line_number, *header, fields, values, labels);
    if (!parsed) {
      return parsed.error();
    }
  }
  if (labels.empty()) {
    return fail(errc::invalid_argument, file_prefix(path) + "has a header but no data rows");
  }

  Dataset out;
  const std::size_t num_features = columns - 1;
  out.features =
      Eigen::Map<const Eigen::MatrixXf>(values.data(), static_cast<Eigen::Index>(num_features),
                                        static_cast<Eigen::Index>(labels.size()));
  out.sample_shape = {static_cast<std::int64_t>(num_features)};
  for (std::size_t c = 0; c < columns; ++c) {
    if (c != header->label_index) {
      out.feature_names.push_back(header->names[c]);
    }
  }
  auto assigned = assign_labels(path, header->names[header->label_index], labels, out);
  if (!assigned) {
    return assigned.error();
  }
  return out;
}

}  // namespace fedcore::data
