#pragma once
// An s3:// store's settings: lodge's store keys (endpoint, region, ca_bundle, profile,
// tag_state) as the configuration file, the environment and the flags give them, and below
// them the AWS shared config file's profile (and its [services] section), as the AWS CLI v2
// resolves them. Only an s3:// store reads ~/.aws: a file:// or Azure user's is none of
// lodge's business.

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace lodge::s3 {

class AwsShared;

// A store key as given, and where it came from: "file PATH", "flag --region", "env
// AWS_REGION", "file PATH [profile P]", "the store options", or "default".
struct Given {
  std::string value;
  std::string source;
};
using GivenSettings = std::map<std::string, Given>;

// The store keys an s3:// store reads (each other key given is an error: the store layer
// hands over only these).
inline constexpr const char *k_setting_keys[] = {"endpoint", "region", "ca_bundle", "profile", "tag_state"};

struct S3Settings {
  std::string endpoint;
  std::string region = "us-east-1";
  std::string ca_bundle;
  std::string profile;                   // as configured (--profile, AWS_PROFILE, the file); "" when none
  std::string credentials_file;          // the AWS shared credentials file looked at
  std::string aws_config_file;           // the AWS shared config file looked at
  std::string addressing_style = "auto"; // auto (virtual on AWS, path elsewhere), path, virtual
  int max_attempts = 4;                  // attempts per request, the first included
  std::string retry_mode = "standard";   // legacy, standard or adaptive (all back off alike)
  bool region_assumed = false;           // neither an endpoint nor a region was configured
  bool tag_state = false;                // tag objects lodge-state=pending, then committed once ACTIVE
  // Where each setting came from. Keys: endpoint region ca_bundle addressing_style
  // max_attempts retry_mode profile.
  std::map<std::string, std::string> sources;
  std::shared_ptr<const AwsShared> aws; // the AWS shared files and profile, as read
};

// Resolves an s3:// store's settings. `given` holds the store keys already layered by
// lodge's own precedence (flags > LODGE_* and AWS_* environment > the configuration file;
// sources "default" for none); `env` is the process environment, for AWS_ENDPOINT_URL(_S3),
// AWS_IGNORE_CONFIGURE_ENDPOINT_URLS, AWS_MAX_ATTEMPTS, AWS_RETRY_MODE and the shared files.
// Throws LodgeError(CONFIG_INVALID) naming the key (or the file and profile) and what was
// expected.
[[nodiscard]] S3Settings parse_s3_settings(const GivenSettings &given,
                                           const std::map<std::string, std::string> &env);

// Every resolved setting and where it came from, as `lodge config` shows it under "s3".
[[nodiscard]] nlohmann::json to_json(const S3Settings &s);

} // namespace lodge::s3
