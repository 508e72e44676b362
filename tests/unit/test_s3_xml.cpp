#include "support.hpp"

#include <lodge/s3/xml.hpp>

using namespace lodge;

namespace {
std::string data(const std::string &name) {
  return test::read_file(std::string(LODGE_TEST_DATA) + "/s3/" + name);
}
} // namespace

TEST_CASE("ListObjectsV2 pages captured from moto parse, with the continuation token") {
  auto p = s3::parse_list_objects_v2(data("list_objects_v2_page1.xml"));
  REQUIRE(p);
  CHECK(p->truncated);
  CHECK(p->next_token == "d9867d6e65d9dfe7fe4574c3a30dbe9b");
  REQUIRE(p->objects.size() == 2);
  CHECK(p->objects[0].key == "dir/a");
  CHECK(p->objects[0].size == 3);
  CHECK(p->objects[0].etag == "764efa883dda1e11db47671c4a3bbd9e");
  CHECK(s3::parse_iso8601_ms(p->objects[0].last_modified) == 1'796'018'165'000);
}

TEST_CASE("ListObjectVersions keeps versions and delete markers") {
  auto p = s3::parse_list_versions(data("list_versions.xml"));
  REQUIRE(p);
  CHECK_FALSE(p->truncated);
  REQUIRE(p->versions.size() == 5);
  int markers = 0;
  for (const auto &v : p->versions)
    markers += v.delete_marker ? 1 : 0;
  CHECK(markers == 1);
  CHECK(p->versions[1].version_id == "null");
  CHECK(p->versions.back().key == "dir/b");
  CHECK(p->versions.back().delete_marker);
}

TEST_CASE("multipart answers and errors parse into fields") {
  CHECK(s3::parse_initiate_multipart(data("initiate_multipart.xml")) ==
        "Hq9KyKZYxMdaMn6lqqjTkWp3zqmWrb9MVR4ocOj7a3rqPAM2uUPnX9SDw");
  auto u = s3::parse_list_uploads(data("list_uploads.xml"));
  REQUIRE(u);
  REQUIRE(u->uploads.size() == 1);
  CHECK(u->uploads[0].key == "dir/mp");
  auto e = s3::parse_error(data("error_nosuchkey.xml"));
  REQUIRE(e);
  CHECK(e->code == "NoSuchKey");
  CHECK(e->request_id == "cnBlffN3MsyoCNX24BT4qhCYOJmpPmudWi8AYKUIktrXlkCxwo8K");
  CHECK(s3::parse_error(data("error_precondition.xml"))->code == "PreconditionFailed");
  auto c = s3::parse_complete_multipart("<Error><Code>InternalError</Code><Message>x</Message></Error>");
  REQUIRE(c);
  REQUIRE(c->error);
  CHECK(c->error->code == "InternalError");
}

TEST_CASE("ListParts (as moto answers it) parses each part's number, size, ETag and checksum") {
  auto p = s3::parse_list_parts(data("list_parts.xml"));
  REQUIRE(p);
  CHECK_FALSE(p->truncated);
  REQUIRE(p->parts.size() == 2);
  CHECK(p->parts[0].number == 1);
  CHECK(p->parts[0].size == 10);
  CHECK(p->parts[0].etag == "336311a016184326ddbdd61edd4eeb52");
  CHECK(p->parts[0].checksum_sha256.empty());
  CHECK(p->parts[1].checksum_sha256 == "ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs=");
  // What each proves of its bytes: the ETag is the MD5 of "a"; the checksum its SHA-256.
  CHECK(s3::part_md5_hex(p->parts[1]) == "0cc175b9c0f1b6a831c399e269772661");
  CHECK(s3::part_sha256_hex(p->parts[1]) ==
        "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb");
  CHECK(s3::part_sha256_hex(p->parts[0]).empty());
  CHECK_FALSE(
      s3::parse_list_parts("<ListPartsResult><Part><PartNumber>x</PartNumber></Part></ListPartsResult>"));
  CHECK_FALSE(s3::parse_list_parts("<ListPartsResult><IsTruncated>true</IsTruncated></ListPartsResult>"));
}

TEST_CASE("a listed part's ETag is its MD5 only when plain 32 hex digits; a checksum only when 32 bytes") {
  s3::ListedPart p{1, 10, "336311A016184326DDBDD61EDD4EEB52", ""};
  CHECK(s3::part_md5_hex(p) == "336311a016184326ddbdd61edd4eeb52");
  for (const char *etag : {"", "336311a016184326ddbdd61edd4eeb52-3", "336311a016184326ddbdd61edd4eeb5",
                           "336311a016184326ddbdd61edd4eeb5g", "\"336311a016184326ddbdd61edd4eeb52\""}) {
    p.etag = etag;
    CHECK_MESSAGE(s3::part_md5_hex(p).empty(), etag);
  }
  for (const char *sum : {"", "not base64!", "YQ==", "ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLsA"}) {
    p.checksum_sha256 = sum;
    CHECK_MESSAGE(s3::part_sha256_hex(p).empty(), sum);
  }
}

TEST_CASE("hostile and truncated documents are refused, never expanded") {
  CHECK_FALSE(s3::parse_error(data("hostile_xxe.xml")));
  CHECK_FALSE(s3::parse_list_objects_v2(data("hostile_billion_laughs.xml")));
  auto whole = data("list_objects_v2_page1.xml");
  for (size_t cut : {size_t{0}, size_t{10}, whole.size() / 2, whole.size() - 5})
    CHECK_FALSE(s3::parse_list_objects_v2(whole.substr(0, cut)));
  CHECK_FALSE(
      s3::parse_list_objects_v2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"));
  CHECK_FALSE(s3::parse_list_objects_v2(
      "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>"));
  CHECK_FALSE(s3::parse_error("<NotError/>"));
  CHECK_FALSE(s3::parse_error(""));
  CHECK_FALSE(s3::parse_iso8601_ms("yesterday"));
}
