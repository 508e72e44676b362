// What results mean for the command that asked: a direct upload's exit status, a run that
// found no file (ops/upload/report.hpp), a restore's tally (ops/read/restore.hpp), and the
// names a user may have misspelled (config/names.hpp).
#include "support.hpp"

#include <lodge/config/names.hpp>
#include <lodge/ops/read/restore.hpp>
#include <lodge/ops/upload/report.hpp>

using namespace lodge;

TEST_CASE("direct_exit_status: 0 as asked, a whole-command failure's own status, 1 for the file") {
  ops::FileResult r;
  r.outcome = ops::UploadOutcome::active;
  CHECK(ops::direct_exit_status(r) == 0);
  r.outcome = ops::UploadOutcome::rejected;
  r.error = Error(Errc::type_not_allowed, "no");
  CHECK(ops::direct_exit_status(r) == errc_info(Errc::storage_error).exit_code);
  r.outcome = ops::UploadOutcome::failed;
  r.error = Error(Errc::storage_unavailable, "down");
  CHECK(ops::direct_exit_status(r) == errc_info(Errc::storage_unavailable).exit_code);
  r.error = Error(Errc::usage, "bad");
  CHECK(ops::direct_exit_status(r) == errc_info(Errc::usage).exit_code);
  CHECK(ops::reservation_exit_status(true, r) == 0);
  CHECK(std::string(ops::reservation_word(true, r)) == "reserved");
  CHECK(std::string(ops::reservation_word(false, r)) == "failed");
}

TEST_CASE("no_files_message names the sources and what the filters left out") {
  ops::RunReport rep;
  rep.tally.files = 1;
  rep.tally.skipped = 1;
  rep.tally.excluded = 2;
  CHECK(ops::no_file_found(rep));
  CHECK(ops::no_files_message({"a", "b"}, "-", rep.tally) ==
        "upload: no file found in 'a', 'b', --files-from stdin (2 entries excluded by the filters, 1 entry "
        "skipped): nothing was uploaded");
  rep.interrupted = true;
  CHECK_FALSE(ops::no_file_found(rep));
}

TEST_CASE("RestoreTally: one file's own status, many: 4 when the store was never reached, else 1") {
  ledger::FileRecord row;
  row.size = 10;
  ops::GetResult down;
  down.outcome = ops::GetOutcome::failed;
  ErrorDetails refused;
  refused.curl_code = 7; // CURLE_COULDNT_CONNECT: the store never reached
  down.error = Error(Errc::storage_unavailable, "down", refused);
  ops::RestoreTally one;
  one.add(down, row);
  CHECK(one.exit_status(false) == errc_info(Errc::storage_unavailable).exit_code);
  CHECK(one.exit_status(true) == errc_info(Errc::interrupted).exit_code);
  ops::RestoreTally many = one;
  many.add(down, row);
  CHECK(many.exit_status(false) == errc_info(Errc::storage_unavailable).exit_code);
  ops::GetResult ok;
  ok.outcome = ops::GetOutcome::written;
  many.add(ok, row);
  CHECK(many.bytes == 10);
  CHECK(many.exit_status(false) == errc_info(Errc::storage_error).exit_code);
}

TEST_CASE("nearest_name and unknown_environment") {
  CHECK(config::nearest_name("uplaod", {"upload", "list"}, 3) == "upload");
  CHECK(config::nearest_name("xyz", {"upload", "list"}, 3).empty());
  auto unknown = config::unknown_environment({{"LODGE_DV", "x"}, {"LODGE_DB", "y"}, {"HOME", "/"}});
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0].first == "LODGE_DV");
  CHECK(unknown[0].second == "LODGE_DB");
}
