// Static file resolution: decoding, canonicalising, and staying under the web root.
#include "server/api/static_files.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/temp_dir.hpp"

namespace fedcore::api {
namespace {

namespace fs = std::filesystem;

class ApiStaticFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    write(root() / "index.html", "<!doctype html>");
    write(root() / "app.js", "export {};");
    write(root() / "sub" / "index.html", "sub");
    write(root() / "node_modules" / "chart.js" / "dist" / "chart.umd.js", "chart");
    write(root() / ".env", "hidden");
    write(dir_.root() / "secret.txt", "secret");
    write(dir_.root() / "web-other" / "x.js", "sibling with a common prefix");
    fs::create_symlink(dir_.root() / "secret.txt", root() / "escape.txt");
    fs::create_symlink(dir_.root(), root() / "up");
    fs::create_symlink(root() / "app.js", root() / "alias.js");
  }
  fs::path root() const { return dir_.root() / "web"; }
  static void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  errc refused(const char* raw) const {
    auto r = StaticFiles(root().string()).resolve(raw);
    return r ? errc::ok : r.error().code;
  }

  fedcore::testing::TempDir dir_;
};

TEST_F(ApiStaticFiles, ServesFilesIndexesAndNodeModules) {
  StaticFiles files(root().string());
  auto index = files.load("/");
  ASSERT_TRUE(index) << index.error().message;
  EXPECT_EQ(index->body, "<!doctype html>");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(files.load("/index.html")->body, "<!doctype html>");
  EXPECT_EQ(files.load("/sub/")->body, "sub");
  EXPECT_EQ(files.load("/sub")->body, "sub");
  EXPECT_EQ(files.load("/%61pp.js")->body, "export {};");
  auto chart = files.load("/node_modules/chart.js/dist/chart.umd.js");
  ASSERT_TRUE(chart) << chart.error().message;
  EXPECT_EQ(chart->content_type, "text/javascript; charset=utf-8");
  // A symlink that stays inside the root is fine.
  EXPECT_EQ(files.load("/alias.js")->body, "export {};");
}

TEST_F(ApiStaticFiles, TraversalInEveryEncodingIsRefused) {
  for (const char* raw :
       {"/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/..%2fsecret.txt",
        "/sub/../../secret.txt", "/%252e%252e/secret.txt", "/..%252fsecret.txt", "/./index.html",
        "/..", "/.env", "/%2eenv", "/index.html%00.js", "/a%0ab", "/..\\secret.txt",
        "/%5c..%5csecret.txt", "/%zz", "/%"}) {
    EXPECT_EQ(refused(raw), errc::invalid_argument) << raw;
  }
}

TEST_F(ApiStaticFiles, SymlinksLeavingTheRootAndMissingFilesAreNotFound) {
  EXPECT_EQ(refused("/escape.txt"), errc::not_found);
  EXPECT_EQ(refused("/up/secret.txt"), errc::not_found);
  EXPECT_EQ(refused("/up/web-other/x.js"), errc::not_found);
  EXPECT_EQ(refused("/missing.js"), errc::not_found);
  EXPECT_EQ(refused("/node_modules/"), errc::not_found);
  EXPECT_EQ(StaticFiles((dir_.root() / "no-such-dir").string()).resolve("/").error().code,
            errc::not_found);
}

TEST(ApiContentTypes, ByExtension) {
  EXPECT_EQ(content_type_for("a.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type_for("a.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("a.mjs"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("a.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type_for("a.svg"), "image/svg+xml");
  EXPECT_EQ(content_type_for("a.png"), "image/png");
  EXPECT_EQ(content_type_for("a.json"), "application/json");
  EXPECT_EQ(content_type_for("a.js.map"), "application/json");
  EXPECT_EQ(content_type_for("a.woff2"), "font/woff2");
  EXPECT_EQ(content_type_for("a.exe"), "application/octet-stream");
  EXPECT_EQ(content_type_for("Makefile"), "application/octet-stream");
}

}  // namespace
}  // namespace fedcore::api
