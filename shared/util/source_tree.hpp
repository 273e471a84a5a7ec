// Where this build's source tree is.
//
// Tools that default to files of the checkout use it (fedcore-sim's data set, dashboard and
// certificate script; fedcore-train's data set), and so do the tests and benchmarks.
//
// Why a function and not a -D flag: the path lives in one generated translation unit
// (<build>/generated/source_tree.cpp, from shared/util/source_tree.cpp.in). A -D flag with
// the clone's location put that location into the compile command of every object using it,
// and ccache hashes -D values as they are: a clone at another path recompiled every test
// object in all five build trees (docs/ci.md, "Known cost"). Now only this one file misses.
#pragma once

#include <string>
#include <string_view>

namespace fedcore {

// The source tree's root: absolute, no trailing slash.
const std::string& source_dir();

// source_dir() + "/" + relative: source_path("data/x.csv") is "<root>/data/x.csv".
std::string source_path(std::string_view relative);

}  // namespace fedcore
