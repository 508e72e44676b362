#include "support.hpp"

#include <lodge/util/log.hpp>

using namespace lodge;

TEST_CASE("redact: a URL's password, a password= value and an Azure key, however they are written") {
  using util::log::redact;
  CHECK(redact("cannot reach postgres://lodge:pw%2Fx@db:5432/lodge") ==
        "cannot reach postgres://lodge:***@db:5432/lodge");
  // Malformed: an unclosed '[' (libpq quotes the whole URL), a raw '/' or '@' in the password.
  CHECK(redact("in URI: \"postgres://u:s3cret@[::1/db\"") == "in URI: \"postgres://u:***@[::1/db\"");
  CHECK(redact("amqp://lodge:a/b@rabbit/?queue=q") == "amqp://lodge:***@rabbit/?queue=q");
  CHECK(redact("http://u:p@ss@h:1/x") == "http://u:***@h:1/x");
  // host:port is no password, even with an '@' later in the path.
  CHECK(redact("PUT http://127.0.0.1:9000/b/renovate/@types/x") ==
        "PUT http://127.0.0.1:9000/b/renovate/@types/x");
  CHECK(redact("http://[::1]:9000/a@b") == "http://[::1]:9000/a@b");
  // libpq keyword strings and a URL's query: quoted, unterminated, bare.
  CHECK(redact("host=db password=s3cret dbname=x") == "host=db password=*** dbname=x");
  CHECK(redact("host=db password = 'a b\\' c' dbname=x") == "host=db password = *** dbname=x");
  CHECK(redact("host=db password='unterminated") == "host=db password=***");
  CHECK(redact("postgres://db/x?password=s3cret&sslmode=require") ==
        "postgres://db/x?password=***&sslmode=require");
  CHECK(redact("password authentication failed for user \"lodge\"") ==
        "password authentication failed for user \"lodge\"");
  CHECK(redact("AccountName=a;AccountKey=c2VjcmV0;BlobEndpoint=x") ==
        "AccountName=a;AccountKey=***;BlobEndpoint=x");
}

TEST_CASE("redact with a source: what a library quotes of a location it could not parse") {
  using util::log::redact;
  const std::string url = "postgres://lodge:s3cr%zzet@db/x";
  CHECK(redact("invalid percent-encoded token: \"s3cr%zzet\"", url) ==
        "invalid percent-encoded token: \"***\"");
  // Decoded too, and each password= of a keyword string (quoted, bare up to a space or '&').
  CHECK(redact("got 'pass word'", "postgres://u:pass%20word@h/x") == "got '***'");
  CHECK(redact("token \"s3cret-2\"", "host=h password='s3cret-2") == "token \"***\"");
  CHECK(redact("token \"s3cret-3%\"", "postgres://h/x?password=s3cret-3%&sslmode=x") == "token \"***\"");
  // Values too short to tell from a word are left to the patterns.
  CHECK(redact("the pw was abc", "postgres://u:abc@h/x") == "the pw was abc");
}

TEST_CASE("url_has_userinfo: any '@' after the scheme") {
  CHECK(util::log::url_has_userinfo("http://u:p@h:9000"));
  CHECK(util::log::url_has_userinfo("http://token@h"));
  CHECK(util::log::url_has_userinfo("http://u:p/x@h"));
  CHECK(util::log::url_has_userinfo("http://u:p@[::1"));
  CHECK_FALSE(util::log::url_has_userinfo("http://127.0.0.1:9000"));
  CHECK_FALSE(util::log::url_has_userinfo("https://acct.blob.core.windows.net/acct"));
  CHECK_FALSE(util::log::url_has_userinfo("user@host"));
}
