#include "support.hpp"

#include <lodge/config/config.hpp>
#include <lodge/ops/inspect.hpp>

using namespace lodge;

TEST_CASE("an empty file contradicts no extension; a policy's media_types still apply to it") {
  config::Policy p;
  p.name = "p";
  for (const char *ext : {"txt", "json", "pdf", "png", ""}) {
    INFO(ext);
    CHECK(ops::check_media_type(p, ext, "application/x-empty"));
  }
  auto spoofed = ops::check_media_type(p, "pdf", "text/plain");
  REQUIRE_FALSE(spoofed);
  CHECK(spoofed.error().code == Errc::type_mismatch);
  p.media_types = {"application/pdf"};
  auto empty = ops::check_media_type(p, "pdf", "application/x-empty");
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == Errc::type_not_allowed);
}
