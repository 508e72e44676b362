#include <algorithm>
#include <ctime>
#include <lodge/azure/signer.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/util/strings.hpp>
#include <map>

namespace lodge::azure {

namespace {
std::tm utc(int64_t epoch_ms) {
  auto t = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

std::string fold_whitespace(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : util::trim(v)) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}
} // namespace

std::string ms_date(int64_t epoch_ms) {
  std::tm tm = utc(epoch_ms);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return {buf, n};
}

std::string iso8601_seconds(int64_t epoch_ms) {
  std::tm tm = utc(epoch_ms);
  char buf[32];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return {buf, n};
}

std::string url_encode(std::string_view s, bool keep_slash) {
  return util::percent_encode(s, keep_slash);
}

std::string canonicalized_headers(const Params &headers) {
  std::map<std::string, std::string> sorted;
  for (const auto &[k, v] : headers) {
    auto name = util::to_lower(util::trim(k));
    if (name.rfind("x-ms-", 0) != 0) continue;
    auto &slot = sorted[name];
    slot = slot.empty() ? fold_whitespace(v) : slot + "," + fold_whitespace(v);
  }
  std::string out;
  for (const auto &[k, v] : sorted)
    out += k + ":" + v + "\n";
  return out;
}

std::string canonicalized_resource(std::string_view account, std::string_view encoded_path,
                                   const Params &raw_query) {
  std::string out = "/" + std::string(account) + std::string(encoded_path.empty() ? "/" : encoded_path);
  std::map<std::string, std::vector<std::string>> params;
  for (const auto &[k, v] : raw_query)
    params[util::to_lower(k)].push_back(v);
  for (auto &[k, values] : params) {
    std::sort(values.begin(), values.end());
    out += "\n" + k + ":";
    for (size_t i = 0; i < values.size(); ++i)
      out += (i ? "," : "") + values[i];
  }
  return out;
}

std::string string_to_sign(const SignInput &in) {
  auto header = [&](std::string_view name) {
    for (const auto &[k, v] : in.headers)
      if (util::to_lower(k) == name) return util::trim(v);
    return std::string{};
  };
  std::string length = header("content-length");
  if (length == "0") length.clear(); // since version 2015-02-21
  std::string s = in.method + "\n";
  s += header("content-encoding") + "\n";
  s += header("content-language") + "\n";
  s += length + "\n";
  s += header("content-md5") + "\n";
  s += header("content-type") + "\n";
  s += header("date") + "\n";
  s += header("if-modified-since") + "\n";
  s += header("if-match") + "\n";
  s += header("if-none-match") + "\n";
  s += header("if-unmodified-since") + "\n";
  s += header("range") + "\n";
  s += canonicalized_headers(in.headers);
  s += canonicalized_resource(in.account, in.encoded_path, in.raw_query);
  return s;
}

std::string signature(std::string_view key, std::string_view sts) {
  return crypto::to_base64(crypto::hmac_sha256(key, sts));
}

std::string authorization(std::string_view account, std::string_view key, std::string_view sts) {
  return "SharedKey " + std::string(account) + ":" + signature(key, sts);
}

std::string sas_string_to_sign(const BlobSas &sas) {
  std::string s;
  s += sas.permissions + "\n";
  s += (sas.start_ms ? iso8601_seconds(sas.start_ms) : std::string{}) + "\n";
  s += iso8601_seconds(sas.expiry_ms) + "\n";
  s += "/blob/" + sas.account + "/" + sas.container + "/" + sas.blob + "\n";
  s += "\n";                              // signedIdentifier
  s += "\n";                              // signedIP
  s += "https,http\n";                    // signedProtocol
  s += std::string(k_api_version) + "\n"; // signedVersion
  s += "b\n";                             // signedResource
  s += "\n";                              // signedSnapshotTime
  s += "\n";                              // signedEncryptionScope
  s += "\n\n\n\n";                        // rscc, rscd, rsce, rscl
  // rsct: empty, the last field has no newline after it
  return s;
}

std::string sas_query(const BlobSas &sas, std::string_view key) {
  std::string q = "sp=" + url_encode(sas.permissions, false);
  if (sas.start_ms) q += "&st=" + url_encode(iso8601_seconds(sas.start_ms), false);
  q += "&se=" + url_encode(iso8601_seconds(sas.expiry_ms), false);
  q += "&spr=" + url_encode("https,http", false);
  q += "&sv=" + std::string(k_api_version);
  q += "&sr=b";
  q += "&sig=" + url_encode(signature(key, sas_string_to_sign(sas)), false);
  return q;
}

} // namespace lodge::azure
