#pragma once
// An s3:// store's settings: lodge's store keys (endpoint, region, ca_bundle, profile,
// tag_state) as the configuration file, the environment and the flags give them, and below
// them the AWS shared config file's profile (and its [services] section), as the AWS CLI v2
// resolves them. Only an s3:// store reads ~/.aws: a file:// or Azure user's is none of
// lodge's business.

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace lodge::aws {
class AwsShared;
}

namespace lodge::s3 {

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
  // The profile's `s3 =` transfer settings, as the AWS CLI reads them; 0 where not set.
  // Below lodge's own configuration: max_concurrent_requests is the default of --jobs,
  // multipart_chunksize of part_size, max_bandwidth of the rate limit (bytes per second).
  int max_concurrent_requests = 0;
  uint64_t multipart_threshold = 0;
  uint64_t multipart_chunksize = 0;
  uint64_t max_bandwidth = 0;
  // request_checksum_calculation (AWS_REQUEST_CHECKSUM_CALCULATION, then the profile):
  // "when_supported" sends x-amz-checksum-sha256 with every upload; "when_required" sends
  // none (stores that reject flexible checksums: Ceph RGW, R2, GCS), lodge still hashes.
  std::string request_checksum_calculation = "when_supported";
  [[nodiscard]] bool sends_checksums() const { return request_checksum_calculation == "when_supported"; }
  // Where each setting came from. Keys: endpoint region ca_bundle addressing_style
  // max_attempts retry_mode profile request_checksum_calculation, and the `s3 =` keys set.
  std::map<std::string, std::string> sources;
  std::shared_ptr<const aws::AwsShared> aws; // the AWS shared files and profile, as read
};

// Resolves an s3:// store's settings. `given` holds the store keys already layered by
// lodge's own precedence (flags > LODGE_* and AWS_* environment > the configuration file;
// sources "default" for none); `env` is the process environment, for AWS_ENDPOINT_URL(_S3),
// AWS_IGNORE_CONFIGURE_ENDPOINT_URLS, AWS_MAX_ATTEMPTS, AWS_RETRY_MODE,
// AWS_REQUEST_CHECKSUM_CALCULATION and the shared files.
// Throws LodgeError(CONFIG_INVALID) naming the key (or the file and profile) and what was
// expected.
[[nodiscard]] S3Settings parse_s3_settings(const GivenSettings &given,
                                           const std::map<std::string, std::string> &env);

// Every resolved setting and where it came from, as `lodge config` shows it under "s3".
[[nodiscard]] nlohmann::json to_json(const S3Settings &s);

} // namespace lodge::s3
