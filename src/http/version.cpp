#include <curl/curl.h>
#include <lodge/http/version.hpp>

namespace lodge::http {

CurlVersion curl_version() {
  const curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
  CurlVersion v;
  if (info == nullptr) return v;
  if (info->version != nullptr) v.version = info->version;
  if (info->ssl_version != nullptr) v.tls = info->ssl_version;
  return v;
}

} // namespace lodge::http
