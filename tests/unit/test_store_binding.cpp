#include "support.hpp"

#include <filesystem>
#include <lodge/store/store.hpp>

using namespace lodge;

TEST_CASE("s3 bindings: one prefix however it is spelled; bucket, prefix and endpoint tell stores apart") {
  auto b = store::canonical_binding("s3://b-1/archive", "http://127.0.0.1:9000");
  CHECK(b.scheme == "s3");
  CHECK(b.location == "b-1");
  CHECK(b.root == "archive");
  CHECK(b.endpoint == "http://127.0.0.1:9000");
  for (const char *same :
       {"s3://b-1/archive/", "s3://b-1//archive", "s3://b-1/archive//", "s3://b-1///archive/"})
    CHECK(store::canonical_binding(same, "http://127.0.0.1:9000") == b);
  CHECK(store::canonical_binding("s3://b-1/archive", "HTTP://127.0.0.1:9000/") == b);
  CHECK(store::canonical_binding("s3://b-1/a//b/", "").root == "a/b");
  CHECK(store::canonical_binding("s3://b-1", "").root.empty());
  CHECK(store::canonical_binding("s3://b-1/", "").root.empty());
  CHECK(store::canonical_binding("s3://b-1/archive", "").endpoint == "aws");
  CHECK(store::canonical_binding("s3://b-1/x", "https://s3.example.com:443").endpoint ==
        "https://s3.example.com");
  CHECK(store::canonical_binding("s3://b-1/x", "http://Minio:80/").endpoint == "http://minio");
  CHECK(store::canonical_binding("s3://b-1/x", "http://h/Gateway").endpoint == "http://h/Gateway");
  CHECK_FALSE(store::canonical_binding("s3://b-2/archive", "http://127.0.0.1:9000") == b);
  CHECK_FALSE(store::canonical_binding("s3://b-1/archive/2", "http://127.0.0.1:9000") == b);
  CHECK_FALSE(store::canonical_binding("s3://b-1/Archive", "http://127.0.0.1:9000") == b);
  CHECK_FALSE(store::canonical_binding("s3://b-1/archive", "http://127.0.0.1:9001") == b);
  CHECK_FALSE(store::canonical_binding("s3://b-1/archive", "") == b);
  CHECK(store::describe(b) == "s3://b-1/archive at http://127.0.0.1:9000");
  CHECK(store::describe(store::canonical_binding("s3://b-1", "")) == "s3://b-1 (AWS)");
}

TEST_CASE("file bindings: the directory's absolute path, symlinks and relative spellings resolved") {
  test::TempDir dir;
  namespace fs = std::filesystem;
  auto real = fs::canonical(dir.path()).string();
  fs::create_directories(dir.path() / "st");
  fs::create_directory_symlink(dir.path() / "st", dir.path() / "link");
  auto b = store::canonical_binding("file://" + real + "/st", "http://ignored");
  CHECK(b.scheme == "file");
  CHECK(b.location == real + "/st");
  CHECK(b.endpoint.empty());
  CHECK(b.root.empty());
  CHECK(store::canonical_binding("file://" + real + "/st/", "") == b);
  CHECK(store::canonical_binding("file://" + real + "//st", "") == b);
  CHECK(store::canonical_binding("file://" + real + "/link", "") == b);
  auto cwd = fs::current_path();
  fs::current_path(dir.path());
  auto rel = store::canonical_binding("file://./st", "");
  auto bare = store::canonical_binding("file://st", "");
  fs::current_path(cwd);
  CHECK(rel == b);
  CHECK(bare == b);
  // Not there yet: the path as it will be.
  CHECK(store::canonical_binding("file://" + real + "/new/", "").location == real + "/new");
  CHECK_FALSE(store::canonical_binding("file://" + real + "/other", "") == b);
  CHECK(store::describe(b) == "file://" + real + "/st");
  CHECK(test::throws_errc([] { (void)store::canonical_binding("ftp://x", ""); }, Errc::config_invalid,
                          "ftp://x"));
}

TEST_CASE(
    "a binding's tagging mode: S3 as tag_state says, Azure always, file:// never; it tells bindings apart") {
  auto plain = store::canonical_binding("s3://b-1/archive", "http://127.0.0.1:9000");
  auto tagged = store::canonical_binding("s3://b-1/archive", "http://127.0.0.1:9000", true);
  CHECK_FALSE(plain.state_tags);
  CHECK(tagged.state_tags);
  CHECK_FALSE(plain == tagged); // the same store, tagged otherwise: not the same binding
  CHECK(store::describe(plain) == store::describe(tagged));
  CHECK(store::canonical_binding("az://photos/x", "http://127.0.0.1:10000/devstoreaccount1").state_tags);
  CHECK(
      store::canonical_binding("az://photos/x", "http://127.0.0.1:10000/devstoreaccount1", false).state_tags);
  CHECK_FALSE(store::canonical_binding("file:///srv/x", "", true).state_tags);
}

TEST_CASE("the stamp names of objects written before the rename are read as today's") {
  store::Metadata m{{"lodge-record-id", "7"}, {"lodge-sha256", "ab"},  {"lodge-ledger", "u"},
                    {"lodge-owner", "o"},     {"lodge-path", "a%20b"}, {"lodge-prefix", "p"},
                    {"other", "kept"}};
  store::adopt_legacy_metadata(m);
  CHECK(m == store::Metadata{{store::meta::record, "7"},
                             {store::meta::sha256, "ab"},
                             {store::meta::ledger, "u"},
                             {store::meta::owner, "o"},
                             {store::meta::path, "a%20b"},
                             {store::meta::prefix, "p"},
                             {"other", "kept"}});
  store::Metadata both{{"lodge-record-id", "1"}, {store::meta::record, "2"}};
  store::adopt_legacy_metadata(both);
  CHECK(both == store::Metadata{{store::meta::record, "2"}}); // today's name wins
}

TEST_CASE("every scheme's URL is checked by its own backend; an unknown one names the forms") {
  CHECK_NOTHROW(store::check_store_url("s3://bucket/p"));
  CHECK_NOTHROW(store::check_store_url("file:///srv/x"));
  CHECK_THROWS_WITH_AS(store::check_store_url("gs://b/p"), doctest::Contains("s3://bucket/prefix"),
                       LodgeError);
  CHECK_THROWS_WITH_AS(store::check_store_url("s3://Bucket/p"), doctest::Contains("invalid bucket name"),
                       LodgeError);
  CHECK_THROWS_WITH_AS(store::check_store_url("file://rel"), doctest::Contains("absolute path"), LodgeError);
}
