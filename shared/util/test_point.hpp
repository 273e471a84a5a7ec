// test_point: named places in crash-sensitive code (a checkpoint being written, a round
// being committed) that a crash test can see the process pass and can stop it at, so a
// SIGKILL lands exactly there instead of wherever a timer happens to fall
// (tests/federation/kill_loop_test.cpp).
//
// Compiled into every build and inert unless the process was started with one of:
//   FEDCORE_TEST_TRACE=<file>         every point passed appends "<name> <detail>\n" to
//                                     <file> with one write(2) on an O_APPEND descriptor.
//                                     The line is in the file once test_point returns, so
//                                     after a SIGKILL the last line names the last point
//                                     the process passed.
//   FEDCORE_TEST_PAUSE_AT=<name>:<n>  the n-th time (n >= 1) this process passes point
//                                     <name>, it appends "paused <name> <detail>\n" to the
//                                     trace (when there is one) and the calling thread
//                                     stops there, for the test to kill the process. If no
//                                     kill comes within 60 s the process kills itself with
//                                     SIGKILL, so a server whose test died does not linger.
// Both are read once, at the first point passed; a malformed PAUSE_AT is ignored. When
// neither is set a point costs one check of a flag.
//
// Points (the name, then what `detail` carries):
//   round.begin                  the round number; a round starts (server)
//   checkpoint.begin             the round; its checkpoint is about to be written
//   atomic_write.temp_synced     the path; the ".tmp" copy is written and fsynced, not
//                                yet renamed (shared/model/param_io.cpp)
//   checkpoint.end               the round; the checkpoint file is durable, not yet
//                                referenced by the store
//   round_commit.begin           the round; the commit's transaction is open
//   round_commit.before_commit   the round; every row is written, COMMIT not yet run
//   round_commit.end             the round; the transaction is committed
//
// Thread safety: may be called from any thread.
#pragma once

#include <string_view>

namespace fedcore {

void test_point(std::string_view name, std::string_view detail = {});

}  // namespace fedcore
