#include "support.hpp"

#include <lodge/store/store.hpp>

using namespace lodge;

TEST_CASE("az:// URLs: the container is checked, the prefix canonicalized into the binding") {
  auto b = store::canonical_binding("az://photos//archive/2024/", "HTTP://127.0.0.1:10000/devstoreaccount1/");
  CHECK(b.scheme == "az");
  CHECK(b.location == "photos");
  CHECK(b.root == "archive/2024");
  CHECK(b.endpoint == "http://127.0.0.1:10000/devstoreaccount1");
  CHECK(store::canonical_binding("az://photos", "").root.empty());
  store::check_store_url("az://photos/archive");
  CHECK(test::throws_errc([] { store::check_store_url("az://Photos/x"); }, Errc::config_invalid, "a-z, 0-9"));
  CHECK(test::throws_errc([] { store::check_store_url("az://ab/x"); }, Errc::config_invalid, "3 to 63"));
  CHECK(test::throws_errc([] { store::check_store_url("az://a--b/x"); }, Errc::config_invalid, "--"));
  CHECK(test::throws_errc([] { store::check_store_url("az://photos/a/../b"); }, Errc::config_invalid,
                          "az://photos/a/../b"));
}

TEST_CASE("an az:// store without credentials says which variables to set, when connecting") {
  store::StoreOptions o;
  o.url = "az://photos/archive";
  auto backend = store::open_backend(o);
  auto view = backend->credentials();
  REQUIRE(view);
  CHECK(view->error.find("AZURE_STORAGE_CONNECTION_STRING") != std::string::npos);
  CHECK(test::throws_errc([&] { (void)backend->connect(); }, Errc::config_invalid, "AZURE_STORAGE_ACCOUNT"));
  o.env = {{"AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"}};
  auto dev = store::open_backend(o)->credentials();
  REQUIRE(dev);
  CHECK(dev->error.empty());
  CHECK(dev->identity.find("devstoreaccount1") != std::string::npos);
}
