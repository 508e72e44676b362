#pragma once
// Azure Storage Shared Key and service SAS signing, one pure function per step, time
// passed in.
// https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key
// https://learn.microsoft.com/rest/api/storageservices/create-service-sas

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lodge::azure {

using Params = std::vector<std::pair<std::string, std::string>>;

// The REST API version every request names (x-ms-version) and a service SAS is signed for.
inline constexpr const char *k_api_version = "2021-12-02";

// "Sun, 11 Oct 2009 21:49:13 GMT" (RFC 1123) for x-ms-date.
[[nodiscard]] std::string ms_date(int64_t epoch_ms);
// "2009-10-11T21:49:13Z", as SAS st/se carry times.
[[nodiscard]] std::string iso8601_seconds(int64_t epoch_ms);

// Every x-ms-* header: names lowercased, sorted, values trimmed with runs of whitespace
// folded to one space, each "name:value\n".
[[nodiscard]] std::string canonicalized_headers(const Params &headers);
// "/ACCOUNT" + the encoded URI path as sent (on a path-style endpoint it starts with the
// account again), then per query parameter, names lowercased and sorted, values decoded:
// "\nname:v1,v2" (values of a repeated name sorted and joined with ',').
[[nodiscard]] std::string canonicalized_resource(std::string_view account, std::string_view encoded_path,
                                                 const Params &raw_query);

struct SignInput {
  std::string method;
  std::string account;
  std::string encoded_path; // as in the request URI, starting with '/'
  Params raw_query;         // decoded names and values
  Params headers;           // every header sent (names in any case)
};

// VERB, the 11 standard headers (Content-Length empty when 0), the canonicalized
// x-ms- headers and the canonicalized resource, '\n'-separated as the reference gives.
[[nodiscard]] std::string string_to_sign(const SignInput &in);
// base64(HMAC-SHA256(key, utf8(sts))); key is the decoded account key.
[[nodiscard]] std::string signature(std::string_view key, std::string_view sts);
// "SharedKey ACCOUNT:SIGNATURE".
[[nodiscard]] std::string authorization(std::string_view account, std::string_view key, std::string_view sts);

// A service SAS for one blob (sr=b), version k_api_version, https and http allowed.
struct BlobSas {
  std::string permissions; // e.g. "r"
  int64_t start_ms = 0;    // 0: no st
  int64_t expiry_ms = 0;
  std::string account;
  std::string container;
  std::string blob; // decoded name
};
// The string-to-sign of a service SAS of version 2020-12-06 or later:
// sp, st, se, "/blob/ACCOUNT/CONTAINER/BLOB", si, sip, spr, sv, sr, snapshot time,
// encryption scope, rscc, rscd, rsce, rscl, rsct, '\n'-separated.
[[nodiscard]] std::string sas_string_to_sign(const BlobSas &sas);
// The token's query string: sp, st (when set), se, sr=b, sv, sig — encoded.
[[nodiscard]] std::string sas_query(const BlobSas &sas, std::string_view key);

// Percent-encodes a query value or a blob path (keep_slash) as Azure expects.
[[nodiscard]] std::string url_encode(std::string_view s, bool keep_slash);

} // namespace lodge::azure
