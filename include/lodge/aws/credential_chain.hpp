#pragma once
// The AWS credentials (S3's, SQS's) as the AWS SDKs' default chain finds them, one provider
// after another:
// https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html
//
//   1. environment           AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY [+ AWS_SESSION_TOKEN]
//   2. assume role           the profile's role_arn + source_profile | credential_source -> STS AssumeRole
//   3. web identity          AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, or the profile's
//                            web_identity_token_file + role_arn -> STS AssumeRoleWithWebIdentity
//   4. shared credentials    static keys in the credentials file's [PROFILE]
//   5. credential_process    the profile's program, printing the credentials as JSON
//   6. shared config         static keys in the config file's [profile PROFILE]
//   7. container             AWS_CONTAINER_CREDENTIALS_RELATIVE_URI | _FULL_URI (ECS, EKS)
//   8. instance metadata     IMDSv2 on EC2 (unless AWS_EC2_METADATA_DISABLED=true)
//
// The first provider that is configured answers, with credentials or an error: a provider
// that is configured but fails never hands over to another identity.

#include <cstdint>
#include <functional>
#include <lodge/aws/aws_config.hpp>
#include <lodge/aws/signer.hpp>
#include <lodge/error.hpp>
#include <lodge/http/transport.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lodge::aws {

using Env = std::map<std::string, std::string>;

// One provider of the chain as `lodge config --explain` shows it.
struct ProviderStep {
  std::string provider; // "environment", "shared credentials file PATH", ...
  bool used = false;
  std::string why; // why it was used or not
};

struct CredentialChain {
  Result<Credentials> credentials{Error(Errc::config_invalid, "no S3 credentials")};
  std::vector<ProviderStep> steps; // in the order they were asked, up to the one that answered
};

// How the chain reaches the network. STS is at `sts_endpoint` (the s3:// store sets
// AWS_ENDPOINT_URL_STS, else its configured endpoint; "" is https://sts.REGION.amazonaws.com).
// Without `metadata_transport` the container and instance metadata providers are not asked.
struct ChainAccess {
  std::string sts_endpoint;
  std::string region = "us-east-1";
  std::function<std::unique_ptr<http::Transport>()> sts_transport;
  // A transport for the container and instance metadata services: never through a proxy,
  // connect and total timeouts of timeout_ms.
  std::function<std::unique_ptr<http::Transport>(int64_t timeout_ms)> metadata_transport;
  std::function<int64_t()> now_ms; // the clock that signs STS calls and names sessions
};

// STS AssumeRoleWithWebIdentity: an unsigned form POST; the temporary credentials with
// their expiry. STORAGE_UNAVAILABLE when STS cannot be reached, ACCESS_DENIED when it
// refuses, naming the role (never the token).
[[nodiscard]] Result<Credentials> assume_role_with_web_identity(const ChainAccess &sts,
                                                                const std::string &role_arn,
                                                                const std::string &session_name,
                                                                const std::string &token);

struct AssumeRoleInput {
  std::string role_arn;
  std::string session_name;
  std::string external_id;  // "" sends none
  int duration_seconds = 0; // 0 sends none (STS's default, one hour)
};

// STS AssumeRole, signed (SigV4, service sts) with `source`.
[[nodiscard]] Result<Credentials> assume_role(const ChainAccess &sts, const Credentials &source,
                                              const AssumeRoleInput &in);

// The credential_process contract: `command` run by /bin/sh, its stdout one JSON object
// {"Version": 1, "AccessKeyId", "SecretAccessKey"[, "SessionToken"][, "Expiration"]}.
// `where` names the setting in errors; a non-zero exit, a timeout (timeout_ms) or a bad
// document is CONFIG_INVALID naming the exit and the program's last line of stderr (never
// its stdout, which holds the secret).
[[nodiscard]] Result<Credentials> run_credential_process(const std::string &command, const std::string &where,
                                                         int64_t timeout_ms = 60'000);

// A credentials document as the container and instance metadata services answer it:
// AccessKeyId, SecretAccessKey, Token, Expiration (ISO 8601). `what` names the source.
[[nodiscard]] Result<Credentials> parse_credentials_json(const std::string &body, const std::string &what);

// "2026-12-02T10:00:00Z" (fractions and an offset accepted) as ms since the epoch.
[[nodiscard]] std::optional<int64_t> parse_iso8601_ms(const std::string &s);

// The chain above over the environment and the shared files' selected profile. CONFIG_INVALID
// when nothing answers, naming every place looked at.
[[nodiscard]] CredentialChain resolve_credential_chain(const Env &env, const AwsShared &shared,
                                                       const ChainAccess *access = nullptr);

} // namespace lodge::aws
