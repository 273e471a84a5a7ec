// The programs this build makes and the tests run as processes, by absolute path.
//
// The paths live in one generated file (<build>/generated/build_outputs.cpp, written by
// tests/support/CMakeLists.txt) rather than in -D flags, for the same reason as
// shared/util/source_tree.hpp: a path in a compile flag defeats ccache for every clone at a
// new location. A test that runs one of these programs must depend on its target
// (add_dependencies), since naming the path does not make CMake build it.
#pragma once

#include <string>

namespace fedcore::testing {

const std::string& server_binary();  // fedcore-server
const std::string& client_binary();  // fedcore-client
const std::string& dist_binary();    // fedcore-dist

// certs/fedcore-pki of the source tree.
std::string pki_script();

}  // namespace fedcore::testing
