#include <algorithm>
#include <iterator>
#include <lodge/aws/aws_config.hpp>
#include <lodge/error.hpp>
#include <lodge/s3/settings.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>
#include <optional>

namespace lodge::s3 {
namespace {

using Env = std::map<std::string, std::string>;

[[noreturn]] void bad(const std::string &path, const std::string &what) {
  throw LodgeError(Errc::config_invalid, path + ": " + what);
}

std::string env_or(const Env &env, const std::string &k) {
  auto it = env.find(k);
  return it == env.end() ? std::string{} : it->second;
}

bool aws_bool(const std::string &v, const std::string &where) {
  auto l = util::to_lower(util::trim(v));
  if (l == "true") return true;
  if (l == "false") return false;
  bad(where, "expected true or false, got '" + util::escape_for_terminal(v) + "'");
}

// The AWS endpoint settings, env and file: dropped when the profile or the environment says
// to ignore them; otherwise the profile's endpoint where nothing above it named one.
void apply_endpoint(S3Settings &s, const aws::AwsShared &shared, const Env &env, bool endpoint_from_aws,
                    const std::string &file_endpoint, const std::string &file_endpoint_source) {
  auto &src = s.sources;
  bool ignore = false;
  if (auto v = env_or(env, "AWS_IGNORE_CONFIGURE_ENDPOINT_URLS"); !v.empty())
    ignore = aws_bool(v, "AWS_IGNORE_CONFIGURE_ENDPOINT_URLS");
  else if (auto f = shared.get("ignore_configure_endpoints_urls"))
    ignore = aws_bool(f->value, f->source + " ignore_configure_endpoints_urls");
  if (ignore && endpoint_from_aws) { // the CLI drops the AWS endpoint settings, env and file
    s.endpoint = file_endpoint;
    if (file_endpoint_source == "default")
      src.erase("endpoint");
    else
      src["endpoint"] = file_endpoint_source;
  }
  if (!src.contains("endpoint") && !ignore) {
    auto e = shared.service("s3", "endpoint_url");
    if (!e) e = shared.get("endpoint_url");
    if (e) {
      s.endpoint = e->value;
      src["endpoint"] = e->source;
    }
  }
}

// The profile's `s3 =` transfer settings, each checked as the CLI would, and the checksum
// setting (the environment over the profile). An error names the file, profile and key.
void apply_transfer(S3Settings &s, const aws::AwsShared &shared, const Env &env) {
  auto &src = s.sources;
  auto got = [&](const char *key) { return shared.sub("s3", key); };
  if (auto v = got("max_concurrent_requests")) {
    auto n = util::parse_int(v->value);
    if (!n || *n < 1 || *n > 256)
      bad(v->source, "expected an integer from 1 to 256 (lodge's --jobs), got '" +
                         util::escape_for_terminal(v->value) + "'");
    s.max_concurrent_requests = static_cast<int>(*n);
    src["max_concurrent_requests"] = v->source;
  }
  auto size = [&](const char *key, uint64_t &field, uint64_t min, const char *why) {
    auto v = got(key);
    if (!v) return;
    auto n = aws::parse_aws_size(v->value);
    if (!n)
      bad(v->source,
          "expected a size like 8MB or 16777216 (bytes), got '" + util::escape_for_terminal(v->value) + "'");
    if (*n < min || *n > (5ULL << 30))
      bad(v->source, std::string(why) + ", got '" + util::escape_for_terminal(v->value) + "'");
    field = *n;
    src[key] = v->source;
  };
  size("multipart_threshold", s.multipart_threshold, 1, "expected at most 5GB");
  size("multipart_chunksize", s.multipart_chunksize, 5ULL << 20,
       "S3 takes parts of 5MB (5242880 bytes) to 5GB");
  if (auto v = got("max_bandwidth")) {
    auto n = aws::parse_aws_rate(v->value);
    if (!n)
      bad(v->source, "expected bytes per second like 50MB/s, 300KB/s or 1048576, got '" +
                         util::escape_for_terminal(v->value) + "'");
    s.max_bandwidth = *n;
    src["max_bandwidth"] = v->source;
  }
  std::optional<aws::AwsValue> calc;
  if (auto v = env_or(env, "AWS_REQUEST_CHECKSUM_CALCULATION"); !v.empty())
    calc = aws::AwsValue{v, "env AWS_REQUEST_CHECKSUM_CALCULATION"};
  else
    calc = shared.get("request_checksum_calculation");
  if (calc) {
    auto l = util::to_lower(util::trim(calc->value));
    if (l != "when_supported" && l != "when_required")
      bad(calc->source, "request_checksum_calculation: expected when_supported or when_required, got '" +
                            util::escape_for_terminal(calc->value) + "'");
    s.request_checksum_calculation = l;
    src["request_checksum_calculation"] = calc->source;
  }
}

// Below lodge's own settings: the AWS shared config file's profile, and AWS_MAX_ATTEMPTS /
// AWS_RETRY_MODE above it.
void apply_aws_shared(S3Settings &s, const Env &env, bool endpoint_from_aws, const std::string &file_endpoint,
                      const std::string &file_endpoint_source) {
  auto &src = s.sources;
  aws::AwsShared::Inputs ai;
  ai.env = env;
  // --profile, or lodge's config file when no AWS_PROFILE / AWS_DEFAULT_PROFILE overrode it.
  if (src.contains("profile") &&
      (src["profile"].rfind("flag ", 0) == 0 || src["profile"].rfind("file ", 0) == 0)) {
    ai.profile = s.profile;
    ai.profile_source = src["profile"];
  }
  auto shared = std::make_shared<aws::AwsShared>(aws::AwsShared::load(ai));
  s.credentials_file = shared->credentials_file().path;
  s.aws_config_file = shared->config_file().path;
  src["profile"] = shared->profile_source();

  apply_endpoint(s, *shared, env, endpoint_from_aws, file_endpoint, file_endpoint_source);
  auto from_file = [&](std::string &field, const char *key, const char *name) {
    if (src.contains(key)) return;
    if (auto v = shared->get(name)) {
      field = v->value;
      src[key] = v->source;
    }
  };
  from_file(s.region, "region", "region");
  from_file(s.ca_bundle, "ca_bundle", "ca_bundle");
  if (auto v = shared->sub("s3", "addressing_style")) {
    auto l = util::to_lower(v->value);
    if (l != "auto" && l != "path" && l != "virtual")
      bad(v->source, "expected auto, path or virtual, got '" + util::escape_for_terminal(v->value) + "'");
    s.addressing_style = l;
    src["addressing_style"] = v->source;
  }
  std::optional<aws::AwsValue> attempts;
  if (auto v = env_or(env, "AWS_MAX_ATTEMPTS"); !v.empty())
    attempts = aws::AwsValue{v, "env AWS_MAX_ATTEMPTS"};
  else
    attempts = shared->get("max_attempts");
  if (attempts) {
    auto n = util::parse_int(attempts->value);
    if (!n || *n < 1 || *n > 100) bad(attempts->source, "max_attempts: expected an integer from 1 to 100");
    s.max_attempts = static_cast<int>(*n);
    src["max_attempts"] = attempts->source;
  }
  std::optional<aws::AwsValue> mode;
  if (auto v = env_or(env, "AWS_RETRY_MODE"); !v.empty())
    mode = aws::AwsValue{v, "env AWS_RETRY_MODE"};
  else
    mode = shared->get("retry_mode");
  if (mode) {
    auto l = util::to_lower(mode->value);
    if (l != "legacy" && l != "standard" && l != "adaptive")
      bad(mode->source, "retry_mode: expected legacy, standard or adaptive, got '" +
                            util::escape_for_terminal(mode->value) + "'");
    s.retry_mode = l;
    src["retry_mode"] = mode->source;
  }
  apply_transfer(s, *shared, env);
  s.region_assumed = !src.contains("region") && !src.contains("endpoint");
  s.aws = std::move(shared);
}

void check_known(const GivenSettings &given) {
  for (const auto &[k, g] : given) {
    if (std::find(std::begin(k_setting_keys), std::end(k_setting_keys), k) != std::end(k_setting_keys))
      continue;
    std::string known;
    for (const char *n : k_setting_keys)
      known += (known.empty() ? "" : ", ") + std::string(n);
    bad(k, "not a setting of an s3:// store (known: " + known + ")");
  }
}
} // namespace

S3Settings parse_s3_settings(const GivenSettings &given, const Env &env) {
  check_known(given);
  S3Settings s;
  auto &src = s.sources;
  auto take = [&](const char *k, std::string &field) {
    auto it = given.find(k);
    if (it == given.end() || it->second.source == "default") return;
    field = it->second.value;
    src[k] = it->second.source;
  };
  take("endpoint", s.endpoint);
  take("region", s.region);
  take("ca_bundle", s.ca_bundle);
  take("profile", s.profile);
  if (auto it = given.find("tag_state"); it != given.end() && it->second.source != "default") {
    const auto &v = it->second.value;
    if (v != "true" && v != "false") bad("tag_state", "expected true or false (got " + v + ")");
    s.tag_state = v == "true";
  }
  // AWS_ENDPOINT_URL(_S3) name an S3 endpoint: above the configuration file, below
  // LODGE_ENDPOINT and --endpoint.
  const std::string file_endpoint = s.endpoint;
  const std::string file_endpoint_source = src.contains("endpoint") ? src["endpoint"] : "default";
  bool endpoint_from_aws = false;
  if (file_endpoint_source == "default" || file_endpoint_source.rfind("file ", 0) == 0) {
    for (const char *n : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
      if (auto v = env_or(env, n); !v.empty()) {
        s.endpoint = v;
        src["endpoint"] = std::string("env ") + n;
        endpoint_from_aws = true;
        break;
      }
    }
  }
  apply_aws_shared(s, env, endpoint_from_aws, file_endpoint, file_endpoint_source);
  // Credentials come from the credential chain; a password in the endpoint would be printed
  // wherever the endpoint is (config, every store error, -vv) and recorded in the ledger's
  // binding. The endpoint is not echoed.
  if (util::log::url_has_userinfo(s.endpoint))
    bad("endpoint (" + src["endpoint"] + ")",
        "user information (user:password@ before the host) is refused in an endpoint URL; S3 takes "
        "credentials from the AWS credential chain");
  for (const char *k : {"endpoint", "region", "ca_bundle", "profile", "addressing_style", "max_attempts",
                        "retry_mode", "request_checksum_calculation"})
    if (!src.contains(k)) src[k] = "default";
  return s;
}

nlohmann::json to_json(const S3Settings &s) {
  using nlohmann::json;
  auto or_null = [](auto v) { return v == 0 ? json(nullptr) : json(v); };
  auto at = [&](const char *k, json v) {
    auto it = s.sources.find(k);
    return json{{"value", std::move(v)}, {"source", it == s.sources.end() ? "default" : it->second}};
  };
  return {
      {"endpoint", at("endpoint", s.endpoint.empty() ? json(nullptr) : json(s.endpoint))},
      {"region", at("region", s.region)},
      {"region_assumed", s.region_assumed},
      {"addressing_style", at("addressing_style", s.addressing_style)},
      {"ca_bundle", at("ca_bundle", s.ca_bundle.empty() ? json(nullptr) : json(s.ca_bundle))},
      {"profile", at("profile", s.aws ? s.aws->profile() : s.profile)},
      {"max_attempts", at("max_attempts", s.max_attempts)},
      {"retry_mode", at("retry_mode", s.retry_mode)},
      {"request_checksum_calculation", at("request_checksum_calculation", s.request_checksum_calculation)},
      // The profile's `s3 =` keys (null where not set); what lodge makes of them is under
      // the configuration's "sources".
      {"max_concurrent_requests", at("max_concurrent_requests", or_null(s.max_concurrent_requests))},
      {"multipart_threshold", at("multipart_threshold", or_null(s.multipart_threshold))},
      {"multipart_chunksize", at("multipart_chunksize", or_null(s.multipart_chunksize))},
      {"max_bandwidth", at("max_bandwidth", or_null(s.max_bandwidth))},
      {"config_file", s.aws_config_file},
      {"credentials_file", s.credentials_file}};
}

} // namespace lodge::s3
