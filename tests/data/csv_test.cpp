#include "shared/data/csv.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shared/util/source_tree.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::data {
namespace {

using ::testing::HasSubstr;

class CsvTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "table.csv").string();
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }
  // Loads `text` and expects failure with `code`; returns the message for further checks.
  std::string expect_error(const std::string& text, errc code, const CsvOptions& options = {}) {
    const std::string path = write(text);
    auto loaded = load_csv(path, options);
    EXPECT_FALSE(loaded.has_value());
    if (loaded.has_value()) {
      return {};
    }
    EXPECT_EQ(loaded.error().code, code) << loaded.error().message;
    EXPECT_THAT(loaded.error().message, HasSubstr(path));
    return loaded.error().message;
  }
  fedcore::testing::TempDir temp_;
  std::filesystem::path dir_ = temp_.root();
};

TEST_F(CsvTest, StringLabelsBecomeSortedClasses) {
  auto loaded = load_csv(write("a,b,species\n1,2,virginica\n3,4.5,setosa\n-5,6e2,virginica\n"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  const Dataset& data = *loaded;
  EXPECT_EQ(data.size(), 3u);
  EXPECT_EQ(data.sample_shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(data.feature_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(data.class_names, (std::vector<std::string>{"setosa", "virginica"}));
  EXPECT_EQ(data.num_classes, 2);
  EXPECT_EQ(data.labels, (std::vector<std::int32_t>{1, 0, 1}));
  EXPECT_FLOAT_EQ(data.features(0, 1), 3.0f);
  EXPECT_FLOAT_EQ(data.features(1, 1), 4.5f);
  EXPECT_FLOAT_EQ(data.features(0, 2), -5.0f);
  EXPECT_FLOAT_EQ(data.features(1, 2), 600.0f);
}

TEST_F(CsvTest, IntegerLabelsInNamedColumn) {
  CsvOptions options;
  options.label_column = "y";
  auto loaded = load_csv(write("x1,y,x2\n0.5,2,1\n1.5,0,2\n2.5,2,3\n"), options);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->labels, (std::vector<std::int32_t>{2, 0, 2}));
  EXPECT_EQ(loaded->num_classes, 3);
  EXPECT_TRUE(loaded->class_names.empty());
  EXPECT_EQ(loaded->feature_names, (std::vector<std::string>{"x1", "x2"}));
  EXPECT_FLOAT_EQ(loaded->features(0, 2), 2.5f);
  EXPECT_FLOAT_EQ(loaded->features(1, 2), 3.0f);
}

TEST_F(CsvTest, CrlfTrailingBlankLinesAndBom) {
  auto loaded =
      load_csv(write("\xEF\xBB\xBF"
                     "a,b\r\n1,0\r\n2,1\r\n\r\n  \r\n"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->feature_names, (std::vector<std::string>{"a"}));
  EXPECT_EQ(loaded->labels, (std::vector<std::int32_t>{0, 1}));
}

TEST_F(CsvTest, NoFinalNewline) {
  auto loaded = load_csv(write("a,b\n1,0\n2,1"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->size(), 2u);
}

TEST_F(CsvTest, QuotedSimpleValuesAndSpaces) {
  auto loaded = load_csv(write("\"a\", \"b\" ,label\n\"1.5\", 2 ,\"cat\"\n+3,\"-4\",dog\n"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->feature_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(loaded->class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_FLOAT_EQ(loaded->features(0, 0), 1.5f);
  EXPECT_FLOAT_EQ(loaded->features(1, 0), 2.0f);
  EXPECT_FLOAT_EQ(loaded->features(0, 1), 3.0f);
  EXPECT_FLOAT_EQ(loaded->features(1, 1), -4.0f);
}

TEST_F(CsvTest, OtherDelimiter) {
  CsvOptions options;
  options.delimiter = ';';
  auto loaded = load_csv(write("a;b;c\n1,5;2;0\n"), options);
  EXPECT_FALSE(loaded.has_value());  // "1,5" is not a number with ';' as delimiter
  auto good = load_csv(write("a;b;c\n1.5;2;0\n"), options);
  ASSERT_TRUE(good.has_value()) << good.error().to_string();
  EXPECT_FLOAT_EQ(good->features(0, 0), 1.5f);
}

TEST_F(CsvTest, RaggedRowNamesLine) {
  const std::string message = expect_error("a,b,c\n1,2,0\n1,2\n", errc::invalid_argument);
  EXPECT_THAT(message, HasSubstr("line 3: 2 fields, header has 3"));
  const std::string wide = expect_error("a,b,c\n1,2,0,4\n", errc::invalid_argument);
  EXPECT_THAT(wide, HasSubstr("line 2: 4 fields, header has 3"));
}

TEST_F(CsvTest, NonNumericValueNamesLineAndColumn) {
  const std::string message = expect_error(
      "mean_radius,mean_area,y\n1,2,0\n3,4,1\n5,6,0\n7,abc,1\n", errc::invalid_argument);
  EXPECT_THAT(message, HasSubstr("line 5, column 'mean_area': 'abc' is not a number"));
  EXPECT_THAT(expect_error("a,y\n1.5.2,0\n", errc::invalid_argument), HasSubstr("is not a number"));
  EXPECT_THAT(expect_error("a,y\n,0\n", errc::invalid_argument), HasSubstr("'' is not a number"));
}

TEST_F(CsvTest, NonFiniteValues) {
  for (const std::string value : {"inf", "-inf", "nan", "NaN", "1e999"}) {
    const std::string message = expect_error("a,y\n1,0\n" + value + ",1\n", errc::invalid_argument);
    EXPECT_THAT(message, HasSubstr("line 3, column 'a'")) << value;
  }
}

TEST_F(CsvTest, MissingLabelColumn) {
  CsvOptions options;
  options.label_column = "diagnosis";
  const std::string message = expect_error("a,b\n1,0\n", errc::invalid_argument, options);
  EXPECT_THAT(message, HasSubstr("label column 'diagnosis'"));
}

TEST_F(CsvTest, MissingFileIsNotFound) {
  const std::string path = (dir_ / "absent.csv").string();
  auto loaded = load_csv(path);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr(path));
}

TEST_F(CsvTest, EmptyFileOrNoHeaderOrNoRows) {
  EXPECT_THAT(expect_error("", errc::invalid_argument), HasSubstr("empty"));
  EXPECT_THAT(expect_error("\n1,2\n", errc::invalid_argument), HasSubstr("line 1 is blank"));
  EXPECT_THAT(expect_error("a,b\n", errc::invalid_argument), HasSubstr("no data rows"));
  EXPECT_THAT(expect_error("label\n1\n", errc::invalid_argument), HasSubstr("no feature columns"));
}

TEST_F(CsvTest, BlankLineFollowedByDataIsRejected) {
  EXPECT_THAT(expect_error("a,b\n1,0\n\n2,1\n", errc::invalid_argument),
              HasSubstr("line 3 is blank but data follows on line 4"));
}

TEST_F(CsvTest, BadLabels) {
  EXPECT_THAT(expect_error("a,y\n1,0\n2,-1\n", errc::invalid_argument),
              HasSubstr("line 3, column 'y': label -1 is negative"));
  EXPECT_THAT(expect_error("a,y\n1,\n", errc::invalid_argument), HasSubstr("empty label"));
  expect_error("a,y\n1,5000000\n", errc::resource_exhausted);
}

TEST_F(CsvTest, OverlongLineIsResourceExhausted) {
  const std::string message = expect_error(
      "a,b\n" + std::string(kCsvMaxLineBytes + 10, '1') + ",0\n", errc::resource_exhausted);
  EXPECT_THAT(message, HasSubstr("line 2"));
}

TEST_F(CsvTest, TooManyColumnsIsResourceExhausted) {
  std::string header;
  for (std::size_t i = 0; i <= kCsvMaxColumns; ++i) {
    header.append("c").append(std::to_string(i)).append(",");
  }
  header += "y\n";
  expect_error(header, errc::resource_exhausted);
}

TEST(CsvDataTest, BreastCancerWisconsin) {
  CsvOptions options;
  options.label_column = "benign";
  auto loaded = load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"), options);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  const Dataset& data = *loaded;
  EXPECT_EQ(data.size(), 569u);
  EXPECT_EQ(data.sample_size(), 30u);
  EXPECT_EQ(data.sample_shape, (std::vector<std::int64_t>{30}));
  ASSERT_EQ(data.feature_names.size(), 30u);
  EXPECT_EQ(data.feature_names.front(), "mean_radius");
  EXPECT_EQ(data.feature_names.back(), "worst_fractal_dimension");
  EXPECT_EQ(data.num_classes, 2);
  EXPECT_EQ(data.label_counts(), (std::vector<std::size_t>{212, 357}));
  EXPECT_FLOAT_EQ(data.features(0, 0), 17.99f);  // first row's mean_radius
  EXPECT_TRUE(data.features.allFinite());
}

}  // namespace
}  // namespace fedcore::data
