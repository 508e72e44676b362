#include "support.hpp"

#include <lodge/azure/auth.hpp>
#include <lodge/azure/signer.hpp>
#include <lodge/util/strings.hpp>

using namespace lodge;

namespace {
const std::string k_key = *util::base64_decode(azure::k_dev_key);
constexpr int64_t k_time = 1'700'000'000'000; // Tue, 14 Nov 2023 22:13:20 GMT
} // namespace

TEST_CASE("azure dates are RFC 1123 for x-ms-date and ISO 8601 seconds for a SAS") {
  CHECK(azure::ms_date(k_time) == "Tue, 14 Nov 2023 22:13:20 GMT");
  CHECK(azure::iso8601_seconds(k_time + 999) == "2023-11-14T22:13:20Z");
}

TEST_CASE("canonicalized headers: x-ms- only, lowercased, sorted, values trimmed and folded") {
  azure::Params h{{"X-Ms-Version", "2021-12-02"},
                  {"Content-Type", "text/plain"},
                  {"x-ms-meta-b", "  two   words "},
                  {"x-ms-date", "Tue, 14 Nov 2023 22:13:20 GMT"},
                  {"x-ms-meta-a", "1"}};
  CHECK(azure::canonicalized_headers(h) == "x-ms-date:Tue, 14 Nov 2023 22:13:20 GMT\n"
                                           "x-ms-meta-a:1\n"
                                           "x-ms-meta-b:two words\n"
                                           "x-ms-version:2021-12-02\n");
}

TEST_CASE(
    "canonicalized resource: account, encoded path, query names lowercased and sorted, values decoded") {
  CHECK(azure::canonicalized_resource("acct", "/c/a%20b", {}) == "/acct/c/a%20b");
  CHECK(azure::canonicalized_resource("acct", "/c",
                                      {{"restype", "container"}, {"comp", "list"}, {"Prefix", "a/b c"}}) ==
        "/acct/c\ncomp:list\nprefix:a/b c\nrestype:container");
  // A repeated name: its values sorted and joined with ','.
  CHECK(azure::canonicalized_resource("acct", "/c", {{"b", "2"}, {"A", "z"}, {"b", "1"}}) ==
        "/acct/c\na:z\nb:1,2");
}

// The string-to-sign below is written out from the reference's rules; the signature was
// computed once with
//   printf '<the string>' | openssl dgst -sha256 -mac HMAC -macopt hexkey:11bcbcbd...818c1b -binary | base64
// (the hex of the decoded devstoreaccount1 key) and pasted here.
TEST_CASE("Shared Key string-to-sign of a conditional Put Blob on a path-style endpoint") {
  azure::SignInput in;
  in.method = "PUT";
  in.account = "devstoreaccount1";
  in.encoded_path = "/devstoreaccount1/photos/dir/my%20file.txt";
  in.headers = {{"x-ms-blob-type", "BlockBlob"},
                {"content-md5", "XrY7u+Ae7tCTyyK7j1rNww=="},
                {"x-ms-blob-content-type", "text/plain"},
                {"if-none-match", "*"},
                {"x-ms-meta-lodgerecord", "42"},
                {"x-ms-tags", "state=pending"},
                {"x-ms-date", azure::ms_date(k_time)},
                {"x-ms-version", azure::k_api_version},
                {"content-length", "11"}};
  std::string sts = azure::string_to_sign(in);
  CHECK(sts == "PUT\n\n\n11\nXrY7u+Ae7tCTyyK7j1rNww==\n\n\n\n\n*\n\n\n"
               "x-ms-blob-content-type:text/plain\n"
               "x-ms-blob-type:BlockBlob\n"
               "x-ms-date:Tue, 14 Nov 2023 22:13:20 GMT\n"
               "x-ms-meta-lodgerecord:42\n"
               "x-ms-tags:state=pending\n"
               "x-ms-version:2021-12-02\n"
               "/devstoreaccount1/devstoreaccount1/photos/dir/my%20file.txt");
  CHECK(azure::signature(k_key, sts) == "KzbSfDei7d6gLvgWhgPicCVWq/cfydN/vXWCS9hnrWI=");
  CHECK(azure::authorization("devstoreaccount1", k_key, sts) ==
        "SharedKey devstoreaccount1:KzbSfDei7d6gLvgWhgPicCVWq/cfydN/vXWCS9hnrWI=");
}

TEST_CASE("Shared Key: a Content-Length of 0 is signed as empty, Range and If-Match in their slots") {
  azure::SignInput in;
  in.method = "GET";
  in.account = "acct";
  in.encoded_path = "/c/k";
  in.headers = {{"Range", "bytes=5-"}, {"If-Match", "\"0x8D\""}, {"Content-Length", "0"}};
  CHECK(azure::string_to_sign(in) == "GET\n\n\n\n\n\n\n\n\"0x8D\"\n\n\nbytes=5-\n/acct/c/k");
}

TEST_CASE("service SAS for one blob: the 2020-12-06 string-to-sign and the token") {
  azure::BlobSas sas;
  sas.permissions = "r";
  sas.expiry_ms = k_time + 3'600'000;
  sas.account = "devstoreaccount1";
  sas.container = "photos";
  sas.blob = "dir/my file.txt";
  CHECK(azure::sas_string_to_sign(sas) ==
        "r\n\n2023-11-14T23:13:20Z\n/blob/devstoreaccount1/photos/dir/my file.txt\n"
        "\n\nhttps,http\n2021-12-02\nb\n\n\n\n\n\n\n");
  // openssl dgst -sha256 -mac HMAC -macopt hexkey:<dev key> over the string above.
  CHECK(azure::sas_query(sas, k_key) == "sp=r&se=2023-11-14T23%3A13%3A20Z&spr=https%2Chttp&sv=2021-12-02&sr=b"
                                        "&sig=y9oh9rw538achGn05Mak2nQMaj6q6xxI4pCbXbTE%2BcQ%3D");
}
